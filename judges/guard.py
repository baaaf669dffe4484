"""The judge guard: after each judging round, the verdicts of model judges (llm, panel, custom:
a verifier or the rules of a game are exact by construction) are checked before anything learns
from them. A judge that carries no information - one that always prefers a position, never
decides, mostly fails, or disagrees with the references - stops the run before training.

Checked per round, each figure only over ``judge.guard_min_battles`` battles or more:

- ``flip_rate``: share of battles judged in both orders whose verdicts disagreed
  (``judge.max_flip_rate``);
- ``invalid_rate``: share of verdicts that are invalid (``judge.max_invalid_rate``);
- ``tie_rate``: share of valid verdicts that are ties, "both bad" not counted: that is a decision
  (``judge.max_tie_rate``);
- ``verifier_agreement``: on battles with a reference where the verifier is decisive, the share
  the judge decided the same way (``judge.min_verifier_agreement``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from flywheel.ground.records import Battle, Judgment
from judges.cascade import flip_sampled

MODEL_JUDGES = ("llm:", "panel:", "custom:", "reward_model:")


class JudgeGuardError(RuntimeError):
    """A round's verdicts failed the judge guard; nothing was trained on them."""


@dataclass(frozen=True)
class GuardReport:
    judged: int
    flip_rate: float | None
    invalid_rate: float | None
    tie_rate: float | None
    verifier_agreement: float | None
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _share(hits: int, n: int, least: int) -> float | None:
    return round(hits / n, 4) if n >= least and n else None


def check(battles: list[Battle], judgments: dict[str, Judgment], jc, verifier=None) -> GuardReport:
    """The guard's figures over ``battles``' model-judge verdicts, and what breaks a limit of
    ``jc`` (a JudgeConfig). ``verifier``: a PairwiseJudge for the reference verdicts."""
    pairs = [(b, judgments[b.battle_id]) for b in battles
             if b.battle_id in judgments and judgments[b.battle_id].judge.startswith(MODEL_JUDGES)]
    least = jc.guard_min_battles
    both = [j for _, j in pairs if j.flip is not None and flip_sampled(j)]
    valid = [j for _, j in pairs if j.valid]
    flip = _share(sum(1 for j in both if j.flip), len(both), least)
    invalid = _share(len(pairs) - len(valid), len(pairs), least)
    ties = _share(sum(1 for j in valid if j.winner == "tie"), len(valid), least)  # "both bad" is a decision
    agreement = None
    checkable = [(b, j) for b, j in pairs if b.reference is not None]
    if verifier is not None and len(checkable) >= least:
        truth = verifier.judge([b for b, _ in checkable])
        decided = [(t.winner, j.winner) for t, (_, j) in zip(truth, checkable) if t.winner in ("model_a", "model_b")]
        agreement = _share(sum(1 for t, w in decided if t == w), len(decided), least)
    problems = []
    if flip is not None and flip > jc.max_flip_rate:
        problems.append(f"position-flip rate {flip:.2f} > judge.max_flip_rate {jc.max_flip_rate} (the judge "
                        "prefers an answer for its position)")
    if invalid is not None and invalid > jc.max_invalid_rate:
        problems.append(f"invalid verdicts {invalid:.2f} > judge.max_invalid_rate {jc.max_invalid_rate} "
                        "(unparseable output or failed calls)")
    if ties is not None and ties > jc.max_tie_rate:
        problems.append(f"ties {ties:.2f} of valid verdicts > judge.max_tie_rate {jc.max_tie_rate} (the judge "
                        "decides nothing)")
    if agreement is not None and agreement < jc.min_verifier_agreement:
        problems.append(f"agreement with the verifier {agreement:.2f} < judge.min_verifier_agreement "
                        f"{jc.min_verifier_agreement} on battles with a reference")
    return GuardReport(len(pairs), flip, invalid, ties, agreement, problems)
