"""What an experiment tracker gets of a run (``tracking.kind``; flywheel/ground/tracking.py): the
config as params, and per finished iteration, from its entry of summary.json and its train
stage's record, flat metrics at step k; the trainer's logs at each target's optimizer step."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flywheel.ground.atomic import read_json
from flywheel.ground.records import PlayerVersion
from flywheel.ground.tracking import Point, Tracker, flat_params, open_tracker
from flywheel.run.context import Context, read_stage
from flywheel.run.results import IterationSummary, TrainResult, VersionEval

log = logging.getLogger("flywheel")


@contextmanager
def tracking(ctx: Context) -> Iterator[Callable[[], None]]:
    """The run's tracker open while the body runs; yields ``track()``, which logs the iterations
    the tracker lacks (nothing where ``tracking.kind`` is none). The tracker's run ends FINISHED,
    FAILED (an error) or KILLED (Ctrl-C, SIGTERM); a killed process leaves it RUNNING until resumed."""
    tracker = open_tracking(ctx)
    status = "KILLED"
    try:
        yield lambda: track(ctx, tracker)
        status = "FINISHED"
    except Exception:
        status = "FAILED"
        raise
    finally:
        if tracker is not None:
            try:
                tracker.close(status)
            except Exception as e:  # noqa: BLE001 - never hides the run's own outcome
                log.warning("tracking: could not end the run in %s (%s: %s)", tracker.uri, type(e).__name__, e)


def open_tracking(ctx: Context) -> Tracker | None:
    """The run's tracker (None when ``tracking.kind`` is none), with the config as its params."""
    cfg = ctx.cfg
    return open_tracker(cfg.tracking, ctx.store, Path(cfg.run.root), str(cfg.run.name or ctx.store.root.name),
                        flat_params(cfg.model_dump(mode="json")))


def track(ctx: Context, tracker: Tracker | None) -> None:
    """Log every iteration of summary.json that the tracker does not have whole. A tracker that
    fails is warned about, never stops the run: the next call (a later iteration, ``--resume``)
    logs what is missing."""
    if tracker is None:
        return
    try:
        have = tracker.logged()
        entries = [IterationSummary.from_json(e) for e in (read_json(ctx.store.summary_path) or {}).get("iterations", [])]
        before: dict[str, int] = {}  # per target, optimizer steps of the iterations before
        for entry in sorted(entries, key=lambda e: e.iteration):
            k = entry.iteration
            if k not in have:
                trained = read_stage(ctx.store, k, "train", TrainResult) if k > 0 else None
                tracker.log_iteration(k, iteration_points(entry, trained, before))
            for t, n in entry.train_steps.items():
                before[t] = before.get(t, 0) + n
    except Exception as e:  # noqa: BLE001 - the tracker is a copy; the run directory has it all
        log.warning("tracking: could not log to %s (%s: %s); the run goes on, and the next iteration or --resume "
                    "logs what is missing", tracker.uri, type(e).__name__, e)


