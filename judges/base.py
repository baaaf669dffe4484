"""The judge contract: a batch of played battles in, one ``Judgment`` per battle out."""

from __future__ import annotations

import abc

from flywheel.records import Battle, Judgment


class PairwiseJudge(abc.ABC):
    """Decides battles. ``name`` identifies the judge in every judgment it writes.

    ``judge`` returns one judgment per battle, in order. A battle it cannot decide comes back
    with ``winner=None`` and ``error`` set: invalid judgments are recorded and never counted.
    """

    name: str

    @abc.abstractmethod
    def judge(self, battles: list[Battle]) -> list[Judgment]:
        """Judge every battle; same length and order as ``battles``."""
