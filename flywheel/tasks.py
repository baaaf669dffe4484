"""The embedded world's task suite: procedurally generated, verifiable prompts.

Each category has difficulty levels 1..3. A prompt is a short string that ends in ``=``; its
reference answer is what a perfect model writes after it. The train pool, the validation split
(what steers a run) and the held-out eval split (reported only) are drawn from one seeded
generator and never share a prompt text.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterable

from flywheel.records import Prompt, stable_id

LETTERS = "abcde"  # a small alphabet keeps character counting and reversal learnable


def _digits(rng: random.Random, n: int) -> int:
    lo = 0 if n == 1 else 10 ** (n - 1)
    return rng.randint(lo, 10**n - 1)


# Operand sizes (digits of a, digits of b) per difficulty level for the arithmetic categories.
OPERAND_DIGITS = {1: (1, 1), 2: (2, 1), 3: (2, 2)}


def _operands(rng: random.Random, level: int) -> tuple[int, int]:
    da, db = OPERAND_DIGITS[level]
    return _digits(rng, da), _digits(rng, db)


def _add(rng: random.Random, level: int) -> tuple[str, str]:
    a, b = _operands(rng, level)
    return f"{a}+{b}=", str(a + b)


def _sub(rng: random.Random, level: int) -> tuple[str, str]:
    a, b = sorted(_operands(rng, level), reverse=True)
    return f"{a}-{b}=", str(a - b)


def _mul(rng: random.Random, level: int) -> tuple[str, str]:
    a, b = _operands(rng, min(level, 2))
    if level == 3:
        a = _digits(rng, 3)
    return f"{a}*{b}=", str(a * b)


def _rev(rng: random.Random, level: int) -> tuple[str, str]:
    s = "".join(rng.choice(string.ascii_lowercase) for _ in range(level + 2))
    return f"rev {s}=", s[::-1]


def _sort(rng: random.Random, level: int) -> tuple[str, str]:
    s = "".join(rng.choice(string.digits) for _ in range(level + 2))
    return f"sort {s}=", "".join(sorted(s))


def _count(rng: random.Random, level: int) -> tuple[str, str]:
    s = "".join(rng.choice(LETTERS) for _ in range(2 * level + 3))
    c = rng.choice(LETTERS)
    return f"count {c} {s}=", str(s.count(c))


GENERATORS: dict[str, Callable[[random.Random, int], tuple[str, str]]] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "rev": _rev,
    "sort": _sort,
    "count": _count,
}
CATEGORIES: tuple[str, ...] = tuple(GENERATORS)
LEVELS: tuple[int, ...] = (1, 2, 3)


def make_prompt(text: str, answer: str, category: str, level: int, split: str) -> Prompt:
    return Prompt(
        id=stable_id(category, level, text),
        text=text,
        category=category,
        level=level,
        reference=answer,
        split=split,
    )


def take_validation(train: list[Prompt], val_per_cell: int) -> tuple[list[Prompt], list[Prompt]]:
    """(train, validation): ``val_per_cell`` prompts of every (category, level) cell of ``train``,
    chosen by a hash of their ids (so the choice does not depend on the order), move to the
    validation split; the rest stays in train."""
    if val_per_cell <= 0:
        return train, []
    cells: dict[tuple[str, int], list[Prompt]] = {}
    for p in train:
        cells.setdefault((p.category, p.level), []).append(p)
    chosen = {p.id for ps in cells.values()
              for p in sorted(ps, key=lambda p: stable_id("validation", p.id))[: min(val_per_cell, len(ps) // 2)]}
    validation = [Prompt(p.id, p.text, p.category, p.level, p.reference, "validation") for p in train if p.id in chosen]
    return [p for p in train if p.id not in chosen], validation


def build_suite(
    seed: int,
    train_per_cell: int,
    eval_per_cell: int,
    categories: Iterable[str] = CATEGORIES,
    levels: Iterable[int] = LEVELS,
) -> tuple[list[Prompt], list[Prompt]]:
    """The train pool and the eval split, ``*_per_cell`` distinct prompts per (category, level).

    Eval prompts are drawn first and removed from the train pool, so the two never overlap. Where
    a cell has fewer distinct prompts than asked (1-digit addition has 100), it gets all it has.
    """
    rng = random.Random(seed)
    train: list[Prompt] = []
    evals: list[Prompt] = []
    for category in categories:
        if category not in GENERATORS:
            raise ValueError(f"unknown task category {category!r}; known: {', '.join(CATEGORIES)}")
        for level in levels:
            seen: dict[str, str] = {}
            want = train_per_cell + eval_per_cell
            tries = 0
            while len(seen) < want and tries < 50 * want:
                text, answer = GENERATORS[category](rng, level)
                seen.setdefault(text, answer)
                tries += 1
            items = list(seen.items())
            n_eval = min(eval_per_cell, len(items) // 2)
            evals += [make_prompt(t, a, category, level, "eval") for t, a in items[:n_eval]]
            train += [make_prompt(t, a, category, level, "train") for t, a in items[n_eval:]]
    return train, evals
