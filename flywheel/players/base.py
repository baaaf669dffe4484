"""The player contract: a batch of prompts in, one ``Generation`` per prompt out."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from flywheel.records import Generation, Prompt


@dataclass(frozen=True)
class SamplingParams:
    """How a player decodes. ``temperature`` None or 0 means greedy (an API gets no temperature
    when it is None); generation ends at the first of ``stop`` (which is not included)."""

    max_new_tokens: int = 12
    temperature: float | None = None
    seed: int = 0
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return not self.temperature


class Player(abc.ABC):
    """Answers prompts. ``name`` is the arena name, versioned as ``base@k`` for targets.

    ``generate`` must return exactly one ``Generation`` per prompt, in order. A prompt it could
    not answer comes back with ``error`` set (never as an empty answer): failed generations are
    recorded and left out of judging.
    """

    name: str

    @abc.abstractmethod
    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        """Answer every prompt; same length and order as ``prompts``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (models, connections)."""
