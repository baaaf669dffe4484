"""evaluate, in a Hanabi world: duplicate team battles on every eval deal, reported only.

Each target's newest version plays with itself (self-play) and with each opponent as its partner
(cross-play), each team against every opponent's self-play team on the same deal; the teams of
``world.games.hanabi.teams`` and the opponents' teams among themselves play once, the first time
they are evaluated. The leaderboard is Bradley-Terry over every eval battle so far (team rows);
beside it, each team's mean score on this iteration's deals with its 95% interval, and the score
ceiling: seats that see their own cards (``hanabi_policy.open_hand_score``) on the same deals,
in ``ratings/iter-<k>-hanabi.json``; the leaderboard's rows carry the mean and its interval too
(``mean_score``, ``score_low``, ``score_high``; absent for a team that did not play this iteration). A version's ``accuracy`` is its self-play mean score over the
maximum; its validation figure the same on the validation deals (played here, not logged).
"""

from __future__ import annotations

from itertools import combinations

from flywheel.arena.battles import judge_pending, play_battles
from flywheel.arena.evaluation import held_out_spec
from flywheel.arena.game_scores import mean_ci, team_scores
from flywheel.arena.hanabi_play import play_hanabi
from flywheel.arena.selection import partner_team
from flywheel.games.hanabi_policy import open_hand_score
from flywheel.games.hanabi_referee import parse_deal
from flywheel.ground.atomic import atomic_write_json
from flywheel.ground.records import BattleSpec, JudgedBattle, base_name, stable_id, team_name
from flywheel.ground.reports import SCORE_COLUMNS
from flywheel.ground.store import iter_name
from flywheel.maths.leaderboard import board
from flywheel.run.context import Context
from flywheel.run.results import EvalResult, Validation, VersionEval
from flywheel.worlds.game_pools import hanabi_setup


def version_teams(version: str, opponents: list[str], seats: int) -> list[tuple[str, str]]:
    """(team, the team it meets) of a target version: its self-play and its cross-play with each
    opponent, against each opponent's self-play team."""
    out = []
    for opp in opponents:
        out += [(version, opp), (partner_team(stable_id("eval-team", version, opp), version, opp, seats), opp)]
    return out


def eval_specs(ctx: Context, k: int, versions: list[str]) -> list[BattleSpec]:
    seats = ctx.cfg.world.games.hanabi.players
    opps = ctx.roster.opponents
    pairs = [pair for v in versions for pair in version_teams(v, opps, seats)]
    current = {t: ctx.current_version(t, k) for t in ctx.roster.targets}
    fixed = [(team_name([current.get(m, m) for m in t]), o) for t in ctx.cfg.world.games.hanabi.teams for o in opps]
    earlier = [b for b in ctx.store.battles(None, "eval") if b.iteration < k]  # (so a resumed eval plays the same)
    met = {b.model_a for b in earlier} | {b.model_b for b in earlier}
    fixed += list(combinations(opps, 2))
    pairs += [(t, o) for t, o in fixed if t not in met or o not in met]
    return [held_out_spec(k, "eval", t, o, p) for t, o in dict.fromkeys(pairs) for p in ctx.eval_split]


def evaluate_hanabi(ctx: Context, k: int, versions: list[str], publish) -> EvalResult:
    """The eval of iteration ``k`` (module docstring); ``publish`` writes the leaderboard."""
    play_battles(ctx.roster, ctx.store, eval_specs(ctx, k, versions), ctx.prompts, ctx.cfg.run.shard_size)
    judge_pending(ctx.judge, ctx.store, k, "eval", ctx.cfg.run.shard_size)
    top = hanabi_setup(ctx.cfg.world.games).max_score
    scores = team_scores(ctx.store.judged(k, "eval"))
    teams = {t: mean_ci(s) for t, s in sorted(scores.items())}
    ceiling = mean_ci([open_hand_score(parse_deal(p.text)) for p in ctx.eval_split])
    every = ctx.store.judged(None, "eval")
    by_model = {r.model: r for r in board(every, ctx.cfg.rating, ctx.cfg.evaluate.bootstrap_seed)}
    evals: dict[str, VersionEval] = {}
    for m in versions + ctx.roster.opponents:
        mine = {t: v for t, v in teams.items() if base_name(m) in {base_name(x) for x in t.split("+")}}
        acc = teams.get(m, {}).get("mean_score", 0.0) / top
        evals[m] = VersionEval.rated(by_model.get(m), accuracy=acc, accuracy_by_category={"hanabi": acc},
                                     validation=_validate(ctx, m, k, top) if m in versions else None, games=mine)
    scored = {t: dict(zip(SCORE_COLUMNS, (v["mean_score"], v["ci_low"], v["ci_high"]))) for t, v in teams.items()}
    rows = [{**r.to_dict(), **scored.get(r.model, {})} for r in by_model.values()]
    atomic_write_json(ctx.store.ratings_path(f"{iter_name(k)}-hanabi.json"),
                      {"max_score": top, "ceiling_open_hands": ceiling, "teams": teams})
    publish(ctx, k, rows)
    return EvalResult(evals, rows)


def _validate(ctx: Context, version: str, k: int, top: int) -> Validation:
    """A version's mean score over the maximum, self-play and with each opponent, on the
    validation deals (played and judged here, not logged: what steers the run)."""
    seats = ctx.cfg.world.games.hanabi.players
    specs = [held_out_spec(k, "validation", t, o, p) for t, o in version_teams(version, ctx.roster.opponents, seats)
             for p in ctx.validation]
    gc = ctx.cfg.world.games
    played = [b for b in play_hanabi(ctx.roster, specs, ctx.prompts, gc.prompt, gc.max_illegal)[0] if b.ok]
    judged = [JudgedBattle(b, j) for b, j in zip(played, ctx.judge.judge(played)) if j.valid]
    mine = [s for t, games in team_scores(judged).items() if version in t.split("+") for s in games]
    acc = sum(mine) / len(mine) / top if mine else 0.0
    return Validation(len(ctx.validation), acc, {"hanabi": acc})
