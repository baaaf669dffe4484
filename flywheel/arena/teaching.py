"""Teaching (``select.teaching``): opponents teach a target with worked examples, and each
teacher is rewarded by how much its example improved the target.

A lesson, for one target and one cell (category x level):

1. the cell's teacher bandit picks a teacher (arms = teachers; one bandit per target and cell,
   since a specialist teaches its own categories best);
2. the teacher answers one prompt of the cell, the *example*;
3. the target answers a *sibling* (another prompt of the same cell) twice: asked alone, and after
   the example as a one-shot exchange (``one_shot``: a user turn with the example and an
   assistant turn with the teacher's answer, through the chat template; raw text for a model
   without one, ``3+5=8 4+2=``);
4. the verifier scores both answers; the *lift* is correct-with minus correct-without, in
   {-1, 0, 1}, and the teacher's reward (``reward``) is (lift + 1) / 2.

What the target learns (``best_lessons``, ``lesson_sft``): the lessons with the largest lift
become SFT rows of the sibling prompt asked alone, answered with the target's *own* answer after
the example. That answer passed the verifier (a lift of 1 means it did), it is in the target's own
words and format (the teacher's may be in another, or wrong and still helpful), and training on it
without the example in the prompt distils what the example taught into the target.

Pure functions of what they are given; flywheel/stages/teach.py plays the lessons and stores them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flywheel.config.tree import TeachingConfig
from flywheel.ground.conversation import encode
from flywheel.ground.records import Generation, Lesson, Prompt, SFTExample, base_name, stable_id
from flywheel.maths.bandits import Bandit


@dataclass
class Teachers:
    """A target's teacher bandits: one per cell, over the same teachers."""

    teachers: list[str]
    per_cell: dict[str, Bandit]

    @classmethod
    def new(cls, cfg: TeachingConfig, cells: list[str], teachers: list[str]) -> Teachers:
        return cls(list(teachers), {c: Bandit(list(teachers), cfg.policy) for c in cells})

    def add_cells(self, cfg: TeachingConfig, cells: list[str]) -> None:
        """Cells the pool has gained (evolved prompts), each with a fresh bandit."""
        for c in cells:
            self.per_cell.setdefault(c, Bandit(list(self.teachers), cfg.policy))

    def state(self) -> dict[str, Any]:
        return {"teachers": self.teachers, "per_cell": {c: b.state() for c, b in self.per_cell.items()}}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Teachers:
        return cls(list(d["teachers"]), {c: Bandit.from_state(s) for c, s in d["per_cell"].items()})

    def update(self, lessons: list[Lesson]) -> None:
        """One round's lessons (those without an error) as (teacher, reward) per cell."""
        by_cell: dict[str, list[tuple[int, float]]] = {}
        index = {t: i for i, t in enumerate(self.teachers)}
        for x in lessons:
            if x.error is None and x.cell in self.per_cell:
                by_cell.setdefault(x.cell, []).append((index[x.teacher], reward(x.lift)))
        for c, pulls in by_cell.items():
            self.per_cell[c].update([i for i, _ in pulls], [r for _, r in pulls])

    def share(self, teacher: str) -> float:
        """The share of every pull so far (over the cells) that went to ``teacher``."""
        pulls = sum(b.total_pulls for b in self.per_cell.values())
        total = int(np.sum(pulls))
        return float(pulls[self.teachers.index(teacher)]) / total if total else 0.0


@dataclass(frozen=True)
class LessonPlan:
    """A lesson to give: ``teacher`` answers ``example``; the target answers ``sibling`` (same cell)."""

    lesson_id: str
    cell: str
    teacher: str
    example: Prompt
    sibling: Prompt


@dataclass(frozen=True)
class TeachingRound:
    """Round ``rnd`` (1-based) of iteration ``k``'s teaching of ``target`` (a version), in a run
    seeded ``seed``: ``lessons`` lessons. Together they seed the round's draws and name its lessons."""

    target: str
    lessons: int
    k: int
    rnd: int
    seed: int

    def id_of(self, *parts: object) -> str:
        """The round's stable id (seed, iteration, round, target) followed by ``parts``."""
        return stable_id(self.seed, self.k, self.rnd, self.target, *parts)


