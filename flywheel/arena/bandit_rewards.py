"""What a round's judged battles earn the selection bandits (flywheel/arena/selection.py), and
what they say of the target per cell (its score, its win rates against each opponent, its own
success).

Rewards (``select.reward``; see docs in ``SelectConfig``):

- ``yield``: 1 when the battle produced a training example (the target lost, so the winner's
  answer becomes SFT data), else 0 - the flywheel's direct product;
- ``progress``: |change of the target's score on the arm| since the previous iteration -
  learning progress, the signal of curriculum learning;
- ``uncertainty``: 4 p(1 - p) of the target's battle score p on the arm (its win rate against
  the opponents; a tie, both right or both wrong, counts 0.5) - battles whose outcome is least
  predictable. A cell where both players always fail scores p = 0.5 and the top reward;
- ``unreached-yield``: yield, times (1 - p)^g (p the target's own success on the arm as
  ``learnability`` reads it, g ``train.rl.generations``), a rough proxy for the chance that none of
  g own sampled answers passes: battles buy winners' answers where the target's own answers cannot
  reach, and leave the cells it sometimes solves to them;
- ``learnability``: 4 p(1 - p) of the target's own success p on the arm (its answer passes the
  world's check, whoever it played) - the RL curriculum signal: a cell the target solves half of
  the time teaches most; one it always or never solves teaches nothing;
- ``validation-progress``: the target's learning progress per cell on the validation split
  (|change of its validation accuracy| from each training step, an exponential moving average),
  learnability where there is no such measurement yet.

``feedback`` is a pure function of what it is given; the stage (flywheel/stages/rewards.py)
gathers those inputs from the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np

from flywheel.arena.selection import SELF
from flywheel.ground.records import SCORE_A, TEAM, Battle, JudgedBattle, base_name, in_side_a, team_members
from flywheel.maths.bandits import validation_progress  # noqa: F401 - the rewards stage reads it here

REWARDS = ("yield", "unreached-yield", "progress", "uncertainty", "learnability", "validation-progress")
GAMES_HAVE_NO_VALIDATION_ANSWERS = (
    "select.reward: validation-progress reads the validation split's answers, which a games world does not "
    "keep (its validation games are played and scored, not stored): choose learnability (the target's "
    "win-or-draw rate per cell), yield, progress or uncertainty")


def _seat_a(b: Battle, target: str) -> bool:
    """Whether ``target`` (a version, or a base name) sits in seat A; an exact version decides
    a battle of two versions of one target (self-play), else the base name; in a duplicate team
    battle, the side of its team (``records.in_side_a``)."""
    return in_side_a(b.model_a, b.model_b, target)


def _opponent(b: Battle, target: str) -> str:
    """The opponent arm of ``target``'s battle (``self`` for a version of the target); in a
    duplicate team battle, its partner in its team."""
    mine = b.model_a if _seat_a(b, target) else b.model_b
    if TEAM in mine:
        opp = next((m for m in team_members(mine) if base_name(m) != base_name(target)), target)
    else:
        opp = b.model_b if mine == b.model_a else b.model_a
    return SELF if base_name(opp) == base_name(target) else opp


def _score(jb: JudgedBattle, target: str) -> float:
    a = SCORE_A[jb.winner]
    return a if _seat_a(jb.battle, target) else 1.0 - a


def plays(b: Battle, target_base: str) -> bool:
    """Whether ``target_base`` (a base name) played battle ``b``, in either seat (or team)."""
    return target_base in {base_name(m) for m in team_members(b.model_a) + team_members(b.model_b)}


def feedback(
    reward: str, judged: Iterable[JudgedBattle], target_base: str, previous_scores: dict[str, float],
    yielded: set[str] | None = None, *, success: dict[str, float] | None = None,
    progress: dict[str, float] | None = None, generations: int = 8,
) -> list[tuple[str, str, float]]:
    """(cell, opponent, reward) for each judged battle of ``target_base`` (a base name, or the
    version that played, which tells the seats of a self-play battle) in one round.

    What a reward reads beside the round's battles, gathered by the stage:

    - ``previous_scores`` (``progress``): the target's mean score per cell in the previous iteration;
    - ``yielded`` (``yield``): prompts that already produced a training example this iteration; a
      repeat yields nothing new (curation keeps one example per prompt), so it earns no yield
      reward. The set is updated in place;
    - ``success`` (``learnability``, ``validation-progress``, ``unreached-yield``): the target's own
      success per battle id (``own_success``); a battle without one gives the first two no signal,
      and ``unreached-yield`` its cell's plain yield where no battle of the cell has one;
    - ``generations`` (``unreached-yield``): the own answers sampled per prompt, g;
    - ``progress`` (``validation-progress``): the reward per cell (``validation_progress``); a cell
      without one (no training step measured yet, or no validation prompt) earns learnability."""
    judged = list(judged)  # failed battles and invalid verdicts are never joined: no signal
    if reward in ("learnability", "validation-progress"):
        return _success_feedback(judged, target_base, success or {},
                                 (progress or {}) if reward == "validation-progress" else {})
    yielded = set() if yielded is None else yielded
    rows = [(jb.battle.arm, _opponent(jb.battle, target_base), _score(jb, target_base), jb.battle.prompt)
            for jb in judged]
    if reward in ("yield", "unreached-yield"):
        out = []
        for c, o, s, prompt in rows:
            new = s == 0.0 and prompt not in yielded
            if new:
                yielded.add(prompt)
            out.append((c, o, 1.0 if new else 0.0))
        if reward == "unreached-yield":
            own = success or {}
            p = _cell_means((jb.battle.arm, own[jb.battle.battle_id]) for jb in judged if jb.battle.battle_id in own)
            out = [(c, o, r * (1 - p[c]) ** generations if c in p else r) for c, o, r in out]
        return out
    mean = _cell_means([(c, s) for c, _, s, _ in rows])
    if reward == "uncertainty":
        return [(c, o, mean[c] * (1 - mean[c]) * 4) for c, o, _, _ in rows]
    if reward == "progress":
        return [(c, o, min(1.0, abs(mean[c] - previous_scores.get(c, 0.5)) * 2)) for c, o, _, _ in rows]
    raise ValueError(f"unknown reward {reward!r}; known: {', '.join(REWARDS)}")


def by_asker(judged: Iterable[JudgedBattle]) -> list[JudgedBattle]:
    """The battles a bandit chose an asker for, each with its asker as its arm: ``feedback`` on
    them rewards askers as it rewards cells (a cell-wide reward, such as ``uncertainty``, is then
    asker-wide)."""
    return [JudgedBattle(dataclasses.replace(jb.battle, arm=jb.battle.asker), jb.judgment)
            for jb in judged if jb.battle.asker]


def _cell_means(values: Iterable[tuple[str, float]]) -> dict[str, float]:
    acc: dict[str, list[float]] = {}
    for c, v in values:
        acc.setdefault(c, []).append(v)
    return {c: sum(v) / len(v) for c, v in acc.items()}


def _success_feedback(judged: list[JudgedBattle], target_base: str, success: dict[str, float],
                      progress: dict[str, float]) -> list[tuple[str, str, float]]:
    """``learnability`` (``progress`` empty) and ``validation-progress``: a cell's progress where it
    has one, else 4 p (1 - p) of the target's mean own success p in the cell this round."""
    rows = [(jb.battle.arm, _opponent(jb.battle, target_base), success.get(jb.battle.battle_id)) for jb in judged]
    p = _cell_means((c, s) for c, _, s in rows if s is not None)
    return [(c, o, progress[c] if c in progress else 4 * p[c] * (1 - p[c]))
            for c, o, s in rows if c in progress or s is not None]


