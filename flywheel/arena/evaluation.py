"""Held-out evaluation helpers: the eval and validation battles, accuracy and the WizardArena-style
eval subsets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from flywheel.arena.selection import arm_of, seat
from flywheel.ground.conversation import Message
from flywheel.ground.records import BattleSpec, Prompt, stable_id
from judges.verifier import normalize

Correct = Callable[[str | None, Prompt], bool]

SUBSET_RULES = {
    "diverse": "half of the eval prompts of every category x level cell (stratified, fixed by hash)",
    "hard": "the third of the eval prompts the opponents (the reference models) get wrong most, "
            "ties broken by how much they disagree",
    "mix": "diverse + hard",
}


def held_out_spec(k: int, phase: str, side: str, other: str, p: Prompt) -> BattleSpec:
    """The battle of ``side`` and ``other`` (players or teams) on ``p`` in iteration ``k``'s
    ``phase`` (eval or validation): its id from the phase, both sides and the prompt, the seats
    drawn from the id."""
    key = stable_id(phase, side, other, p.id)
    a, b = seat(key, side, other)
    return BattleSpec(battle_id=key, iteration=k, phase=phase, prompt_id=p.id, model_a=a, model_b=b, arm=arm_of(p))


def is_correct(response: str | None, p: Prompt) -> bool:
    return response is not None and normalize(response) == normalize(p.reference or "")


def accuracy(responses: dict[str, str], prompts: list[Prompt], correct: Correct = is_correct
             ) -> tuple[float, dict[str, float]]:
    """Overall and per-category accuracy of ``responses`` (by prompt id): exact match, or the
    run's verifier check (``correct``)."""
    by_cat: dict[str, list[bool]] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(correct(responses.get(p.id), p))
    total = [x for v in by_cat.values() for x in v]
    return round(sum(total) / len(total), 4), {c: round(sum(v) / len(v), 4) for c, v in sorted(by_cat.items())}


def turn_results(messages: list[Message], p: Prompt, correct: Correct = is_correct) -> list[bool | None]:
    """Whether each user turn's answer in a conversation is right (None: a turn without a reference)."""
    out: list[bool | None] = []
    for i, m in enumerate(messages):
        if m["role"] == "user":
            reply = messages[i + 1]["content"] if i + 1 < len(messages) else None
            ref = m.get("reference")
            out.append(None if ref is None else correct(reply, replace(p, reference=ref)))
    return out


def prompt_turn_results(conversations: dict[str, list[Message]], prompts: list[Prompt], correct: Correct = is_correct
                        ) -> dict[str, list[bool | None]]:
    """Each prompt's ``turn_results`` by prompt id, in the order of ``prompts`` (a prompt without a
    conversation: its turns wrong, as many as the longest conversation has)."""
    width = max((sum(1 for m in c if m["role"] == "user") for c in conversations.values()), default=1)
    return {p.id: turn_results(conversations[p.id], p, correct) if p.id in conversations else [False] * width
            for p in prompts}


def conversation_accuracy(conversations: dict[str, list[Message]], prompts: list[Prompt], correct: Correct = is_correct
                          ) -> tuple[float, dict[str, float], list[float]]:
    """(accuracy, per category, per turn) of conversations by prompt id: every checked turn counts
    once (a prompt without a conversation: its turns wrong, as many as the longest has)."""
    by_cat: dict[str, list[bool]] = {}
    by_turn: dict[int, list[bool]] = {}
    results = prompt_turn_results(conversations, prompts, correct)
    for p in prompts:
        for t, ok in enumerate(results[p.id]):
            if ok is not None:
                by_cat.setdefault(p.category, []).append(ok)
                by_turn.setdefault(t, []).append(ok)
    total = [x for v in by_cat.values() for x in v]
    mean = lambda v: round(sum(v) / len(v), 4) if v else 0.0
    return mean(total), {c: mean(v) for c, v in sorted(by_cat.items())}, [mean(by_turn[t]) for t in sorted(by_turn)]


def eval_subsets(eval_split: list[Prompt], reference_answers: dict[str, dict[str, str]],
                 correct: Correct = is_correct) -> dict[str, list[str]]:
    """Prompt ids of the ``diverse``, ``hard`` and ``mix`` subsets (see ``SUBSET_RULES``).

    ``reference_answers`` maps each reference model to its answers by prompt id."""
    cells: dict[tuple[str, int], list[Prompt]] = {}
    for p in eval_split:
        cells.setdefault((p.category, p.level), []).append(p)
    diverse = []
    for ps in cells.values():
        ranked = sorted(ps, key=lambda p: stable_id("diverse", p.id))
        diverse += [p.id for p in ranked[: max(1, len(ranked) // 2)]]

    def hardness(p: Prompt) -> tuple:
        right = [correct(ans.get(p.id), p) for ans in reference_answers.values()]
        mean = sum(right) / len(right) if right else 0.0
        return (-(1 - mean), -(mean * (1 - mean)), -p.level, p.id)

    hard = [p.id for p in sorted(eval_split, key=hardness)[: max(1, len(eval_split) // 3)]]
    mix = sorted(set(diverse) | set(hard))
    return {"diverse": sorted(diverse), "hard": sorted(hard), "mix": mix}
