"""What the bandits' rewards read from the run, per target and round; the rewards themselves are
pure functions of it (flywheel/arena/bandit_rewards.py): the previous iteration's scores per cell
(``progress``), the prompts that already yielded this iteration (``yield``), the target's own
success in each battle (``learnability``, ``unreached-yield``) and the validation gains of its training steps
(``validation-progress``: the validation split's cached answers, and nothing else)."""

from __future__ import annotations

from flywheel.arena import bandit_rewards
from flywheel.arena.battles import cached_answers
from flywheel.arena.selection import arm_of
from flywheel.ground.records import JudgedBattle, versioned
from flywheel.run.context import Context
from judges.build import build_verifier


def round_feedback(ctx: Context, target: str, k: int, mine: list[JudgedBattle],
                   earlier: list[JudgedBattle], askers: bool = False) -> list[tuple[str, str, float]]:
    """(cell, opponent, reward) of ``target``'s judged battles of one round of iteration ``k``
    (``mine``), under ``select.reward``; ``earlier``: its judged train battles of the iteration's
    earlier rounds. ``askers``: (asker, opponent, reward) of the battles whose asker a bandit chose,
    the asker in the cell's place (``validation-progress``, measured per cell, is then learnability)."""
    reward = ctx.cfg.select.reward
    version = ctx.current_version(target, k)
    arms = bandit_rewards.by_asker if askers else list
    mine, earlier = arms(mine), arms(earlier)
    previous = (bandit_rewards.arm_scores(arms(ctx.store.judged(k - 1, "train")), target)
                if reward == "progress" and k > 1 else {})
    yielded = {jb.battle.prompt for jb in earlier if jb.score_of(target) == 0.0}
    success: dict[str, float] = {}
    progress: dict[str, float] = {}
    if reward in ("learnability", "validation-progress", "unreached-yield"):
        success = own_successes(ctx, version, mine)
    if reward == "validation-progress" and not askers:
        progress = bandit_rewards.validation_progress(validation_gains(ctx, target, k), ctx.cfg.select.progress_weight)
    return bandit_rewards.feedback(reward, mine, version, previous, yielded, success=success, progress=progress,
                                   generations=ctx.cfg.train.rl.generations)


def own_successes(ctx: Context, version: str, judged: list[JudgedBattle]) -> dict[str, float]:
    """The own success (1 or 0) of ``version`` in each of its battles that has one, by battle id:
    its answer against the prompt's reference under the run's verifier (``judge.verifier``, the
    check of eval and validation accuracy), whatever judge decided the battle; in a games world,
    whether it won or drew."""
    check = None if ctx.cfg.world.kind == "games" else build_verifier(ctx.cfg.judge.verifier).correct
    out = {}
    for jb in judged:
        s = bandit_rewards.own_success(jb, version, check)
        if s is not None:
            out[jb.battle.battle_id] = s
    return out


def validation_gains(ctx: Context, target: str, k: int) -> list[dict[str, float]]:
    """Per training step of ``target`` before iteration ``k`` (iterations 1 to k - 1, oldest first),
    the change of its validation accuracy per cell from the version it was trained from to the
    version it made, from the answers their evaluations cached (``evaluate.validate``). Reads the
    validation split only: neither the eval split nor any battle."""
    if ctx.cfg.world.kind == "games":
        raise ValueError(bandit_rewards.GAMES_HAVE_NO_VALIDATION_ANSWERS)
    cells = {p.id: arm_of(p) for p in ctx.validation}
    right: dict[str, dict[str, bool]] = {}
    for j in range(1, k):
        for v in (ctx.current_version(target, j), versioned(target, j)):
            if v not in right:
                right[v] = validation_right(ctx, v)
    return [bandit_rewards.cell_gains(right[ctx.current_version(target, j)], right[versioned(target, j)], cells)
            for j in range(1, k)]


def validation_right(ctx: Context, version: str) -> dict[str, bool]:
    """Whether each cached validation answer of ``version`` is right (the run's verifier), by
    prompt id; a prompt without a cached answer (a failed call) is absent."""
    by_id = {p.id: p for p in ctx.validation}
    return {pid: ctx.correct(text, by_id[pid])
            for pid, text in cached_answers(ctx.roster, ctx.store, version, ctx.validation).items()}
