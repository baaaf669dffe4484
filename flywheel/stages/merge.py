"""merge: ``allocate.sharing: federated`` merges the just-trained versions of same-architecture
targets, weighted by their latest validation standing (flywheel/learning/merging.py)."""

from __future__ import annotations

from flywheel.ground.records import versioned
from flywheel.learning import merging
from flywheel.run.context import Context, stage
from flywheel.run.results import MergeGroup, MergeResult, VersionEval
from flywheel.stages.train import serve_adapter


@stage("merge", MergeResult)
def merge_targets(ctx: Context, k: int) -> MergeResult:
    """The trained checkpoints move to ``models/.premerge/`` first and are only read from there,
    so a rerun after a kill writes the same merged files."""
    a = ctx.cfg.allocate
    if a.sharing != "federated":
        return MergeResult([])
    sources, outputs = {}, {}
    for t in ctx.roster.targets:
        v = versioned(t, k)
        sources[t], outputs[t] = ctx.store.premerge_dir(v), ctx.store.model_dir(v)
        if not sources[t].exists():
            sources[t].parent.mkdir(parents=True, exist_ok=True)
            outputs[t].rename(sources[t])
    report = []
    for group in merging.groups(sources):
        acc = {t: _standing(ctx.version_eval(ctx.current_version(t, k))) for t in group}
        weights = merging.performance_weights(acc, a.merge_temperature)
        merging.merge_group({t: sources[t] for t in group}, weights, a.merge_strength, {t: outputs[t] for t in group})
        report.append(MergeGroup(group, {t: round(w, 6) for t, w in weights.items()}, acc))
    for t in ctx.roster.targets:
        if ctx.roster.config(t).serve_lora:  # the served adapter is the merged one
            serve_adapter(ctx, t, k)
    return MergeResult(report, a.merge_strength)


def _standing(ev: VersionEval | None) -> float:
    return (ev.standing("accuracy") if ev else None) or 0.0