def iteration_points(entry: IterationSummary, trained: TrainResult | None, before: dict[str, int]) -> list[Point]:
    """Iteration k's metrics at step k: per player (a target by its name, the version made in k)
    eval accuracy (overall, by category), Elo with its interval, validation figures; battles and
    data; per target training steps and loss, allocation, promotion and its bandit arms' shares;
    the judge's diagnostics; usage and cost. The trainer's logs (``trainer/<target>/<phase>/<key>``)
    at the target's optimizer step over the run (``before``: its steps before iteration k)."""
    k = entry.iteration
    out: dict[str, float] = {}
    for model, v in {**entry.eval, **entry.opponents_eval}.items():
        player_points(out, PlayerVersion.parse(model).name, v)
    out |= {"battles/planned": entry.battles, "battles/failed": entry.failed_battles,
            "data/sft_examples": entry.sft_examples, "data/dpo_pairs": entry.dpo_pairs, "time/iteration_s": entry.wall_s}
    for t, n in entry.train_steps.items():
        out[f"train/{t}/steps"] = n
    for t, info in entry.training.items():
        flatten(out, f"train/{t}", {key: value for key, value in info.items() if key != "method"})
    for t, r in (trained.targets.items() if trained else []):
        out[f"train/{t}/examples"] = r.examples
        if r.loss is not None:
            out[f"train/{t}/loss"] = r.loss
    if entry.allocation is not None:
        a = entry.allocation
        for t in a.shares:
            flatten(out, f"allocation/{t}", {"share": a.shares.get(t), "train_steps": a.train_steps.get(t),
                                             "battles": a.battles.get(t),
                                             "learning_rate": (a.learning_rates or {}).get(t)})
    for t, p in (entry.promotion.targets.items() if entry.promotion else []):
        out[f"promotion/{t}/promoted"] = float(p.promoted)
    for g in (entry.merge.groups if entry.merge else []):
        for t, w in g.weights.items():
            out[f"merge/{t}/weight"] = w
    for kind, per_target in (("bandit", entry.bandit), ("askers", entry.askers or {})):
        for t, arms in per_target.items():
            for arm in arms:
                flatten(out, f"{kind}/{t}/{arm['arm']}", {"share": arm.get("share"), "value": arm.get("value")})
    flatten(out, "judge", entry.judge)
    usage: dict[str, dict[str, float]] = {}
    for player, counts in entry.usage.items():  # a target's versions together
        mine = usage.setdefault(PlayerVersion.parse(player).name, {})
        for key, value in counts.items():
            mine[key] = mine.get(key, 0) + value
    flatten(out, "usage", usage)
    out["cost/usd"] = sum(c.get("cost_usd", 0.0) for c in usage.values())
    points = [Point(key, value, k) for key, value in out.items()]
    for t, r in (trained.targets.items() if trained else []):
        for row in r.log or []:
            points += [Point(f"trainer/{t}/{row['phase']}/{key}", value, before.get(t, 0) + int(row["step"]))
                       for key, value in row.items() if key not in ("phase", "step")]
    return points


def player_points(out: dict[str, float], player: str, v: VersionEval) -> None:
    """One player's figures on the eval and validation splits, and its Elo with its 95% interval."""
    flatten(out, f"eval/{player}", {"accuracy": v.accuracy, "loss": v.eval_loss})
    flatten(out, f"eval/{player}/accuracy", v.accuracy_by_category)
    flatten(out, f"eval/{player}/accuracy/turn", {str(i): a for i, a in enumerate(v.accuracy_by_turn or [], 1)})
    for way, acc in ((("own_answer", v.turn2.own_answer), ("fixed", v.turn2.fixed)) if v.turn2 else ()):
        if acc is not None:
            flatten(out, f"eval/{player}/turn_2/{way}", {"accuracy": acc.accuracy, "lower": acc.lower, "upper": acc.upper})
    if v.elo is not None:
        out[f"elo/{player}"] = v.elo
    if v.elo_ci:
        out[f"elo/{player}/lower"], out[f"elo/{player}/upper"] = v.elo_ci
    flatten(out, f"elo/{player}/subset", v.elo_by_subset)
    if v.validation is not None:
        val = v.validation
        flatten(out, f"validation/{player}", {"accuracy": val.accuracy, "loss": val.loss})
        flatten(out, f"validation/{player}/accuracy", val.accuracy_by_category)
    flatten(out, f"games/{player}", v.games or {})


def flatten(out: dict[str, float], prefix: str, tree: dict[str, Any]) -> None:
    """The numbers of a nested dict as ``prefix/key/...`` (booleans as 0 and 1); text, lists and
    missing values are left out."""
    for key, value in tree.items():
        if isinstance(value, dict):
            flatten(out, f"{prefix}/{key}", value)
        elif isinstance(value, int | float):
            out[f"{prefix}/{key}"] = float(value)
