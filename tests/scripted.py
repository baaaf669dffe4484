"""Scripted players for the teaching tests (named by ``module:Class`` in a config): a student that
learns only from a correct example, and a teacher that is right in arithmetic only."""

from __future__ import annotations

from typing import Any

from flywheel.ground.chat import history_of
from flywheel.ground.records import Generation, Prompt
from flywheel.players.player import Player, PlayerSetup, SamplingParams
from flywheel.players.scripted import wrong_answer
from flywheel.worlds.evolution import solve

ARITHMETIC = ("add", "sub", "mul")


class _Scripted(Player):
    def __init__(self, name: str, **_: Any) -> None:
        self.name = name

    @classmethod
    def from_config(cls, pc: Any, name: str, setup: PlayerSetup) -> Player:
        return cls(name=name)

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        return [Generation(self.name, p.id, self.answer(p)) for p in prompts]

    def answer(self, p: Prompt) -> str:
        raise NotImplementedError


class ScriptedStudent(_Scripted):
    """Right only after a worked example of its task whose answer is right (checked with the task
    suite's solver); wrong when asked alone or after a wrong example."""

    def answer(self, p: Prompt) -> str:
        shown = history_of(p)
        right = len(shown) == 2 and solve(p.category, shown[0]["content"]) == shown[1]["content"]
        return p.reference if right else wrong_answer(p.reference)


class ArithmeticTeacher(_Scripted):
    """Right in add, sub and mul; wrong in the other categories."""

    def answer(self, p: Prompt) -> str:
        return p.reference if p.category in ARITHMETIC else wrong_answer(p.reference)
