"""Pairwise judges: they decide battles. See ``judges.pairwise.PairwiseJudge``.

Built in: ``VerifierJudge`` (exact, numeric, regex, callable checks), ``LLMJudge`` (any player,
a template in ``judges/templates/``), ``HybridJudge``, ``PanelJudge`` and user judges
(``judges.custom``); ``judges.build.build_judge`` makes the one a config asks for.
"""

from judges.pairwise import PairwiseJudge, pair_battle
from judges.verifier import VerifierJudge

__all__ = ["PairwiseJudge", "VerifierJudge", "pair_battle"]
