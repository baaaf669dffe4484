"""The judge a config asks for (``judge:`` section), built on the run's players and cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from judges.cascade import CascadeJudge, Tier
from judges.custom import load_custom
from judges.game import GameJudge
from judges.hybrid import HybridJudge
from judges.llm import LLMJudge
from judges.pairwise import PairwiseJudge
from judges.panel import PanelJudge
from judges.reward_model import RewardModelJudge
from judges.verifier import VerifierJudge


def build_verifier(vc) -> VerifierJudge:
    """The verifier a ``judge.verifier`` config describes."""
    return VerifierJudge.from_config(vc)


def _llm(jc, roster, cache, pc, confidence: bool = False, tc=None) -> PairwiseJudge:
    """An LLM judge of ``pc``; ``tc``, a cascade tier, sets how it judges the second order."""
    orders = {} if tc is None else {"second_order": tc.second_order, "sure_above": tc.threshold}
    return LLMJudge.from_config(jc, pc, roster.build(pc, pc.name), cache=cache, confidence=confidence, **orders)


def _verifier(jc, roster, cache) -> PairwiseJudge:
    return build_verifier(jc.verifier)


def _llm_judge(jc, roster, cache) -> PairwiseJudge:
    return _llm(jc, roster, cache, jc.player)


def _hybrid(jc, roster, cache) -> PairwiseJudge:
    return HybridJudge(build_verifier(jc.verifier), _llm(jc, roster, cache, jc.player), jc.llm_categories)


def _panel(jc, roster, cache) -> PairwiseJudge:
    return PanelJudge([_llm(jc, roster, cache, pc) for pc in jc.panel], jc.aggregate)


def _custom(jc, roster, cache) -> PairwiseJudge:
    options: dict[str, Any] = dict(jc.options)
    return load_custom(jc.custom, options)


def _game(jc, roster, cache) -> PairwiseJudge:
    return GameJudge()


def _reward_model(jc, roster, cache) -> PairwiseJudge:
    return RewardModelJudge.from_config(jc)


def _tier(jc, tc, roster, cache, confidence: bool = False) -> Tier:
    """One tier of a cascade: the judge of its kind, with the judge section's other settings; an llm
    tier asks for log-probabilities where it has a threshold, or where ``confidence``."""
    view = jc.model_copy(update={"kind": tc.kind, "player": tc.player, "panel": tc.panel, "aggregate": tc.aggregate,
                                 "template": tc.template or jc.template, "custom": tc.custom, "options": tc.options})
    judge = (_llm(view, roster, cache, tc.player, confidence=confidence or tc.threshold is not None, tc=tc)
             if tc.kind == "llm" else JUDGES[tc.kind](view, roster, cache))
    return Tier.from_config(judge, tc)


def _cascade(jc, roster, cache, bypass=None) -> PairwiseJudge:
    return CascadeJudge.from_config([_tier(jc, tc, roster, cache) for tc in jc.cascade.tiers], jc.cascade, bypass)


def calibration_tiers(jc, roster, cache=None) -> list[Tier]:
    """The tiers of the cascade ``jc`` (a JudgeConfig of kind cascade), each built alone to judge
    calibration battles: every llm tier before the last asks for log-probabilities, so any
    threshold can be tried (the last tier's verdicts are the reference: its cached ones serve). The
    last tier judges both orders, without a threshold, whatever its ``second_order``."""
    last = len(jc.cascade.tiers) - 1
    both = {"second_order": "always", "threshold": None}
    return [_tier(jc, tc.model_copy(update=both) if i == last else tc, roster, cache, confidence=i < last)
            for i, tc in enumerate(jc.cascade.tiers)]


# judge.kind -> how to build it from (JudgeConfig, Roster, cache)
JUDGES: dict[str, Callable[..., PairwiseJudge]] = {
    "verifier": _verifier, "llm": _llm_judge, "hybrid": _hybrid, "panel": _panel, "custom": _custom, "game": _game,
    "reward_model": _reward_model,
}


def build_judge(jc, roster, cache=None, bypass=None) -> PairwiseJudge:
    """``jc``: a JudgeConfig; ``roster``: the run's Roster (builds judge models like any player);
    ``cache``: a KeyValueCache for LLM judge outputs, or None; ``bypass``: for a cascade, a callable
    giving the tiers its guard turned off."""
    if jc.kind == "cascade":
        return _cascade(jc, roster, cache, bypass)
    if jc.kind not in JUDGES:
        raise ValueError(f"judge.kind {jc.kind!r}: expected one of {', '.join(JUDGES)}, cascade")
    return JUDGES[jc.kind](jc, roster, cache)
