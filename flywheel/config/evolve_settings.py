"""The ``select.evolve`` section of the one config tree (flywheel/config/tree.py): after each
iteration, prompts of the arms that yielded most are rewritten into new, harder or broader ones
(the Evol-Instruct step; flywheel/worlds/evolution.py, flywheel/stages/evolve.py). Import it from
``flywheel.config.tree``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flywheel.config.parts import Strict

# The procedural evolver of the embedded world; any other name is a configured player's.
PROCEDURAL = "procedural"
EvolveMethod = Literal["depth", "breadth"]


class EvolveConfig(Strict):
    """Evolving prompts: which arms give parents, who rewrites them and how, and what is refused."""

    enabled: bool = Field(False, description="Evolve prompts after each iteration's battles; the new prompts join "
                          "the train pool as new arms (evolved/<category>/L<level>) from the next iteration.")
    evolver: str = Field(PROCEDURAL, description="Who rewrites: procedural (the embedded world's tasks: depth "
                         "lengthens the operands and raises the level, breadth composes 'rev' with the task; the "
                         "reference is computed from the new text) or the name of a configured player (a target or "
                         "an opponent), asked with the evolution instructions; its prompts have no reference, so "
                         "the judge must decide prompts without one (judge.kind llm or hybrid).")
    arms: int = Field(2, ge=1, description="How many arms give parents: those whose battles yielded most new training "
                      "examples per battle this iteration (the target lost; mean over targets).")
    per_iteration: int = Field(24, ge=1, description="Parents rewritten per iteration, each once, by the methods in "
                               "turn (never again by a method it was rewritten by before). Prompts that yielded come "
                               "first.")
    methods: list[EvolveMethod] = Field(default_factory=lambda: ["depth", "breadth"], min_length=1,
                                        description="depth (harder: in-depth evolving) and breadth (another task "
                                        "of the same kind: in-breadth evolving), taken in turn.")
    max_level: int | None = Field(None, ge=1, description="Procedural depth never raises a prompt above this level "
                                  "(unset: the task suite's top level, world.tasks.levels, beyond which no player "
                                  "here was pre-trained); at it, the parent's next method is tried.")
    max_chars: int = Field(400, ge=8, description="An evolved prompt longer than this is refused.")
    near_duplicate: float = Field(0.8, gt=0, le=1, description="An evolved prompt whose character 5-gram Jaccard "
                                  "similarity to an eval or validation prompt reaches this is refused (beside exact "
                                  "text and twin matches).")
    depth_template: str | None = Field(None, description="Player evolver: the in-depth instructions, with {prompt} "
                                       "where the parent goes (default: the built-in ones).")
    breadth_template: str | None = Field(None, description="Player evolver: the in-breadth instructions, with "
                                         "{prompt} (default: the built-in ones).")
