"""rate: Bradley-Terry Elo (with bootstrap CIs) and online Elo over an iteration's arena battles,
and the leaderboards every other stage and query fits the same way."""

from __future__ import annotations

from flywheel.ground.config import FlywheelConfig
from flywheel.maths.ratings import Rating, leaderboard, online_elo
from flywheel.ground.records import JudgedBattle, base_name
from flywheel.stages.context import Context, stage
from flywheel.stages.results import RateResult
from flywheel.ground.store import RunStore, atomic_write_json, iter_name


def columns(rows: list[JudgedBattle]) -> tuple[list[str], list[str], list[str]]:
    """The (model_a, model_b, winner) columns of judged battles; a battle of a version against
    itself (self-play in the first iteration) says nothing about ratings and is left out."""
    rows = [r for r in rows if r.battle.model_a != r.battle.model_b]
    return [r.battle.model_a for r in rows], [r.battle.model_b for r in rows], [r.winner for r in rows]


def board(cfg: FlywheelConfig, rows: list[JudgedBattle], seed: int) -> list[Rating]:
    """The configured Bradley-Terry leaderboard (``rating:``) of judged battles."""
    rc = cfg.rating
    return leaderboard(*columns(rows), rc.bootstrap_rounds, rc.ci, seed, rc.scale, rc.base, rc.init, prior=rc.prior)


def category_boards(store: RunStore, cfg: FlywheelConfig, phase: str = "eval") -> dict[str, list[dict]]:
    """Eval leaderboards per task category, over all of a run's eval battles."""
    by_cat: dict[str, list[JudgedBattle]] = {}
    for r in store.judged(None, phase):
        by_cat.setdefault(r.battle.category, []).append(r)
    return {c: [x.to_dict() for x in board(cfg, rows, cfg.evaluate.bootstrap_seed)] for c, rows in sorted(by_cat.items())}


@stage("rate", RateResult)
def rate_arena(ctx: Context, k: int) -> RateResult:
    """Bradley-Terry and online Elo over this iteration's arena battles; per-arm target scores."""
    judged = ctx.store.judged(k, "train")
    rc = ctx.cfg.rating
    rows = board(ctx.cfg, judged, ctx.cfg.run.seed + k)
    online = online_elo(*columns(judged), k_factor=rc.online_k, scale=rc.scale, base=rc.base, init=rc.init)
    arms: dict[str, list[float]] = {}
    for jb in judged:
        seat_a = base_name(jb.battle.model_a)
        target = seat_a if seat_a in ctx.roster.targets else base_name(jb.battle.model_b)
        arms.setdefault(jb.battle.arm, []).append(jb.score_of(target))
    out = RateResult([r.to_dict() for r in rows], {m: round(x, 2) for m, x in online.items()},
                     {arm: round(sum(v) / len(v), 4) for arm, v in sorted(arms.items())})
    atomic_write_json(ctx.store.ratings_path(f"{iter_name(k)}-arena.json"), out.to_json())
    return out
