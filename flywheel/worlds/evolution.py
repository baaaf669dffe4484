"""Evolving prompts (the Evol-Instruct step): the procedural evolver of the embedded world, the
instructions a player evolver is given, and the decontamination every evolved prompt passes.

Procedural evolving works on the task suite's own formats (flywheel/worlds/tasks.py), and the
new prompt's reference is computed from its new text (``solve``), never copied from the parent:

- ``depth`` (harder): one operand or string grows by a character (``12+34=`` -> ``127+34=``,
  ``sort 3141=`` -> ``sort 31415=``, two more letters to count), and the level rises by one;
- ``breadth`` (another task of the same kind): ``rev`` composed with the task, its answer written
  backwards (``rev sort 3141=`` -> ``4311``: a sort in descending order; ``rev 12+34=`` -> ``64``:
  a sum written least significant digit first). Category ``rev-<task>``. Only ``sort`` and the
  arithmetic tasks are composed: their reversed answers are made in the order the tiny models
  already produce digits (a descending sort; for sums, products and differences the order a
  carry is worked out in, which small transformers learn more easily than the usual order), in
  the tiny models' alphabet. ``rev`` of ``rev`` is the prompt itself, ``rev`` of a count is
  mostly the count, and an answer that reads the same backwards (``7``, ``121``) stays the same:
  those are not composed.

Decontamination (``HeldOut``): an evolved prompt is refused when it is an eval or validation
prompt (the same text, whitespace aside), a twin of one (the same meaning, tasks.meaning; for a
composition, also the task inside it), or a near-duplicate of one (character 5-gram Jaccard
similarity at least ``select.evolve.near_duplicate``).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass

from flywheel.ground.records import Prompt
from flywheel.worlds.tasks import LETTERS, meaning

COMPOSED = "rev-"  # the category prefix of a task composed with rev
COMPOSABLE = ("add", "sub", "mul", "sort")
_ARITH = {"add": "+", "sub": "-", "mul": "*"}

DEPTH_TEMPLATE = (
    "You make prompts harder. Rewrite the prompt below into a more demanding version of itself: add one "
    "constraint or requirement, ask for a deeper step of reasoning, or make a general request specific. It must "
    "stay self-contained and answerable, in the same language, and at most twenty words longer. Reply with the "
    "rewritten prompt only, nothing before or after it.\n\nPrompt:\n{prompt}")
BREADTH_TEMPLATE = (
    "You write new prompts. Take the prompt below as a seed and write a brand-new prompt of the same kind and "
    "about the same length and difficulty, on a different and rarer topic. Reply with the new prompt only, "
    "nothing before or after it.\n\nPrompt:\n{prompt}")
# What a reply that is no rewrite looks like (the Evol-Instruct paper drops such evolutions).
_NOT_A_PROMPT = re.compile(r"rewritten prompt|given prompt|new prompt:|^(sorry|i cannot|i can't|as an ai)", re.I)
_LABEL = re.compile(r"^\s*(rewritten|new|evolved)?\s*prompt\s*:\s*", re.I)


def solve(category: str, text: str) -> str | None:
    """The reference answer of a prompt in the task suite's formats (and ``rev-`` compositions),
    computed from its text; None where the text is not in its category's format."""
    if category.startswith(COMPOSED):
        inner = solve(category.removeprefix(COMPOSED), text.removeprefix("rev ")) if text.startswith("rev ") else None
        return None if inner is None else inner[::-1]
    body = text.removesuffix("=") if text.endswith("=") else None
    if body is None:
        return None
    if category in _ARITH:
        m = re.fullmatch(rf"(\d+){re.escape(_ARITH[category])}(\d+)", body)
        if m is None:
            return None
        a, b = int(m[1]), int(m[2])
        return str(a + b if category == "add" else a - b if category == "sub" else a * b)
    patterns = {"rev": r"rev ([a-z]+)", "sort": r"sort (\d+)", "count": r"count ([a-z]) ([a-z]+)"}
    m = re.fullmatch(patterns[category], body) if category in patterns else None
    if m is None:
        return None
    if category == "rev":
        return m[1][::-1]
    if category == "sort":
        return "".join(sorted(m[1]))
    return str(m[2].count(m[1]))


def _longer(operand: str, rng: random.Random) -> str:
    """A number one digit longer (no leading zero)."""
    return str(int(operand) * 10 + rng.randint(0, 9)) if int(operand) else str(rng.randint(10, 99))


