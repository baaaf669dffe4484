"""select: the bandits choose one round of train battles (prompt cells x opponents) per target,
and, once the round is judged, learn from its rewards. The select stage is the only writer of the
bandits' state (``bandits/`` in the run directory; flywheel/run/selectors.py reads it back)."""

from __future__ import annotations

from flywheel.arena import bandit_rewards, selection
from flywheel.ground.atomic import atomic_write_json
from flywheel.ground.records import BattleSpec
from flywheel.run.context import Context, stage
from flywheel.run.results import RewardResult, SelectResult
from flywheel.run.selectors import battles_per, load_selector
from flywheel.stages.rewards import round_feedback
from flywheel.stages.train_weights import spread_weights


def round_budget(total: int, rounds: int, rnd: int) -> int:
    """Battles in round ``rnd`` (1-based) when ``total`` are split over ``rounds``."""
    return total // rounds + (1 if rnd <= total % rounds else 0)


@stage("select", SelectResult, per_round=True)
def select_round(ctx: Context, k: int, rnd: int, budgets: dict[str, int]) -> SelectResult:
    """Choose round ``rnd`` of iteration ``k``'s train battles for every target (``budgets``:
    battles per target for the whole iteration). The plan is stored before it is returned, so a
    resumed run plays exactly these battles."""
    cfg = ctx.cfg.select
    specs: list[BattleSpec] = ctx.store.plan(k, rnd) or []
    selectors = {t: load_selector(ctx, t, k, rnd) for t in ctx.roster.targets}
    floors = {t: round(selection.prompt_floor(cfg, sel.prompt), 4)
              for t, sel in selectors.items()} if cfg.prompt_floor == "auto" else None
    if not specs:
        earlier = ctx.store.plan(k) or []
        for t in ctx.roster.targets:
            n = round_budget(budgets[t], cfg.rounds, rnd)
            version = ctx.current_version(t, k)
            used = {s.prompt_id for s in earlier if version in (s.model_a, s.model_b)}
            rates = {}
            if cfg.opponents == "pfsp":
                rates = bandit_rewards.opponent_win_rates(ctx.store.judged(None, "train"), t, list(ctx.pool_by_cell),
                                                          selection.opponent_arms(cfg, ctx.roster.opponents))
            gc = ctx.cfg.world.games
            seats = gc.hanabi.players if ctx.cfg.world.kind == "games" and "hanabi" in gc.games else 0
            this_round = selection.SelectionRound(version, n, k, rnd, ctx.cfg.run.seed, team_seats=seats,
                                                  spread_by=spread_weights(ctx, k, t))
            specs += selection.plan_round(selectors[t], cfg, ctx.pool_by_cell, this_round, used,
                                          opp_win_rates=rates)
        ctx.store.write_plan(k, rnd, specs, ctx.cfg.run.shard_size)
    askers = battles_per(specs, "asker") if len(ctx.cfg.world.conversation.askers) > 1 else None
    return SelectResult(len(specs), cfg.policy, battles_per(specs, "arm"), floors, askers)


@stage("reward", RewardResult, per_round=True)
def reward_round(ctx: Context, k: int, rnd: int) -> RewardResult:
    """Reward each target's bandits with round (k, rnd)'s verdicts, once: the saved state marks a
    round learnt (a run directory whose judge stage did this before keeps its state)."""
    round_ids = {s.battle_id for s in ctx.store.plan(k, rnd) or []}
    judged = ctx.store.judged(k, "train")
    rewards: dict[str, list[float]] = {}
    for t in ctx.roster.targets:
        path = ctx.store.bandit_path(t, k, rnd)
        if path.exists():
            continue
        sel = load_selector(ctx, t, k, rnd)
        mine = [jb for jb in judged if jb.battle.battle_id in round_ids and bandit_rewards.plays(jb.battle, t)]
        earlier = [jb for jb in judged if jb.battle.battle_id not in round_ids and bandit_rewards.plays(jb.battle, t)]
        feedback = round_feedback(ctx, t, k, mine, earlier)
        asked = round_feedback(ctx, t, k, mine, earlier, askers=True) if sel.askers is not None else []
        sel.update(feedback, [(a, r) for a, _, r in asked])
        atomic_write_json(path, sel.state())
        rewards[t] = [r for _, _, r in feedback]
    return RewardResult(ctx.cfg.select.reward, {t: len(r) for t, r in rewards.items()},
                        {t: round(sum(r) / len(r), 4) for t, r in rewards.items() if r})

