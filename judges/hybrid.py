"""The verifier where a reference answer exists, an LLM judge elsewhere."""

from __future__ import annotations

from collections.abc import Iterable

from flywheel.ground.records import Battle, Judgment
from judges.pairwise import PairwiseJudge


class HybridJudge(PairwiseJudge):
    """``llm_categories``: categories the LLM judges even when a reference exists (answers a
    verifier cannot check, such as open-ended writing with a sample answer)."""

    def __init__(self, verifier: PairwiseJudge, llm: PairwiseJudge, llm_categories: Iterable[str] = ()) -> None:
        self.verifier = verifier
        self.llm = llm
        self.llm_categories = frozenset(llm_categories)
        self.name = f"hybrid:{verifier.name}+{llm.name}"
        self.model = llm.model

    def llm_judges(self) -> list:
        return self.llm.llm_judges()

    def routes_to_llm(self, b: Battle) -> bool:
        return b.reference is None or b.category in self.llm_categories

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        to_llm = [b for b in battles if self.routes_to_llm(b)]
        to_verifier = [b for b in battles if not self.routes_to_llm(b)]
        done = {j.battle_id: j for j in self.verifier.judge(to_verifier) + self.llm.judge(to_llm)}
        return [done[b.battle_id] for b in battles]
