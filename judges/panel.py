"""A panel of judges: every member judges every battle; majority vote or mean score decides.

``majority``: the most frequent valid verdict (``tie (bothbad)`` votes as ``tie``); a split with
no strict majority is a ``tie``. ``mean``: the members' mean scores (members that give scores,
such as the WizardArena template or verifiers), the higher mean wins. A battle no member could
judge is invalid. Each judgment keeps the members' verdicts (``Judgment.members``, JSON), so the
report can show their agreement (Fleiss' kappa; Cohen's for two members).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from flywheel.ground.records import Battle, Judgment
from judges.pairwise import PairwiseJudge

CATEGORIES = ("model_a", "model_b", "tie")


def vote(winner: str | None) -> str | None:
    return "tie" if winner == "tie (bothbad)" else winner


def majority(winners: list[str | None]) -> str | None:
    """The strict-majority verdict of the valid ``winners`` (``tie`` without one; None if none)."""
    votes = [vote(w) for w in winners if w]
    if not votes:
        return None
    (top, n), *_ = Counter(votes).most_common()
    return top if n * 2 > len(votes) else "tie"


class PanelJudge(PairwiseJudge):
    def __init__(self, members: Sequence[PairwiseJudge], aggregate: str = "majority") -> None:
        if len(members) < 2:
            raise ValueError("a panel needs at least two judges")
        if aggregate not in ("majority", "mean"):
            raise ValueError(f"unknown aggregate {aggregate!r} (majority, mean)")
        self.members = list(members)
        self.aggregate = aggregate
        self.name = f"panel:{aggregate}:" + "+".join(m.name for m in self.members)

    def llm_judges(self) -> list:
        return [j for m in self.members for j in m.llm_judges()]

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        per_member = [m.judge(battles) for m in self.members]
        return [self._decide(b, [js[i] for js in per_member]) for i, b in enumerate(battles)]

    def _decide(self, b: Battle, js: list[Judgment]) -> Judgment:
        members = json.dumps([{"judge": j.judge, "winner": j.winner, "flip": j.flip, "model": m.model,
                               "score_a": j.score_a, "score_b": j.score_b} for j, m in zip(js, self.members)])
        valid = [j for j in js if j.valid]
        if not valid:
            return Judgment(b.battle_id, self.name, None, 0.0, error="no member gave a valid verdict", members=members)
        flip = any(j.flip for j in valid) if any(j.flip is not None for j in valid) else None
        if self.aggregate == "mean":
            scored = [j for j in valid if j.score_a is not None and j.score_b is not None]
            if not scored:
                return Judgment(b.battle_id, self.name, None, 0.0, error="no member gave scores", members=members)
            sa = sum(j.score_a for j in scored) / len(scored)  # type: ignore[misc]
            sb = sum(j.score_b for j in scored) / len(scored)  # type: ignore[misc]
            winner = "tie" if sa == sb else ("model_a" if sa > sb else "model_b")
            return Judgment(b.battle_id, self.name, winner, abs(sa - sb), sa, sb, flip=flip, members=members)
        winner = majority([j.winner for j in valid])
        if winner == "tie" and all(j.winner == "tie (bothbad)" for j in valid):
            winner = "tie (bothbad)"
        margin = sum(j.margin for j in valid if vote(j.winner) == winner) / len(valid) if winner != "tie" else 0.0
        return Judgment(b.battle_id, self.name, winner, margin, flip=flip, members=members)


def fleiss_kappa(votes: Sequence[Sequence[str]], categories: Sequence[str] = CATEGORIES) -> float | None:
    """Fleiss' kappa of items each rated by the same number (>= 2) of raters; None if undefined."""
    votes = [v for v in votes if len(v) >= 2]
    if not votes or len({len(v) for v in votes}) != 1:
        return None
    n = len(votes[0])
    counts = [[sum(1 for x in v if x == c) for c in categories] for v in votes]
    p_items = [(sum(c * c for c in row) - n) / (n * (n - 1)) for row in counts]
    totals = [sum(row[i] for row in counts) for i in range(len(categories))]
    p_cat = [t / (len(votes) * n) for t in totals]
    p_bar, p_e = sum(p_items) / len(p_items), sum(p * p for p in p_cat)
    if p_e >= 1:
        return None
    return (p_bar - p_e) / (1 - p_e)


def cohen_kappa(a: Sequence[str], b: Sequence[str], categories: Sequence[str] = CATEGORIES) -> float | None:
    """Cohen's kappa of two raters over the same items; None if undefined."""
    if not a or len(a) != len(b):
        return None
    n = len(a)
    p_o = sum(1 for x, y in zip(a, b) if x == y) / n
    p_e = sum((a.count(c) / n) * (b.count(c) / n) for c in categories)
    if p_e >= 1:
        return None
    return (p_o - p_e) / (1 - p_e)
