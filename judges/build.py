"""The judge a config asks for (``judge:`` section), built on the run's players and cache."""

from __future__ import annotations

from typing import Any

from judges.base import PairwiseJudge
from judges.verifier import VerifierJudge


def _identity(pc) -> str:
    """What a judge model's outputs depend on (part of the judgment cache key)."""
    return f"{pc.kind}:{pc.model or pc.path or pc.name}@{','.join(pc.base_urls)}"


def build_verifier(vc) -> VerifierJudge:
    """The verifier a ``judge.verifier`` config describes."""
    return VerifierJudge(vc.match, vc.tolerance, vc.relative_tolerance, vc.pattern, vc.function, vc.extract)


def build_judge(jc, roster, cache=None) -> PairwiseJudge:
    """``jc``: a JudgeConfig; ``roster``: the run's Roster (builds judge models like any player);
    ``cache``: a JsonlCache for LLM judge outputs, or None."""
    verifier = build_verifier(jc.verifier)

    def llm(pc) -> PairwiseJudge:
        from judges.llm import LLMJudge

        return LLMJudge(roster.build(pc, pc.name), jc.template, jc.both_orders, jc.inconsistent,
                        jc.max_parse_retries, pc.max_new_tokens, cache, _identity(pc))

    if jc.kind == "llm":
        return llm(jc.player)
    if jc.kind == "hybrid":
        from judges.hybrid import HybridJudge

        return HybridJudge(verifier, llm(jc.player), jc.llm_categories)
    if jc.kind == "panel":
        from judges.panel import PanelJudge

        return PanelJudge([llm(pc) for pc in jc.panel], jc.aggregate)
    if jc.kind == "custom":
        from judges.custom import load_custom

        options: dict[str, Any] = dict(jc.options)
        return load_custom(jc.custom, options)
    return verifier
