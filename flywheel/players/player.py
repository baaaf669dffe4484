"""The player contract: a batch of prompts in, one ``Generation`` per prompt out."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from flywheel.ground.records import Generation, Prompt


@dataclass(frozen=True)
class SamplingParams:
    """How a player decodes. ``temperature`` None or 0 means greedy (an API gets no temperature
    when it is None); generation ends at the first of ``stop`` (which is not included).
    ``logprobs``: ask for each generated token's log-probability (players that can give them, such
    as the openai kind, return them in ``Generation.token_logprobs``; others return none)."""

    max_new_tokens: int = 12
    temperature: float | None = None
    seed: int = 0
    stop: tuple[str, ...] = ()
    logprobs: bool = False

    @property
    def greedy(self) -> bool:
        return not self.temperature


@dataclass(frozen=True)
class PlayerSetup:
    """What the run resolves for a player besides its config: local weights (``path``), the API
    model it is asked for (a served target version is its own LoRA model), the run's spending
    ``budget``, the seed, an in-process vLLM engine's GPU-memory share, and whether it is asked
    in conversations (an API player with local weights is asked as they read: ``chat``)."""

    path: str | None = None
    model: str | None = None
    budget: Any = None
    seed: int = 0
    gpu_memory_utilization: float | None = None
    chat: bool = True


@runtime_checkable
class ServesAdapters(Protocol):
    """A player that serves LoRA adapters by name (a vLLM server behind the OpenAI API)."""

    def load_lora_adapter(self, lora_name: str, lora_path: str) -> None: ...


@runtime_checkable
class ScoresReferences(Protocol):
    """A player that can score reference answers (mean per-token NLL), for loss signals."""

    def reference_loss(self, prompts: list[Prompt]) -> float | None: ...


class Player(abc.ABC):
    """Answers prompts. ``name`` is the arena name, versioned as ``base@k`` for targets.

    ``generate`` must return exactly one ``Generation`` per prompt, in order. A prompt it could
    not answer comes back with ``error`` set (never as an empty answer): failed generations are
    recorded and left out of judging.
    """

    name: str

    @classmethod
    def from_config(cls, pc: Any, name: str, setup: PlayerSetup) -> Player:
        """Build from a ``PlayerConfig``: a local player loads ``setup.path``. API players (and a
        user's ``module:Class`` that subclasses ``APIPlayer``) get retries and the budget there."""
        if not setup.path:
            raise ValueError(f"player {name}: kind {pc.kind} needs 'path'")
        return cls(name=name, path=setup.path, batch_size=pc.batch_size, chat=pc.chat,  # type: ignore[call-arg]
                   system_prompt=pc.system_prompt, device=pc.device, dtype=pc.dtype)

    @abc.abstractmethod
    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        """Answer every prompt; same length and order as ``prompts``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (models, connections)."""
