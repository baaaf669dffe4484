"""The arena's world: the prompt pools and the roster of players (with target versions)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.config import FlywheelConfig, PlayerConfig, TaskSuiteConfig
from flywheel.players import Player, SamplingParams, create_player
from flywheel.records import Prompt
from flywheel.store import RunStore
from flywheel.tasks import build_suite


@functools.lru_cache(maxsize=4)
def _suite(seed: int, train_per_cell: int, eval_per_cell: int, cats: tuple, levels: tuple):
    return build_suite(seed, train_per_cell, eval_per_cell, cats, levels)


def prompt_pools(tasks: TaskSuiteConfig) -> tuple[list[Prompt], list[Prompt]]:
    """(train pool, eval split) of the embedded task suite."""
    return _suite(tasks.seed, tasks.train_per_cell, tasks.eval_per_cell, tuple(tasks.categories), tuple(tasks.levels))


def versioned(name: str, k: int) -> str:
    return f"{name}@{k}"


def split_version(player: str) -> tuple[str, int | None]:
    base, _, k = player.partition("@")
    return base, (int(k) if k else None)


# Loaded players, shared by every stage of this process: (kind, path) -> Player.
_LOADED: dict[tuple[str, str], Player] = {}


@dataclass
class Roster:
    """Maps arena names (``calc``, ``student@2``) to player configs, paths and loaded players."""

    cfg: FlywheelConfig
    store: RunStore
    _by_name: dict[str, PlayerConfig] = field(init=False)

    def __post_init__(self) -> None:
        self._by_name = {p.name: p for p in self.cfg.targets + self.cfg.opponents}

    @property
    def targets(self) -> list[str]:
        return [p.name for p in self.cfg.targets]

    @property
    def opponents(self) -> list[str]:
        return [p.name for p in self.cfg.opponents]

    def config(self, player: str) -> PlayerConfig:
        return self._by_name[split_version(player)[0]]

    def path(self, player: str) -> str:
        base, k = split_version(player)
        if k:  # a trained version lives in the run directory
            return str(self.store.model_dir(player))
        pc = self._by_name[base]
        return pc.path or str(Path(self.cfg.world.models_dir) / base)

    def params(self, player: str) -> SamplingParams:
        pc = self.config(player)
        return SamplingParams(pc.max_new_tokens, pc.temperature, self.cfg.run.seed)

    def player(self, player: str) -> Player:
        pc = self.config(player)
        key = (pc.kind, self.path(player))
        if key not in _LOADED:
            _LOADED[key] = create_player(pc.kind, player, path=key[1], batch_size=pc.batch_size)
        return _LOADED[key]


def forget_players() -> None:
    """Drop every loaded player (tests, and after a version is replaced on disk)."""
    for p in _LOADED.values():
        p.close()
    _LOADED.clear()
