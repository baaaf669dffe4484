"""Pairwise judges: they decide battles. See ``judges.base.PairwiseJudge``."""

from judges.base import PairwiseJudge
from judges.verifier import VerifierJudge

__all__ = ["PairwiseJudge", "VerifierJudge"]
