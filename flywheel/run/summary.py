"""summary.json: one entry per finished iteration (what it did, what it reached, what it cost),
and the diagnostics that go into it."""

from __future__ import annotations

from typing import Any

from flywheel.ground.atomic import atomic_write_json, read_json
from flywheel.ground.records import PlayerVersion, team_members
from flywheel.ground.store import RunStore
from flywheel.learning.allocation import Allocation
from flywheel.run.context import Context, read_stage
from flywheel.run.results import CurateResult, EvalResult, IterationSummary, MergeResult, PromoteResult, TrainResult
from flywheel.run.selectors import battles_per, load_selector
from judges.build import build_verifier
from judges.cascade import CascadeJudge
from judges.cascade_report import cascade_section
from judges.diagnostics import diagnose


def record_iteration(ctx: Context, k: int, wall_s: float) -> IterationSummary:
    """Append iteration ``k`` to summary.json (replacing an entry a killed run left behind)."""
    # select, battle, judge and reward run per round (select-r1, ...); the plans and logs cover them.
    store = ctx.store
    curated = read_stage(store, k, "curate", CurateResult)
    trained = read_stage(store, k, "train", TrainResult)
    evaluated = read_stage(store, k, "evaluate", EvalResult)
    evals = evaluated.eval if evaluated else {}
    specs = store.plan(k) or []
    entry = IterationSummary(
        iteration=k,
        battles=len(specs),
        failed_battles=sum(1 for b in store.battles(k, "train") if not b.ok),
        sft_examples=curated.sft_examples if curated else 0,
        dpo_pairs=curated.dpo_pairs if curated else 0,
        train_steps={t: trained.steps(t) if trained else 0 for t in ctx.roster.targets},
        eval={m: v for m, v in evals.items() if PlayerVersion.parse(m).k is not None},
        opponents_eval={m: v for m, v in evals.items() if PlayerVersion.parse(m).k is None},
        allocation=read_stage(store, k, "allocate", Allocation),
        merge=read_stage(store, k, "merge", MergeResult),
        arms=battles_per(specs, "arm"),
        usage=usage_summary(store, k),
        judge=judge_report(ctx, k),
        bandit=bandit_report(ctx, k) if k > 0 else {},
        wall_s=round(wall_s, 2),
        current={t: ctx.current_version(t, k + 1) for t in ctx.roster.targets},
        promotion=read_stage(store, k, "promote", PromoteResult),
        training={t: {"method": ctx.cfg.train.method_of(k), "rewards": r.rewards, "reward_model": r.reward_model,
                      **({"sampling": r.sampling} if r.sampling else {})}
                  for t, r in (trained.targets.items() if trained and k > 0 else [])},
        askers=asker_report(ctx, k) if k > 0 and len(ctx.cfg.world.conversation.askers) > 1 else None,
    )
    data = read_json(store.summary_path) or {"run_id": ctx.cfg.run.name, "targets": ctx.roster.targets, "iterations": []}
    data["iterations"] = [e for e in data["iterations"] if e["iteration"] != k] + [entry.to_json()]
    data["iterations"].sort(key=lambda e: e["iteration"])
    atomic_write_json(store.summary_path, data)
    return entry


def judge_report(ctx: Context, k: int) -> dict[str, Any]:
    """Iteration ``k``'s judge diagnostics: invalid verdicts, position flips, length bias,
    self-preference and (for panels) agreement, over its train and eval battles; a cascade's tiers."""
    verifier = build_verifier(ctx.cfg.judge.verifier)
    judgments = ctx.store.judgments(k)
    out = diagnose(ctx.store.battles(k), judgments, ctx.judge.model, verifier, ctx.judge.name)
    if isinstance(ctx.judge, CascadeJudge):
        usage = usage_summary(ctx.store, k)
        metered = [sum(usage.get(f"judge:{p.name}", {}).get("cost_usd", 0.0) for p in tc.players()) or None
                   for tc in ctx.cfg.judge.cascade.tiers]
        tiers = ctx.judge.tiers
        out["cascade"] = cascade_section(judgments.values(), [t.judge.name for t in tiers], [t.price for t in tiers],
                                         metered)
    return out


def usage_summary(store: RunStore, k: int) -> dict[str, dict[str, float]]:
    """Per player, this iteration's generations, failures, API calls, retries, tokens and cost."""
    out: dict[str, dict[str, float]] = {}
    for row in store.usage():
        if row.get("iteration") != k:
            continue
        acc = out.setdefault(row["player"], {})
        for key, v in row.items():
            if key not in ("iteration", "phase", "player") and isinstance(v, int | float):
                acc[key] = round(acc.get(key, 0) + v, 6)
    return dict(sorted(out.items()))


def bandit_report(ctx: Context, k: int) -> dict[str, list[dict[str, Any]]]:
    """Per target and prompt arm: this iteration's battles and share, bandit pulls and value."""
    specs = ctx.store.plan(k) or []
    out = {}
    for t in ctx.roster.targets:
        mine = [s for s in specs
                if t in {PlayerVersion.parse(m).name for m in team_members(s.model_a) + team_members(s.model_b)}]
        counts = battles_per(mine, "arm")
        sel = load_selector(ctx, t, k, 10**9)
        out[t] = [{**st, "battles": counts.get(st["arm"], 0),
                   "share": round(counts.get(st["arm"], 0) / max(len(mine), 1), 4)} for st in sel.prompt.stats()]
    return out


def asker_report(ctx: Context, k: int) -> dict[str, list[dict[str, Any]]]:
    """Per target and asker (several askers): this iteration's battles and share, bandit pulls and value."""
    specs = ctx.store.plan(k) or []
    out = {}
    for t in ctx.roster.targets:
        mine = [s for s in specs if t in (PlayerVersion.parse(s.model_a).name, PlayerVersion.parse(s.model_b).name)]
        counts = battles_per(mine, "asker")
        sel = load_selector(ctx, t, k, 10**9)
        out[t] = [{**st, "battles": counts.get(st["arm"], 0),
                   "share": round(counts.get(st["arm"], 0) / max(len(mine), 1), 4)}
                  for st in (sel.askers.stats() if sel.askers is not None else [])]
    return out


def completed_iterations(store: RunStore) -> list[int]:
    return [e["iteration"] for e in (read_json(store.summary_path) or {}).get("iterations", [])]
