"""The embedded world's second turns: a procedural asker that writes follow-ups on the first answer.

After a task of the suite (``17+25=``) the asker writes one of two follow-ups, in the suite's
alphabet so the tiny models can read them:

- ``+n=`` (n from 1 to 9: "now add n to that"), after a turn whose answer is a whole number
  (always after a one-digit answer, else half the time);
- ``rev=`` ("reverse your answer"), otherwise.

Which one is drawn from the first user turn and the turn's number (seeded), never from an answer,
so both sides of a battle get the same follow-up. **The reference of a follow-up is computed from
the answer actually given** (each side's own): turn 2 checks whether a model builds on what it
said, apart from whether turn 1 was right, and the winner's conversation stays consistent as
training data. Where the operation does not apply to the given answer (``+n=`` after text that is
not a whole number, or an empty answer), it is computed from the correct answer of the turn before.
The eval also asks each prompt's follow-up as a fixed second turn, its reference computed from the
correct first answer, the same for every model (``flywheel/arena/second_turns.py``).
"""

from __future__ import annotations

import random
import re

from flywheel.ground.chat import raw_prompt
from flywheel.ground.conversation import Message
from flywheel.ground.records import Prompt, stable_id
from flywheel.players.asker import AskedTurn, Asker

WHOLE = re.compile(r"-?\d+")
NUMBER = re.compile(r"-?(?:0|[1-9]\d*)")  # a whole number as written: no leading zero (a sorted 0123 is text)
PLUS = re.compile(r"\+(\d)=")
REVERSE = "rev="


def follow_up(first_turn: str, reference: str | None, turn: int, seed: int = 0) -> str:
    """The follow-up written as user turn ``turn`` (2, 3, ...) of the conversation that opened with
    ``first_turn``, whose previous correct answer is ``reference``."""
    rng = random.Random(stable_id("follow-up", seed, first_turn, turn))
    ref = (reference or "").strip()
    if NUMBER.fullmatch(ref) and (len(ref) == 1 or rng.random() < 0.5):  # one character: reversing is no task
        return f"+{rng.randint(1, 9)}="
    return REVERSE


def apply(turn: str, answer: str) -> str | None:
    """What ``turn`` asks of ``answer``: None where it does not apply."""
    answer = answer.strip()
    if not answer:  # nothing to build on: the turn does not apply
        return None
    if turn == REVERSE:
        return answer[::-1]
    m = PLUS.fullmatch(turn)
    if m and WHOLE.fullmatch(answer):
        return str(int(answer) + int(m[1]))
    return None


class ProceduralAsker(Asker):
    """``kind: procedural``: the follow-ups above. Its conversations must open with a task of the suite."""

    checks = True

    def __init__(self, name: str = "procedural", seed: int = 0) -> None:
        self.name = name
        self.seed = seed

    def ask(self, conversations: list[list[Message]]) -> list[AskedTurn]:
        out = []
        for c in conversations:
            users = [m for m in c if m["role"] == "user"]
            out.append(AskedTurn(follow_up(users[0]["content"], users[-1].get("reference"), len(users) + 1, self.seed)))
        return out

    def reference(self, conversation: list[Message], turn: str) -> str | None:
        answer = conversation[-1]["content"] if conversation and conversation[-1]["role"] == "assistant" else ""
        got = apply(turn, answer)
        if got is None:  # not applicable to the answer given: to the right one
            previous = next((m.get("reference") for m in reversed(conversation) if m["role"] == "user"), None)
            got = apply(turn, previous) if previous is not None else None
        return got


class RepeatingAsker(Asker):
    """``kind: procedural, procedure: repeat``: a useless asker that asks the first turn again. Its
    turn's reference is the first turn's (the same question has the same answer), so a conversation
    it writes checks nothing a single turn does not: what the asker bandit should learn to avoid."""

    checks = True

    def __init__(self, name: str = "repeat") -> None:
        self.name = name

    def ask(self, conversations: list[list[Message]]) -> list[AskedTurn]:
        return [AskedTurn(next(m["content"] for m in c if m["role"] == "user")) for c in conversations]

    def reference(self, conversation: list[Message], turn: str) -> str | None:
        return next((m.get("reference") for m in conversation if m["role"] == "user"), None)


def two_turn_examples(prompts: list[Prompt], seed: int = 0) -> list[Prompt]:
    """Each prompt's second turn after its correct answer, as a model without a chat template
    reads it (``17+25=42 +7=``, reference ``49``): what the tiny models pre-train on besides the
    first turns in a multi-turn world."""
    out = []
    for p in prompts:
        if p.reference is None:
            continue
        turn = follow_up(p.text, p.reference, 2, seed)
        history = [{"role": "user", "content": p.text}, {"role": "assistant", "content": p.reference}]
        out.append(Prompt(stable_id("turn-2", p.id, turn), raw_prompt(turn, None, history), p.category, p.level,
                          apply(turn, p.reference), p.split))
    return out
