"""The fixed second turn: a paired turn-2 comparison, as MT-Bench asks its second turns.

In the eval battles the asker's reference for turn 2 is built on the answer each side gave
(``flywheel/worlds/followups.py``), so two models' turn 2 on one prompt are two questions. Here
each eval prompt's second user turn is fixed up front instead: the asker writes it once, before any
model answers, on the prompt's reference answer, and its reference is computed there too. Every
model is then asked that same text, checked against that same reference, after its own first
answer (MT-Bench's way: the second question is part of the prompt set; each model carries its own
first answer, as a user of it would see). Prompt by prompt, two models answer the same question.

A prompt without a reference, one that gives its own later turns (a pool's turns carry no
reference), or whose fixed turn the asker cannot check (an LLM asker) has no fixed second turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from flywheel.arena.conversations import turn_prompt
from flywheel.arena.evaluation import Correct, prompt_turn_results
from flywheel.arena.generation import generate_cached
from flywheel.ground.conversation import Message
from flywheel.ground.records import Prompt
from flywheel.ground.store import RunStore
from flywheel.players.asker import Asker
from flywheel.worlds.world import Roster

SECOND = 1  # the second user turn, 0-based


@dataclass(frozen=True)
class FixedTurn:
    """A prompt's second user turn fixed up front and its checkable answer."""

    text: str
    reference: str

    def to_json(self) -> dict[str, str]:
        return {"text": self.text, "reference": self.reference}


def fix_second_turns(asker: Asker, prompts: list[Prompt]) -> dict[str, FixedTurn]:
    """Each prompt's fixed second turn by prompt id: the asker's turn after the prompt's reference
    answer, with the asker's reference there (prompts without one of them are left out)."""
    if not asker.checks:  # its turns have no reference: nothing to fix that could be checked
        return {}
    ready = [p for p in prompts if p.reference is not None and not p.turns]
    talks = [[{"role": "user", "content": p.text, "reference": p.reference},
              {"role": "assistant", "content": p.reference}] for p in ready]
    out = {}
    for p, talk, asked in zip(ready, talks, asker.ask(talks) if talks else []):
        if not asked.ok:
            continue
        text = asked.text.strip()
        ref = asker.reference(talk, text)
        if ref is not None:
            out[p.id] = FixedTurn(text, ref)
    return out


def answer_fixed_turns(roster: Roster, store: RunStore, model: str, prompts: list[Prompt],
                       fixed: dict[str, FixedTurn], iteration: int, phase: str = "eval"
                       ) -> dict[str, list[Message]]:
    """``model``'s conversation on every prompt with a fixed second turn, by prompt id: the prompt,
    its own first answer, the fixed turn (with its reference) and its answer. A failed answer ends
    the conversation there (a prompt whose first answer failed has none)."""
    ready = [p for p in prompts if p.id in fixed]
    first = generate_cached(roster, store, model, ready, iteration, phase)
    talks: dict[str, list[Message]] = {}
    asked: list[Prompt] = []
    for p in ready:
        g, turn = first[p.id], fixed[p.id]
        if not g.ok:
            continue
        talks[p.id] = [{"role": "user", "content": p.text, "reference": p.reference},
                       {"role": "assistant", "content": g.text}]
        asked.append(turn_prompt(p, SECOND, turn.text, turn.reference, talks[p.id]))
        talks[p.id].append({"role": "user", "content": turn.text, "reference": turn.reference})
    second = generate_cached(roster, store, model, asked, iteration, phase)
    for p, q in zip([p for p in ready if p.id in talks], asked):
        if second[q.id].ok:
            talks[p.id].append({"role": "assistant", "content": second[q.id].text})
    return talks


def turn_counts(conversations: dict[str, list[Message]], prompts: list[Prompt], correct: Correct,
                turn: int = SECOND) -> tuple[int, int]:
    """(right, checked) on user turn ``turn`` (0-based) over ``prompts``, counted as
    ``conversation_accuracy`` counts it: no conversation is wrong; a turn not reached, or without a
    reference, is left out."""
    results = prompt_turn_results(conversations, prompts, correct)
    checked = [r[turn] for r in results.values() if len(r) > turn and r[turn] is not None]
    return sum(checked), len(checked)
