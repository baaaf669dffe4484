"""User judges named in the config: a ``PairwiseJudge`` subclass or a plain callable.

A callable gets ``(prompt, response_a, response_b, reference)`` and returns ``"A"``, ``"B"``,
``"tie"``, ``"bothbad"`` (or a ``Judgment``-style winner: ``model_a``, ``model_b``, ``tie``,
``tie (bothbad)``); ``None`` or anything else is recorded as invalid, never counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flywheel.ground.records import Battle, Judgment
from judges.pairwise import PairwiseJudge
from judges.verifier import load_callable

ALIASES = {"A": "model_a", "B": "model_b", "tie": "tie", "bothbad": "tie (bothbad)",
           "model_a": "model_a", "model_b": "model_b", "tie (bothbad)": "tie (bothbad)"}


class CallableJudge(PairwiseJudge):
    def __init__(self, fn: Callable, name: str) -> None:
        self.fn = fn
        self.name = f"custom:{name}"

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        out = []
        for b in battles:
            try:
                verdict = self.fn(b.prompt, b.response_a, b.response_b, b.reference)
            except Exception as e:
                out.append(Judgment(b.battle_id, self.name, None, 0.0, error=f"judge raised {e!r}"))
                continue
            winner = ALIASES.get(verdict) if isinstance(verdict, str) else None
            if winner is None:
                out.append(Judgment(b.battle_id, self.name, None, 0.0, raw=repr(verdict)[:200],
                                    error=f"not a verdict: {verdict!r:.60}"))
                continue
            out.append(Judgment(b.battle_id, self.name, winner, 1.0 if winner in ("model_a", "model_b") else 0.0,
                                raw=str(verdict)))
        return out


def load_custom(spec: str, options: dict[str, Any]) -> PairwiseJudge:
    """``"module:Class"`` (a PairwiseJudge, built with ``options``) or ``"module:function"``."""
    target = load_callable(spec)
    if isinstance(target, type):
        judge = target(**options)
        if not isinstance(judge, PairwiseJudge):
            raise ValueError(f"{spec!r} built {type(judge).__name__}, which is not a PairwiseJudge")
        return judge
    if options:
        raise ValueError(f"{spec!r} is a function; judge.options apply to classes only")
    return CallableJudge(target, spec)