def deepen(category: str, text: str, rng: random.Random) -> str | None:
    """``text`` with one operand or string a character longer (None: not in the suite's format)."""
    if category.startswith(COMPOSED):
        if not text.startswith("rev "):
            return None
        inner = deepen(category.removeprefix(COMPOSED), text.removeprefix("rev "), rng)
        return None if inner is None else "rev " + inner
    if solve(category, text) is None:
        return None
    body = text.removesuffix("=")
    if category in _ARITH:
        a, b = body.split(_ARITH[category])
        if category != "sub" and len(b) < len(a):  # a difference stays >= 0: only its first operand grows
            return f"{a}{_ARITH[category]}{_longer(b, rng)}="
        return f"{_longer(a, rng)}{_ARITH[category]}{b}="
    if category == "rev":
        return f"{body}{rng.choice(string.ascii_lowercase)}="
    if category == "sort":
        return f"{body}{rng.choice(string.digits)}="
    return f"{body}{rng.choice(LETTERS)}{rng.choice(LETTERS)}="  # count: two more letters


def compose(category: str, text: str) -> tuple[str, str] | None:
    """(text, category) of ``rev`` composed with the task, or None where it is not composed."""
    answer = solve(category, text) if category in COMPOSABLE else None
    if answer is None or answer == answer[::-1]:  # backwards the same: nothing new to learn
        return None
    return "rev " + text, COMPOSED + category


def procedural(parent: Prompt, method: str, rng: random.Random) -> Prompt | None:
    """The parent evolved by ``method`` (depth or breadth), its reference computed from the new
    text; None where the method does not apply to it. The id is left to the caller."""
    if method == "depth":
        text = deepen(parent.category, parent.text, rng)
        category, level = parent.category, parent.level + 1
    else:
        made = compose(parent.category, parent.text)
        text, category = made if made else (None, parent.category)
        level = parent.level
    if text is None:
        return None
    answer = solve(category, text)
    return None if answer is None else Prompt("", text, category, level, answer, "train")


def instructions(method: str, prompt: str, depth_template: str | None = None,
                 breadth_template: str | None = None) -> str:
    """What a player evolver is asked: the method's instructions with the parent in them."""
    template = (depth_template or DEPTH_TEMPLATE) if method == "depth" else (breadth_template or BREADTH_TEMPLATE)
    return template.replace("{prompt}", prompt)


def rewritten(reply: str, parent: str, max_chars: int) -> str | None:
    """The new prompt in a player evolver's reply, or None where the reply is no usable rewrite:
    empty, the parent again, longer than ``max_chars``, a refusal, or talk about the task."""
    text = _LABEL.sub("", reply.strip()).strip().strip('"').strip()
    if not text or len(text) > max_chars or _NOT_A_PROMPT.search(text):
        return None
    return None if _norm(text) == _norm(parent) else text


def _norm(text: str) -> str:
    return " ".join(text.split())


def shingles(text: str, n: int = 5) -> frozenset[str]:
    """The character n-grams of a prompt (lowercased, whitespace collapsed); a shorter text is one."""
    t = _norm(text).lower()
    return frozenset(t[i:i + n] for i in range(max(1, len(t) - n + 1)))


@dataclass(frozen=True)
class HeldOut:
    """The prompts an evolved prompt may not repeat: the eval and validation splits."""

    texts: frozenset[str]
    meanings: frozenset[tuple[str, str]]
    grams: tuple[frozenset[str], ...]
    threshold: float

    @classmethod
    def of(cls, prompts: list[Prompt], threshold: float) -> HeldOut:
        return cls(frozenset(_norm(p.text) for p in prompts),
                   frozenset((p.category, meaning(p.category, _norm(p.text))) for p in prompts),
                   tuple(shingles(p.text) for p in prompts), threshold)

    def clash(self, category: str, text: str) -> str | None:
        """Why ``text`` may not join the train pool (``exact``, ``twin``, ``near-duplicate``), or None."""
        if _norm(text) in self.texts:
            return "exact"
        keys = [(category, meaning(category, _norm(text)))]
        if category.startswith(COMPOSED) and text.startswith("rev "):
            inner = category.removeprefix(COMPOSED)
            keys.append((inner, meaning(inner, _norm(text.removeprefix("rev ")))))
        if any(k in self.meanings for k in keys):
            return "twin"
        mine = shingles(text)
        if any(len(mine & g) >= self.threshold * len(mine | g) for g in self.grams):
            return "near-duplicate"
        return None
