"""evaluate, in a conversation world: each model's turn 2 two ways, each with its 95% interval.

- **On its own first answer**: the eval battles' second turn, whose reference the asker built on
  the answer the model gave. Two models' turn 2 on one prompt are then two questions.
- **Fixed** (MT-Bench's way, ``flywheel/arena/second_turns.py``): one second turn per eval prompt,
  written up front on the prompt's reference answer, the same text and reference for every model,
  asked after the model's own first answer. Prompt by prompt, the models answer the same question.

The fixed turns are written the first time and kept (``ratings/eval-second-turns.json``); each
iteration's conversations on them go to ``ratings/iter-000k-second-turns.json``."""

from __future__ import annotations

from flywheel.arena.second_turns import FixedTurn, answer_fixed_turns, fix_second_turns, turn_counts
from flywheel.ground.atomic import atomic_write_json, read_json
from flywheel.ground.conversation import Message
from flywheel.ground.store import iter_name
from flywheel.maths.proportions import wilson
from flywheel.run.context import Context
from flywheel.run.results import SecondTurn, TurnAccuracy

FIXED_TURNS = "eval-second-turns.json"


def second_turns(ctx: Context, k: int, models: list[str], talks: dict[str, dict[str, list[Message]]]
                 ) -> dict[str, SecondTurn]:
    """Turn 2 two ways for each of ``models`` that has eval conversations (``talks``: model ->
    prompt id -> the eval battles' conversation); a model whose turn 2 was never checked has none."""
    fixed = fixed_turns(ctx)
    asked: dict[str, dict[str, list[Message]]] = {}
    out = {}
    for m in models:
        right, n = turn_counts(talks.get(m, {}), ctx.eval_split, ctx.correct)
        if m not in talks or not n:
            continue
        mine = None
        if fixed:
            asked[m] = answer_fixed_turns(ctx.roster, ctx.store, m, ctx.eval_split, fixed, k)
            mine = turn_accuracy(*turn_counts(asked[m], [p for p in ctx.eval_split if p.id in fixed], ctx.correct))
        out[m] = SecondTurn(turn_accuracy(right, n), mine)
    if asked:
        atomic_write_json(ctx.store.ratings_path(f"{iter_name(k)}-second-turns.json"), asked)
    return out


def fixed_turns(ctx: Context) -> dict[str, FixedTurn]:
    """The eval prompts' fixed second turns by prompt id, written by the eval asker the first time
    and read back after (none without an asker, or where it checks no turn up front)."""
    path = ctx.store.ratings_path(FIXED_TURNS)
    kept = read_json(path)
    if kept is None:
        asker = ctx.roster.asker()
        made = fix_second_turns(asker, ctx.eval_split) if asker is not None else {}
        kept = {pid: t.to_json() for pid, t in made.items()}
        atomic_write_json(path, kept)
    return {pid: FixedTurn(t["text"], t["reference"]) for pid, t in kept.items()}


def turn_accuracy(right: int, checked: int) -> TurnAccuracy | None:
    """``right`` of ``checked`` as a TurnAccuracy with its 95% Wilson interval (None: none checked)."""
    if not checked:
        return None
    lower, upper = wilson(right, checked)
    return TurnAccuracy(round(right / checked, 4), round(lower, 4), round(upper, 4), checked)
