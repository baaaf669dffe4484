"""What a target trains on in an iteration: the curated SFT or DPO rows of the iterations it
replays (its own, or every target's where traces are pooled), the rules' corrections first in a
games world, shaped as the target reads them (its chat template, or plain text)."""

from __future__ import annotations

import random

from flywheel.ground.chat import TEXT_COLUMNS, as_text, assistant, prompt_as_read, split_prompt
from flywheel.learning.allocation import Allocation
from flywheel.learning.curation import load_dataset_dir
from flywheel.learning.mix import copies
from flywheel.run.context import Context, read_stage


def training_data(ctx: Context, k: int, kind: str, target: str, weight: dict[str, float] | None = None):
    """The ``sft`` or ``dpo`` rows target ``target`` trains on in iteration ``k`` (with
    ``train.replay``, earlier iterations' SFT rows too; ``cooperative``, and ``mixed`` while the
    last allocation pools: every target's). ``weight``: per category ("" for none), how many times
    a row appears, on average (``flywheel.learning.mix``: over 1 repeats rows, ``train.gap_mix``;
    under 1 keeps a row with that chance, ``train.rl.thin_known``), drawn with the run's seed and
    ``k``, so that a resumed phase trains on the same rows; a category not in it keeps each row once."""
    from datasets import concatenate_datasets

    iters = range(1, k + 1) if (kind == "sft" and ctx.cfg.train.replay) else [k]
    # In memory: trainers map() the data, and must not leave cache files inside the run's datasets.
    parts = [load_dataset_dir(ctx.store.dataset_dir(i, kind)) for i in iters]
    if not pools_traces(ctx, k):
        parts = [p.select([i for i, t in enumerate(p["target"]) if t == target]) for p in parts]
    if weight is not None:
        rng = random.Random(ctx.cfg.run.seed + 7919 * k)
        parts = [weighted(p, weight, rng) for p in parts]
    if kind == "sft" and len(parts) > 1:
        parts = rules_first(parts)
    parts = [shape_for(p, ctx.roster.is_chat(target), ctx.roster.config(target).system_prompt) for p in parts if len(p)]
    return concatenate_datasets(parts).shuffle(seed=ctx.cfg.run.seed + k) if parts else None


def weighted(data, weight: dict[str, float], rng: random.Random):
    """``data``'s rows, each as many times as ``copies`` draws for its category's weight (a row
    without a category: the weight of ""), in their order."""
    cats = data["category"] if "category" in data.column_names else [None] * len(data)
    return data.select([i for i, c in enumerate(cats) for _ in range(copies(weight.get(str(c or ""), 1.0), rng))])


def rules_first(parts: list) -> list:
    """SFT rows of several iterations, less those that teach another move in a position where
    some iteration's row from the rules (a games world's missed win or block,
    ``world.games.missed_moves`` and ``world.games.tactics``) names the move: a winner may have won
    after a blunder there, the rules' move is certain. Rows from other sources never displace each other."""
    right: dict[str, set[str]] = {}
    for p in (p for p in parts if "source_model" in p.column_names):
        for prompt, completion, source in zip(p["prompt"], p["completion"], p["source_model"]):
            if source == "rules":
                right.setdefault(str(prompt), set()).add(str(completion))
    if not right:
        return parts

    def keep(r: dict) -> bool:
        moves = right.get(str(r["prompt"]))
        return moves is None or r["source_model"] == "rules" or str(r["completion"]) in moves

    return [p.filter(keep, keep_in_memory=True) for p in parts]


def pools_traces(ctx: Context, k: int) -> bool:
    """Whether iteration ``k``'s targets train on every target's winning traces: always with
    ``cooperative``; with ``mixed``, as the allocation made after iteration ``k - 1`` decided."""
    sharing = ctx.cfg.allocate.sharing
    if sharing != "mixed":
        return sharing == "cooperative"
    plan = read_stage(ctx.store, k - 1, "allocate", Allocation)
    return plan is None or plan.pooled is not False


def shape_for(data, chat: bool, system: str | None):
    """Rows of either format as the target reads them: conversations asked with its own system
    prompt (a chat target; pooled rows may come from another target's battles), or plain text; a
    row from a conversation keeps its earlier turns (``flywheel.ground.chat.raw_prompt`` in text)."""
    def row(r: dict) -> dict:
        text, history = split_prompt(r["prompt"], r.get("history") or "")
        out = {"prompt": prompt_as_read(text, history, chat, system)}
        for c in TEXT_COLUMNS[1:]:
            if c in r:
                out[c] = assistant(as_text(r[c])) if chat else as_text(r[c])
        return out

    cols = [c for c in (*TEXT_COLUMNS, "history") if c in data.column_names]
    return data.select_columns(cols).map(row, remove_columns=cols, keep_in_memory=True)
