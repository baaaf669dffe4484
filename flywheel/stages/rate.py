"""rate: Bradley-Terry Elo (with bootstrap CIs) and online Elo over an iteration's arena battles."""

from __future__ import annotations

from flywheel.ground.atomic import atomic_write_json
from flywheel.ground.records import base_name, team_members
from flywheel.ground.store import iter_name
from flywheel.maths.leaderboard import board, columns, online_elo
from flywheel.run.context import Context, stage
from flywheel.run.results import RateResult


@stage("rate", RateResult)
def rate_arena(ctx: Context, k: int) -> RateResult:
    """Bradley-Terry and online Elo over this iteration's arena battles; per-arm target scores."""
    judged = ctx.store.judged(k, "train")
    rc = ctx.cfg.rating
    rows = board(judged, ctx.cfg.rating, ctx.cfg.run.seed + k)
    online = online_elo(*columns(judged), k_factor=rc.online_k, scale=rc.scale, base=rc.base, init=rc.init)
    arms: dict[str, list[float]] = {}
    for jb in judged:
        seat_a = [base_name(m) for m in team_members(jb.battle.model_a)]
        target = next((t for t in ctx.roster.targets if t in seat_a), base_name(team_members(jb.battle.model_b)[0]))
        arms.setdefault(jb.battle.arm, []).append(jb.score_of(target))
    out = RateResult([r.to_dict() for r in rows], {m: round(x, 2) for m, x in online.items()},
                     {arm: round(sum(v) / len(v), 4) for arm, v in sorted(arms.items())})
    atomic_write_json(ctx.store.ratings_path(f"{iter_name(k)}-arena.json"), out.to_json())
    return out
