"""Scripted teachers for ``select.teaching``, baselines that need no model: one that writes the
correct answer (the prompt's reference) and one that writes a wrong one. They answer only prompts
that carry a reference (the task suite's); any other prompt fails, with the reason."""

from __future__ import annotations

from typing import Any

from flywheel.ground.records import Generation, Prompt
from flywheel.players.player import Player, PlayerSetup, SamplingParams


def wrong_answer(reference: str) -> str:
    """A plausible answer that is not ``reference``: a number plus one, other text backwards (a
    palindrome, or one character, doubled)."""
    try:
        return str(int(reference) + 1)
    except ValueError:
        flipped = reference[::-1]
        return flipped if flipped != reference else reference + reference


class _Scripted(Player):
    def __init__(self, name: str, **_: Any) -> None:
        self.name = name

    @classmethod
    def from_config(cls, pc: Any, name: str, setup: PlayerSetup) -> Player:
        return cls(name=name)

    def answer(self, reference: str) -> str:
        raise NotImplementedError

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        return [Generation(self.name, p.id, self.answer(p.reference)) if p.reference is not None else
                Generation(self.name, p.id, "", f"{self.name}: the prompt has no reference answer") for p in prompts]


class ReferenceTeacher(_Scripted):
    """Writes each prompt's reference answer (``kind: reference-answer``): a teacher always right."""

    def answer(self, reference: str) -> str:
        return reference


class WrongTeacher(_Scripted):
    """Writes a wrong answer (``kind: wrong-answer``, ``wrong_answer``): a teacher never right."""

    def answer(self, reference: str) -> str:
        return wrong_answer(reference)
