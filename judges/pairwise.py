"""The judge contract: a batch of played battles in, one ``Judgment`` per battle out."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from flywheel.ground.conversation import Message, encode
from flywheel.ground.records import Battle, Judgment, stable_id


def pair_battle(prompt: str, response_a: str, response_b: str, reference: str | None = None,
                category: str = "", model_a: str = "A", model_b: str = "B") -> Battle:
    """A battle record for a bare (prompt, response A, response B[, reference]) pair."""
    bid = stable_id("pair", prompt, response_a, response_b, reference, model_a, model_b)
    return Battle(battle_id=bid, iteration=0, phase="train", prompt_id=bid, prompt=prompt, category=category, level=0,
                  reference=reference, model_a=model_a, model_b=model_b, response_a=response_a, response_b=response_b)


def conversation_pair(conversation_a: list[Message], conversation_b: list[Message], category: str = "",
                      model_a: str = "A", model_b: str = "B") -> Battle:
    """A battle record for two whole conversations (each ending with its side's answer; a user
    turn may carry its ``reference``), as a multi-turn battle is logged: its prompt and reference
    the first user turn's, its responses the last answers."""
    first = next(m for m in conversation_a if m["role"] == "user")
    ca, cb = encode(conversation_a), encode(conversation_b)
    bid = stable_id("pair", ca, cb, model_a, model_b)
    return Battle(battle_id=bid, iteration=0, phase="train", prompt_id=bid, prompt=first["content"], category=category,
                  level=0, reference=first.get("reference"), model_a=model_a, model_b=model_b,
                  response_a=conversation_a[-1]["content"], response_b=conversation_b[-1]["content"],
                  conversation_a=ca, conversation_b=cb)


class PairwiseJudge(abc.ABC):
    """Decides battles. ``name`` identifies the judge in every judgment it writes.

    ``judge`` returns one judgment per battle, in order. A battle it cannot decide comes back
    with ``winner=None`` and ``error`` set: invalid judgments are recorded and never counted.
    ``model`` is the arena name of the judge's own model, when it has one (for self-preference).
    """

    name: str
    model: str | None = None

    @abc.abstractmethod
    def judge(self, battles: list[Battle]) -> list[Judgment]:
        """Judge every battle; same length and order as ``battles``."""

    def judge_costed(self, battles: list[Battle]) -> list[tuple[Judgment, float]]:
        """``judge``, each judgment with the share of a full judgment's calls it spent (1.0 here; an
        LLM judge that asks the second order only when unsure spends 0.5 on a battle it was sure of)."""
        return [(j, 1.0) for j in self.judge(battles)]

    def judge_pairs(self, pairs: Sequence[tuple]) -> list[Judgment]:
        """Judge (prompt, response_a, response_b[, reference]) tuples."""
        return self.judge([pair_battle(*p) for p in pairs])

    def llm_judges(self) -> list:
        """The LLM judges inside this judge (their calls and cache hits go to usage.jsonl)."""
        return []