def own_success(jb: JudgedBattle, target: str, correct: Callable[[str, str], bool] | None) -> float | None:
    """The target's own success in a battle, whoever it played: 1.0 where its answer passes
    ``correct(answer, reference)`` (the world's check, the run's verifier), else 0.0; None where
    the prompt has no reference (no signal). Without a check (``correct`` None: a games world,
    whose positions have no reference answer) 1.0 where it won or drew, as the games world's
    validation figure counts it."""
    if correct is None:
        return 1.0 if _score(jb, target) >= 0.5 else 0.0
    b = jb.battle
    if b.reference is None:
        return None
    return 1.0 if correct(b.response_a if _seat_a(b, target) else b.response_b, b.reference) else 0.0


def cell_gains(before: dict[str, bool], after: dict[str, bool], cells: dict[str, str]) -> dict[str, float]:
    """Per cell, the change of accuracy from one version to the next: ``before`` and ``after`` say
    whether each version's answer was right, by prompt id; ``cells`` maps prompt ids to cells. Only
    prompts both versions answered count (a paired comparison); a cell with none is absent."""
    return _cell_means((cell, float(after[pid]) - float(before[pid]))
                       for pid, cell in sorted(cells.items()) if pid in before and pid in after)


def arm_scores(judged: Iterable[JudgedBattle], target_base: str) -> dict[str, float]:
    """The target's mean score per cell over its judged battles."""
    acc: dict[str, list[float]] = {}
    for jb in judged:
        if plays(jb.battle, target_base):
            acc.setdefault(jb.battle.arm, []).append(_score(jb, target_base))
    return {c: sum(v) / len(v) for c, v in acc.items()}


def opponent_win_rates(judged: Iterable[JudgedBattle], target_base: str,
                       cells: list[str], opponents: list[str]) -> dict[str, np.ndarray]:
    """The target's win rate per cell against each opponent (0.5 where they never met)."""
    tally: dict[tuple[str, str], list[float]] = {}
    for jb in judged:
        tally.setdefault((jb.battle.arm, _opponent(jb.battle, target_base)), []).append(_score(jb, target_base))
    return {c: np.array([np.mean(tally[(c, o)]) if (c, o) in tally else 0.5 for o in opponents]) for c in cells}
