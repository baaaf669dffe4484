"""judge: the judge decides one round's battles (shard by shard, as they were played); the judge
guard checks the round's verdicts before anything learns from them (a cascade's tiers first)."""

from __future__ import annotations

from dataclasses import replace

from flywheel.arena.battles import judge_batch
from flywheel.ground.atomic import atomic_write_json
from flywheel.ground.records import Battle, Judgment
from flywheel.ground.store import iter_name
from flywheel.run.context import Context, cascade_guard_stage, stage, worker_context
from flywheel.run.results import JudgeResult
from flywheel.stages.battle import shard_count
from judges.build import build_verifier
from judges.cascade import CascadeJudge
from judges.cascade_report import low_agreement, tier_figures
from judges.guard import JudgeGuardError, check


def judge_shard(run_dir: str, k: int, rnd: int, i: int) -> int:
    """Judge the battles of shard ``i`` of round ``rnd`` into ``judgments/`` (their judgments go
    to no other file, so only this shard's battles are read). Failed battles are not judged."""
    ctx = worker_context(run_dir)
    name = ctx.store.shard_name(k, rnd, i)
    if ctx.store.shard_exists("judgments", name):
        return 0
    todo = [b for b in ctx.store.read_shard("battles", name, Battle) if b.ok]
    cache = ctx.store.judge_outputs
    cache.reads = not ctx.store.stage_path(k, f"judge-guard-r{rnd}").exists()  # stopped before: no cached verdicts
    try:
        judge_batch(ctx.judge, ctx.store, todo, k, "train", name)
    finally:
        cache.reads = True
    return len(todo)


@stage("judge", JudgeResult, per_round=True)
def judge_round(ctx: Context, k: int, rnd: int) -> JudgeResult:
    """Judge every shard of the round not judged yet (as ``battle_round``), then guard the round's
    verdicts (the select stage's ``reward_round`` then rewards the bandits with them)."""
    n = shard_count(ctx, k, rnd)
    new = sum(judge_shard(str(ctx.store.root), k, rnd, i) for i in range(n))
    guard_round(ctx, k, rnd, n)
    js = ctx.store.judgments(k, "train")
    counts: dict[str, int] = {}
    for j in js.values():
        key = j.winner or "invalid"
        counts[key] = counts.get(key, 0) + 1
    return JudgeResult(len(js), new, counts)


def guard_round(ctx: Context, k: int, rnd: int, n: int) -> None:
    """The judge guard (judges/guard.py) over round ``rnd``'s verdicts. Where a limit is broken,
    the round's verdicts leave the log (``quarantine/``), the report is kept
    (``stages/judge-guard-r<rnd>.json``) and the run stops before anything learns from them; on
    resume the round is judged again without the judge cache."""
    if ctx.cfg.judge.kind in ("verifier", "game"):  # exact judges: nothing to guard
        return
    names = [ctx.store.shard_name(k, rnd, i) for i in range(n)]
    tiers = guard_tiers(ctx, k, rnd, n) if ctx.cfg.judge.kind == "cascade" else []
    battles = [b for name in names for b in ctx.store.read_shard("battles", name, Battle)]
    judgments = {j.battle_id: j for name in names for j in ctx.store.read_shard("judgments", name, Judgment)}
    report = check(battles, judgments, ctx.cfg.judge, build_verifier(ctx.cfg.judge.verifier))
    report = replace(report, problems=tiers + report.problems)
    if not report.problems:
        return
    why = f"{iter_name(k)}-r{rnd}"
    attempt = ctx.store.quarantine_attempts(why)
    folder = ctx.store.quarantine_judgments(names, f"{why}-{attempt}")
    atomic_write_json(ctx.store.stage_path(k, f"judge-guard-r{rnd}"), {**report.to_json(), "quarantine": str(folder)})
    raise JudgeGuardError(
        f"judge guard stopped iteration {k}, round {rnd} ({report.judged} model verdicts): "
        + "; ".join(report.problems)
        + f". Nothing was trained on them; they were moved to {folder}. Fix the judge (judge.* in "
        f"{ctx.store.config_path}: another model or template, or the limits), then "
        f"`flywheel run --resume {ctx.store.root}`: the round is judged again, without cached verdicts.")


def guard_tiers(ctx: Context, k: int, rnd: int, n: int) -> list[str]:
    """The cascade's guard: each earlier tier's agreement with the last tier on its audited battles,
    over iteration ``k``'s rounds so far. A tier under ``judge.cascade.min_agreement`` (from
    ``min_audits`` audits) is, with ``on_low_agreement: stop``, a problem the judge guard stops on
    (returned); with ``escalate``, turned off for the rest of the run (recorded in
    ``stages/judge-cascade-r<rnd>.json``), and the round's verdicts leave the log (``quarantine/``)
    and are judged again without it (its cached outputs reused), until no tier is under the floor."""
    cc, judge = ctx.cfg.judge.cascade, ctx.judge
    assert isinstance(judge, CascadeJudge)
    for _ in judge.tiers:  # each pass turns one tier off at least
        rows = tier_figures(ctx.store.judgments(k, "train").values(), [t.price for t in judge.tiers])
        off = {i for i, name in ctx.cascade_off() if i < len(judge.tiers) and judge.tiers[i].judge.name == name}
        low = low_agreement(rows, cc.min_agreement, cc.min_audits, off)
        if not low:
            return []
        said = [f"cascade tier {i} ({judge.tiers[i].judge.name}) agrees with the last tier on "
                f"{rows[i]['agreement']:.2f} of {rows[i]['audited']} audited battles < judge.cascade.min_agreement "
                f"{cc.min_agreement}" for i in low]
        if cc.on_low_agreement == "stop":
            return said
        why = f"{iter_name(k)}-r{rnd}-cascade"
        folder = ctx.store.quarantine_judgments([ctx.store.shard_name(k, rnd, i) for i in range(n)],
                                                f"{why}-{ctx.store.quarantine_attempts(why)}")
        path = ctx.store.stage_path(k, cascade_guard_stage(rnd))
        before = (ctx.store.stage_json(k, cascade_guard_stage(rnd)) or {}).get("off", [])
        atomic_write_json(path, {"off": before + [
            {"tier": i, "judge": judge.tiers[i].judge.name, "agreement": rows[i]["agreement"],
             "agreement_ci": rows[i]["agreement_ci"], "audited": rows[i]["audited"], "quarantine": str(folder)}
            for i in low]})
        for i in range(n):
            judge_shard(str(ctx.store.root), k, rnd, i)
    return []
