"""The asker: the simulated user who writes the next user turn of a conversation.

An asker reads conversations that end with an assistant turn and writes each one's next user
turn (``ask``); one that knows what it asked can also give the checkable answer to that turn
(``reference``), which the verifier then reads. The arena asks once per battle and sends the
same turn to both sides, so the battle stays fair (``flywheel/arena/conversations.py``).

Two kinds: a procedural asker of a world (the embedded world's follow-ups,
``flywheel/worlds/followups.py``), or any player (transformers, vLLM, an API) asked with
``ASKER_PROMPT``: ``LLMAsker``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from flywheel.ground.conversation import Message
from flywheel.ground.records import Prompt, stable_id
from flywheel.players.player import Player, SamplingParams


@dataclass(frozen=True)
class AskedTurn:
    """The next user turn, or the error that kept the asker from writing it."""

    text: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.text.strip())


class Asker(abc.ABC):
    """Writes user turns. ``ask`` returns one turn per conversation, in order."""

    name: str
    checks = False  # whether ``reference`` can give a turn's checkable answer

    @abc.abstractmethod
    def ask(self, conversations: list[list[Message]]) -> list[AskedTurn]:
        """The next user turn of every conversation (each ends with an assistant turn)."""

    def reference(self, conversation: list[Message], turn: str) -> str | None:
        """The checkable answer to ``turn`` asked after ``conversation``; None: not checkable."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the asker holds (an LLM asker's model)."""


ASKER_PROMPT = (
    "You play the user in a conversation with an AI assistant. Read the conversation so far and write the "
    "user's next message: a natural follow-up that builds on the assistant's last answer and asks for more "
    "(a harder variant, a correction, a step further). Reply with the message only.\n\n{transcript}\n\n"
    "The user's next message:"
)


def transcript(conversation: list[Message]) -> str:
    """A conversation as the asker prompt shows it: ``User: ...`` / ``Assistant: ...`` lines."""
    return "\n\n".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}"
                       for m in conversation if m["role"] != "system")


class LLMAsker(Asker):
    """A player as the asker: it is asked ``ASKER_PROMPT`` with the conversation so far."""

    def __init__(self, player: Player, params: SamplingParams, prompt: str = ASKER_PROMPT) -> None:
        self.player = player
        self.name = player.name
        self.params = params
        self.prompt = prompt

    def ask(self, conversations: list[list[Message]]) -> list[AskedTurn]:
        prompts = []
        for c in conversations:
            text = self.prompt.format(transcript=transcript(c))
            prompts.append(Prompt(stable_id("asker", self.name, text), text, "asker", 0, None, "asker"))
        gens = self.player.generate(prompts, self.params)
        return [AskedTurn(g.text.strip()) if g.ok else AskedTurn("", g.error) for g in gens]

    def close(self) -> None:
        self.player.close()
