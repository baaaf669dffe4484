"""The embedded world's task suite: procedurally generated, verifiable prompts.

Each category has difficulty levels 1..3. A prompt is a short string that ends in ``=``; its
reference answer is what a perfect model writes after it. The train pool, the validation split
(what steers a run) and the held-out eval split (reported only) are drawn from one seeded
generator and never share a prompt's meaning: ``3+5=`` and ``5+3=`` (or ``sort 312=`` and
``sort 123=``) are twins, and twins stay in one split.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterable

from flywheel.config.tree import CATEGORIES
from flywheel.ground.records import Prompt, stable_id

LETTERS = "abcde"  # a small alphabet keeps character counting and reversal learnable
# The suite's version: raised whenever the same seed and sizes make other splits (it is part of a
# pre-trained model's fingerprint, so models built on an older suite are rebuilt). 2: twins.
SUITE_VERSION = 2


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
LEVELS: tuple[int, ...] = (1, 2, 3)


def meaning(category: str, text: str) -> str:
    """What a prompt asks, up to the rewritings the suite knows leave its answer unchanged: the
    operands of a sum or product in either order, the digits to sort or the letters to count in
    any order. Prompts of one category with the same meaning are twins. Any other text (another
    category, another format) means itself."""
    body = text.removesuffix("=")
    try:
        if category in ("add", "mul"):
            op = "+" if category == "add" else "*"
            a, b = body.split(op)
            return op.join(sorted((a, b), key=lambda x: (int(x), x))) + "="
        if category == "sort":
            word, digits = body.split(" ")
            return f"{word} {''.join(sorted(digits))}="
        if category == "count":
            word, letter, s = body.split(" ")
            return f"{word} {letter} {''.join(sorted(s))}="
    except ValueError:  # not in the suite's format: no known twin
        pass
    return text


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
    """(train, validation): ``val_per_cell`` meanings of every (category, level) cell of ``train``,
    chosen by a hash of their prompts' ids (so the choice does not depend on the order), move to
    the validation split, one prompt each; their twins leave train. The rest stays in train."""
    if val_per_cell <= 0:
        return train, []
    cells: dict[tuple[str, int], dict[str, list[Prompt]]] = {}
    for p in train:
        cells.setdefault((p.category, p.level), {}).setdefault(meaning(p.category, p.text), []).append(p)
    rank = lambda p: stable_id("validation", p.id)  # noqa: E731
    chosen: set[str] = set()  # the validation prompts' ids
    gone: set[tuple[str, str]] = set()  # (category, meaning) taken out of train
    for (category, _), twins in cells.items():
        firsts = sorted((min(ps, key=rank) for ps in twins.values()), key=rank)
        for p in firsts[: min(val_per_cell, len(twins) // 2)]:
            chosen.add(p.id)
            gone.add((category, meaning(category, p.text)))
    validation = [Prompt(p.id, p.text, p.category, p.level, p.reference, "validation") for p in train if p.id in chosen]
    return [p for p in train if (p.category, meaning(p.category, p.text)) not in gone], validation


def build_suite(
    seed: int,
    train_per_cell: int,
    eval_per_cell: int,
    categories: Iterable[str] = CATEGORIES,
    levels: Iterable[int] = LEVELS,
) -> tuple[list[Prompt], list[Prompt]]:
    """The train pool and the eval split, ``*_per_cell`` distinct prompts per (category, level).

    Eval prompts are drawn first, one per meaning, and every twin of an eval prompt is left out
    of the train pool, so the two never share a meaning (:func:`meaning`). Where a cell has fewer
    distinct prompts than asked (1-digit addition has 100 texts, 55 meanings), it gets what it has.
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
            firsts: dict[str, tuple[str, str]] = {}  # meaning -> its first prompt, in drawing order
            for text, answer in seen.items():
                firsts.setdefault(meaning(category, text), (text, answer))
            held = list(firsts)[: min(eval_per_cell, len(firsts) // 2)]
            evals += [make_prompt(*firsts[m], category, level, "eval") for m in held]
            held_set = set(held)
            train += [make_prompt(t, a, category, level, "train") for t, a in seen.items()
                      if meaning(category, t) not in held_set]
    return train, evals
