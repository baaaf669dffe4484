"""A judge's agreement with human votes (``flywheel judge-agreement``): overall, per category and,
for a cascade, per tier that decided.

How a vote counts, the human's ``winner`` against the judge's:

- ``invalid``: the judge gave no verdict (a failed call, unparseable output); counted nowhere else;
- ``decisive``: the human chose a side; the judge ``agree``s where it chose the same side. A tie
  verdict on a decisive vote disagrees (``judge_ties`` counts them). ``agreement`` is agree /
  decisive, with its Wilson 95% interval (``low``, ``high``);
- ``ties``: the human called a tie (``tie`` and ``tie (bothbad)`` alike); ``tie_share`` is their
  share of the valid votes and ``tie_agreement`` the share of them the judge called a tie too
  (either kind). Ties are not in ``agreement``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flywheel.ground.records import Judgment
from flywheel.maths.proportions import wilson
from judges.cascade import TIES, cascade_of

COLUMNS = ("votes", "invalid", "decisive", "agree", "agreement", "low", "high", "judge_ties", "ties", "tie_share",
           "tie_agreement")
HOW = ("agreement: the share of the votes for a side (decisive) where the judge chose the same side, with its "
       "Wilson 95% interval (low, high); a judge's tie there disagrees (judge_ties). Human ties (tie and tie "
       "(bothbad) alike) are apart: tie_share of the valid votes, tie_agreement where the judge called a tie too. "
       "invalid: no verdict, counted nowhere else.")


@dataclass(frozen=True)
class HumanVerdict:
    """One vote and the judge's verdict on it: ``human`` a winner, ``judgment`` the judge's."""

    human: str
    category: str | None
    judgment: Judgment


def _share(hits: int, n: int) -> float | None:
    return round(hits / n, 4) if n else None


def tally(pairs: Sequence[HumanVerdict]) -> dict[str, Any]:
    """The counts and shares of ``COLUMNS`` over these votes."""
    valid = [p for p in pairs if p.judgment.winner is not None]
    decisive = [p for p in valid if p.human not in TIES]
    ties = [p for p in valid if p.human in TIES]
    agree = sum(p.judgment.winner == p.human for p in decisive)
    low, high = wilson(agree, len(decisive)) if decisive else (None, None)
    return {"votes": len(pairs), "invalid": len(pairs) - len(valid), "decisive": len(decisive), "agree": agree,
            "agreement": _share(agree, len(decisive)), "low": None if low is None else round(low, 4),
            "high": None if high is None else round(high, 4),
            "judge_ties": sum(p.judgment.winner in TIES for p in decisive), "ties": len(ties),
            "tie_share": _share(len(ties), len(valid)),
            "tie_agreement": _share(sum(p.judgment.winner in TIES for p in ties), len(ties))}


def by_category(pairs: Sequence[HumanVerdict]) -> list[dict[str, Any]]:
    """One ``tally`` row per category (votes without one under ``(none)``), sorted by name."""
    groups: dict[str, list[HumanVerdict]] = {}
    for p in pairs:
        groups.setdefault(p.category or "(none)", []).append(p)
    return [{"category": name, **tally(groups[name])} for name in sorted(groups)]


def by_tier(pairs: Sequence[HumanVerdict], names: Sequence[str]) -> list[dict[str, Any]]:
    """A cascade's: one ``tally`` row per tier (``names``: its judges), over the votes it decided
    (an invalid verdict is the last tier's: it had the last word)."""
    groups: dict[int, list[HumanVerdict]] = {i: [] for i in range(len(names))}
    for p in pairs:
        record = cascade_of(p.judgment)
        groups[len(names) - 1 if record is None else record["tier"]].append(p)
    return [{"tier": i, "judge": names[i], **tally(groups[i])} for i in range(len(names))]
