"""The config tree's world section: the embedded task suite and its tiny models, user prompt
pools, the games world, conversations (part of ``flywheel.config.tree.FlywheelConfig``)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from flywheel.config.parts import HanabiConfig, Strict

# The embedded task suite's categories, named here so that the config stands alone;
# flywheel.worlds.tasks.GENERATORS makes the prompts of each (a test keeps the two in step).
CATEGORIES: tuple[str, ...] = ("add", "sub", "mul", "rev", "sort", "count")



class TaskSuiteConfig(Strict):
    categories: list[str] = Field(list(CATEGORIES), min_length=1, description="Task categories.")
    levels: list[int] = Field([1, 2, 3], min_length=1, description="Difficulty levels (1-3).")
    train_per_cell: int = Field(250, ge=1, description="Train-pool prompts per category x level.")
    eval_per_cell: int = Field(20, ge=1, description="Held-out eval prompts per category x level (reported only; "
                               "nothing that steers a run reads them).")
    val_per_cell: int = Field(10, ge=1, description="Validation prompts per category x level, taken out of the train "
                              "pool: what steers a run (allocation signals, merge weights) reads them.")
    seed: int = Field(1234, description="Seed of the suite; fixed so every run sees one split.")

    @model_validator(mode="after")
    def _known(self) -> TaskSuiteConfig:
        unknown = [c for c in self.categories if c not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; known: {list(CATEGORIES)}")
        if any(lv not in (1, 2, 3) for lv in self.levels):
            raise ValueError("levels must be among 1, 2, 3")
        return self


class ModelSpec(Strict):
    """A tiny character-level GPT that ``flywheel bootstrap`` builds and pre-trains."""

    positions: ClassVar[int] = 64  # characters it reads: the prompt, the answer and <eos> together

    name: str = Field(..., description="Model name; saved under world.models_dir/<name>.")
    categories: list[str] = Field(list(CATEGORIES), description="Categories in its pre-training.")
    steps: int = Field(800, ge=0, description="Pre-training steps.")
    n_layer: int = Field(2, ge=1, description="Transformer blocks.")
    n_embd: int = Field(64, ge=8, description="Hidden size (a multiple of n_head).")
    n_head: int = Field(4, ge=1, description="Attention heads.")
    learning_rate: float = Field(3e-3, gt=0, description="Peak AdamW learning rate.")


def _default_models() -> list[ModelSpec]:
    return [
        ModelSpec(name="student", steps=200),
        ModelSpec(name="calc", categories=["add", "sub", "mul"], steps=3000),
        ModelSpec(name="scribe", categories=["rev", "sort", "count"], steps=900),
        ModelSpec(name="generalist", steps=1500),
    ]


class PromptPoolConfig(Strict):
    """A user prompt pool (see flywheel/worlds/prompts.py), added to the train pool."""

    path: Path = Field(..., description="JSONL, JSON, CSV or Parquet file.")
    layout: Literal["auto", "alpaca", "sharegpt", "arena", "arena-hard", "plain"] = Field(
        "auto", description="Row layout; auto tells them apart by their fields.")
    category: str = Field("user", description="Category of rows that name none (their selection arm).")
    skip_bad: bool = Field(False, description="Skip unreadable rows (and report them) instead of failing.")


class GamesConfig(Strict):
    """The games world (``world.kind: games``; see flywheel/games/ and worlds/game_pools.py): start positions and rules of play."""

    games: list[Literal["tictactoe", "connect4", "hanabi"]] = Field(["tictactoe"], min_length=1, description="Games "
        "played (the world's categories). hanabi is played alone: its battles are team battles in duplicate.")
    hanabi: HanabiConfig = Field(default_factory=HanabiConfig)
    openings: list[int] = Field([1, 2, 3], min_length=1, description="Random opening moves before a battle starts "
                                "(the world's levels): more gives more distinct start positions.")
    train_per_cell: int = Field(200, ge=1, description="Train start positions per game x opening.")
    eval_per_cell: int = Field(30, ge=1, description="Held-out eval start positions per game x opening (reported only).")
    val_per_cell: int = Field(15, ge=1, description="Validation start positions per game x opening, taken out of "
                              "train: what steers a run reads them.")
    max_illegal: int = Field(2, ge=0, description="Re-asks after an answer that names no legal move; then the "
                             "move is a forfeit (a recorded loss).")
    prompt: Literal["terse", "verbose"] = Field("terse", description="How a position is shown: terse "
                                                "(ttt x-o------ o=, the project's character-level models) or "
                                                "verbose (a described board, for instruct LLMs).")
    symmetries: bool = Field(False, description="Also learn each SFT example and DPO pair in every rotation and "
                             "reflection of its board (tic-tac-toe's 8, Connect Four's mirror): the rules are the "
                             "same there. Images that are eval or validation start positions are dropped.")
    missed_moves: bool = Field(False, description="Where a target lost, also learn its last move as it should have "
                               "been: the win it missed, else the cell the winner then won on (a block). SFT and "
                               "DPO rows whose source is 'rules'.")
    tactics: bool = Field(False, description="Also learn every move a target made in any game it played (won, "
                          "drawn or lost) where it left a win untaken or the other side's only threat unblocked, "
                          "as the rules correct it: SFT and DPO rows whose source is 'rules'.")
    pretrain_examples: int = Field(4000, ge=1, description="Tiny game models: (position, random legal move) "
                                   "pre-training examples (they learn the format, not the game).")
    seed: int = Field(1234, description="Seed of the start positions.")

    @field_validator("openings")
    @classmethod
    def _openings(cls, v: list[int]) -> list[int]:
        if any(n < 0 or n > 8 for n in v):
            raise ValueError("openings must be between 0 and 8 moves")
        return v


class ConversationConfig(Strict):
    """Multi-turn battles (docs/worlds.md#conversations): how many user turns, and who writes them."""

    turns: int = Field(1, ge=1, le=8, description="User turns per conversation (1: single-turn battles, the "
                       "default). Turns a prompt gives up front (MT-Bench, ShareGPT pools) come first; the asker "
                       "writes the rest, from the conversation so far, and both sides get the same turn.")
    asker: str | list[str] | None = Field(None, description="The player (one of askers) that writes the follow-up "
                                          "turns, or several: then each train battle's asker is a bandit arm "
                                          "(docs/selection.md#askers) and eval and validation conversations use the "
                                          "first named; unset: a conversation has only the turns its prompt gives.")

    @property
    def askers(self) -> list[str]:
        """The askers named (one, several, or none)."""
        return [] if self.asker is None else [self.asker] if isinstance(self.asker, str) else list(self.asker)


class WorldConfig(Strict):
    kind: Literal["tasks", "games"] = Field("tasks", description="tasks: the verifiable task suite (and prompt "
                                            "pools); games: symmetric games played move by move (world.games).")
    games: GamesConfig = Field(default_factory=GamesConfig)
    models_dir: Path = Field(Path("data/models"), description="Where bootstrapped models live.")
    tasks: TaskSuiteConfig = Field(default_factory=TaskSuiteConfig)
    prompt_pools: list[PromptPoolConfig] = Field([], description="User prompt pools added to the train pool "
                                                 "(deduplicated, and never an eval prompt).")
    conversation: ConversationConfig = Field(default_factory=ConversationConfig)
    models: list[ModelSpec] = Field(default_factory=_default_models, description="Tiny models.")
    batch_size: int = Field(64, ge=1, description="Pre-training batch size.")
    seed: int = Field(0, description="Pre-training seed (weights and data order).")