def plan_lessons(teachers: Teachers, pool_by_cell: dict[str, list[Prompt]], this: TeachingRound) -> list[LessonPlan]:
    """``this.lessons`` lessons spread evenly over the cells that have two prompts or more (the
    cells in a seeded random order, repeated), each with two distinct prompts of its cell drawn at
    random (example, sibling) and the teacher its cell's bandit picks. Only prompts with a reference
    answer are taught (the verifier scores the lesson)."""
    rng = np.random.default_rng(int(this.id_of("teach"), 16) % 2**63)
    checkable = {c: [p for p in ps if p.reference is not None] for c, ps in sorted(pool_by_cell.items())}
    cells = [c for c, ps in checkable.items() if len(ps) >= 2 and c in teachers.per_cell]
    if not cells:
        return []
    out = []
    for i, ci in enumerate(np.resize(rng.permutation(len(cells)), this.lessons)):
        cell = cells[int(ci)]
        pool = checkable[cell]
        e, s = (int(j) for j in rng.choice(len(pool), size=2, replace=False))
        teacher = teachers.teachers[int(teachers.per_cell[cell].select(1, rng)[0])]
        lid = this.id_of(i, teacher, pool[e].id, pool[s].id)
        out.append(LessonPlan(lid, cell, teacher, pool[e], pool[s]))
    return out


def one_shot(example: Prompt, answer: str, sibling: Prompt) -> Prompt:
    """``sibling`` asked after the worked example: a user turn with the example's text and an
    assistant turn with ``answer`` before it (``Prompt.history``); its own id."""
    history = encode([{"role": "user", "content": example.text}, {"role": "assistant", "content": answer}])
    return Prompt(stable_id("one-shot", sibling.id, example.text, answer), sibling.text, sibling.category,
                  sibling.level, sibling.reference, sibling.split, history=history)


def lift(correct_with: bool, correct_without: bool) -> float:
    """The target's lift from the example: 1 (turned right), 0 (no change) or -1 (turned wrong)."""
    return float(correct_with) - float(correct_without)


def reward(lift_: float) -> float:
    """The teacher's bandit reward for a lift in [-1, 1], mapped to [0, 1]."""
    return (lift_ + 1.0) / 2.0


Correct = Callable[[str | None, Prompt], bool]


def grade(plan: LessonPlan, this: TeachingRound, example: Generation, alone: Generation, taught: Generation,
          correct: Correct) -> Lesson:
    """The lesson's record: the three answers, the verifier's marks and the lift (0, with the
    error, where a generation failed: such a lesson rewards no one and teaches nothing)."""
    failed = next((f"{who}: {g.error}" for who, g in (("teacher", example), ("alone", alone), ("taught", taught))
                   if not g.ok), None)
    ok_without = failed is None and correct(alone.text, plan.sibling)
    ok_with = failed is None and correct(taught.text, plan.sibling)
    return Lesson(lesson_id=plan.lesson_id, iteration=this.k, round=this.rnd, target=this.target,
                  teacher=plan.teacher, cell=plan.cell, example_id=plan.example.id, example_text=plan.example.text,
                  example_answer=example.text,
                  example_correct=failed is None and correct(example.text, plan.example),
                  sibling_id=plan.sibling.id, sibling_text=plan.sibling.text, category=plan.sibling.category,
                  reference=plan.sibling.reference, answer_without=alone.text, answer_with=taught.text,
                  correct_without=ok_without, correct_with=ok_with,
                  lift=0.0 if failed else lift(ok_with, ok_without), error=failed)


def best_lessons(lessons: list[Lesson], n: int, min_lift: float) -> list[Lesson]:
    """Per target, up to ``n`` lessons with the largest lift (at least ``min_lift``) whose taught
    answer passed, one per sibling prompt; the largest lift first, then in the order given."""
    order = sorted(range(len(lessons)), key=lambda i: (-lessons[i].lift, i))
    out: list[Lesson] = []
    taken: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for i in order:
        x = lessons[i]
        who = base_name(x.target)
        if x.error or not x.correct_with or x.lift < min_lift or taken.get(who, 0) >= n:
            continue
        if (who, x.sibling_id) in seen:
            continue
        seen.add((who, x.sibling_id))
        taken[who] = taken.get(who, 0) + 1
        out.append(x)
    return out


def lesson_sft(x: Lesson) -> SFTExample:
    """A lesson as an SFT row of its target: the sibling prompt asked alone, the target's own
    answer after the example as the completion (``battle_id``: the lesson's id)."""
    return SFTExample(prompt=x.sibling_text, completion=x.answer_with, prompt_id=x.sibling_id, category=x.category,
                      source_model=x.target, battle_id=x.lesson_id, iteration=x.iteration, target=base_name(x.target))


@dataclass(frozen=True)
class TeacherLift:
    """A teacher's lessons and the target's accuracy without and with its examples."""

    lessons: int
    without: float
    with_example: float

    @property
    def lift(self) -> float:
        return self.with_example - self.without


def teacher_lifts(lessons: list[Lesson]) -> dict[str, TeacherLift]:
    """Per teacher, over its lessons without an error: the mean accuracy without and with its example."""
    acc: dict[str, list[Lesson]] = {}
    for x in lessons:
        if x.error is None:
            acc.setdefault(x.teacher, []).append(x)
    return {t: TeacherLift(len(xs), float(np.mean([x.correct_without for x in xs])),
                           float(np.mean([x.correct_with for x in xs]))) for t, xs in sorted(acc.items())}
