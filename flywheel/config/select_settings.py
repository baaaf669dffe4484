"""The ``select`` section of the one config tree (flywheel/config/tree.py): how the flywheel
chooses its training battles (flywheel/arena/selection.py) and what each battle earns the bandits
(flywheel/arena/bandit_rewards.py). Import it from ``flywheel.config.tree``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flywheel.config.evolve_settings import EvolveConfig
from flywheel.config.parts import Share, Strict
from flywheel.config.teach_settings import TeachingConfig


class SelectConfig(Strict):
    """How the flywheel chooses its training battles (see flywheel/arena/selection.py)."""

    policy: Literal["uniform", "ucb", "thompson", "gaussian", "exp3"] = Field(
        "thompson", description="Bandit policy for prompt cells and per-cell opponents.")
    opponents: Literal["bandit", "pfsp", "uniform"] = Field(
        "bandit", description="Opponent choice: a per-cell bandit, PFSP weights, or uniform.")
    reward: Literal["yield", "unreached-yield", "progress", "uncertainty", "learnability",
                    "validation-progress"] = Field(
        "yield", description="Bandit reward of a battle: yield (1 if it made a new training example: the target "
        "lost); unreached-yield (yield times (1-p)^g, p its own success on the cell as learnability reads it, g "
        "train.rl.generations: a rough proxy for the chance that none of g of its own sampled answers passes, so "
        "that battles go where its own answers cannot reach); progress (|change of the target's battle score on "
        "the cell since the last iteration|); uncertainty "
        "(4p(1-p) of its battle score p on the cell: even matches); learnability (4p(1-p) of its own success p on "
        "the cell, its answers checked by the verifier, whoever it played; games: won or drew); "
        "validation-progress (|moving average of the change of its validation accuracy on the cell from each "
        "training step|, progress_weight; learnability before its first training step and on cells without "
        "validation prompts; prompt worlds). See docs/selection.md.")
    progress_weight: float = Field(0.5, gt=0, le=1, description="validation-progress: weight of the newest training "
                                   "step's validation gain in a cell's moving average (1 = the newest only; an older "
                                   "step's gain fades by 1 - this per step).")
    battles_per_iteration: int = Field(4000, ge=1, description="Train battles per target.")
    rounds: int = Field(4, ge=1, description="Selection rounds per iteration (the bandit learns between them).")
    discount: float = Field(0.8, gt=0, le=1, description="Per-round discount of the prompt bandit's past rewards "
                            "(1 = none): the target changes, so old rewards go stale.")
    opponent_discount: float = Field(1.0, gt=0, le=1, description="The same for the per-cell opponent bandits; "
                                     "opponents do not change, so by default nothing is forgotten.")
    window: int = Field(0, ge=0, description="Keep only the last W rounds of rewards (0 = all).")
    prompt_floor: Share | Literal["auto"] = Field(0.5, description="Share of each round's battles spread evenly "
                                                 "over all prompt cells before the bandit picks the rest (0 = all "
                                                 "bandit, 1 = all even); auto: 1 - the Gini coefficient of the prompt "
                                                 "bandit's value estimates over the cells, each round (even where the "
                                                 "cells look alike, bandit where a few stand out).")
    gap_spread: float = Field(0.0, ge=0, description="Spreads the prompt_floor's share of each round's battles "
                              "by category instead of evenly: a cell gets battles in proportion to 1 + gap_spread x "
                              "g, g the best opponent's validation accuracy in its category minus that of the "
                              "target's version in use (at least 0; the gaps train.gap_mix weighs rows by); 0: "
                              "evenly. Prompt worlds.")
    exploration: float = Field(1.0, gt=0, description="Exploration strength (UCB's c, EXP3's gamma/0.1).")
    pfsp_mode: Literal["hard", "variance"] = Field("hard", description="PFSP f(x): (1-x)^p or x(1-x).")
    pfsp_power: float = Field(2.0, gt=0, description="PFSP exponent p for the 'hard' mode.")
    self_play: bool = Field(False, description="Add an opponent arm 'self': the target plays one of its earlier "
                            "versions (uniformly; in the first iteration, itself).")
    evolve: EvolveConfig = Field(default_factory=EvolveConfig, description="Evolving prompts (docs/selection.md).")
    teaching: TeachingConfig = Field(default_factory=TeachingConfig, description="Opponents teach the targets "
                                     "with one-shot examples (docs/selection.md).")
