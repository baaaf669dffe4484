"""The ``select.teaching`` section of the one config tree (flywheel/config/tree.py): opponents
act as teachers. A teacher's worked answer to one prompt of a cell is shown to the target as a
one-shot example before a sibling prompt of the same cell; the teacher is rewarded by the
target's lift (flywheel/arena/teaching.py, flywheel/stages/teach.py). Import it from
``flywheel.config.tree``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flywheel.config.parts import Strict


class TeachingConfig(Strict):
    """Teaching: who teaches, how many lessons, how the teacher bandits choose, what is learnt."""

    enabled: bool = Field(False, description="Give lessons after each iteration's battles: per target and cell, a "
                          "bandit over the teachers picks who writes the one-shot example; the verifier scores the "
                          "target on a sibling prompt with and without it, and the teacher's reward is the lift.")
    teachers: list[str] = Field(default_factory=list, description="The teachers: names of configured opponents (empty: "
                                "every opponent).")
    rounds: int = Field(2, ge=1, description="Teaching rounds per iteration; the teacher bandits learn after each.")
    lessons: int = Field(48, ge=1, description="Lessons per target per round, spread evenly over the cells.")
    policy: Literal["uniform", "ucb", "thompson", "gaussian", "exp3"] = Field(
        "thompson", description="Bandit policy of the teacher bandits (one per target and cell; arms = teachers). "
        "The reward of a lesson is (lift + 1) / 2: 1 where the example turned a wrong answer right, 0.5 where it "
        "changed nothing, 0 where it turned a right answer wrong.")
    sft: int = Field(24, ge=0, description="Per target and iteration, the lessons with the largest lift (at least "
                     "min_lift) become SFT data: the sibling prompt asked alone, answered with the target's own "
                     "verified answer after the example (0: teaching trains nothing).")
    min_lift: float = Field(1.0, gt=0, le=1, description="A lesson becomes SFT data only with at least this lift.")
