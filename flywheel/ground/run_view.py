"""A run directory, read: what the ``flywheel`` commands that read a run (``elo``, ``arms``,
``report``, ``data``, the end of ``run``) ask of it, through the store (``flywheel.ground.store``,
the one owner of the run's layout).

A command opens one view (``RunView.open``, which checks once that the folder holds a run) and
hands it to every query it makes. What several queries read is read once per view: the config,
``summary.json``, the ratings' history and the judged battles of a phase. The view writes nothing.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from flywheel.config.loading import load_config
from flywheel.config.tree import FlywheelConfig
from flywheel.ground.atomic import read_json
from flywheel.ground.records import Battle, BattleSpec, JudgedBattle, Judgment
from flywheel.ground.store import RunStore, iter_name


class NotARunError(FileNotFoundError):
    """The folder holds no run (no config.yaml)."""


class RunView:
    """One run directory, read-only: opened once per command and shared by its queries."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._judged: dict[str | None, list[JudgedBattle]] = {}

    @classmethod
    def open(cls, path: Path) -> RunView:
        """The run in ``path``; ``NotARunError`` (naming ``path``) where it holds none."""
        store = RunStore(path)
        if not store.config_path.is_file():
            raise NotARunError(f"{path}: not a run directory (no config.yaml)")
        return cls(store)

    @classmethod
    def around(cls, path: Path) -> RunView | None:
        """The run that ``path`` lies in (``path`` or a folder above it with its config.yaml and a
        judgments log), or None."""
        for folder in [path, *path.parents]:
            store = RunStore(folder)
            if store.config_path.is_file() and store.log_dir("judgments").is_dir():
                return cls(store)
        return None

    # -- the run as a whole ----------------------------------------------------------------------
    @property
    def root(self) -> Path:
        """The run directory, as it was named when opened."""
        return self._store.root

    @cached_property
    def config(self) -> FlywheelConfig:
        """The run's own config.yaml (``ConfigError`` if it no longer loads)."""
        return load_config(self._store.config_path)

    @cached_property
    def summary(self) -> dict[str, Any]:
        """summary.json (empty before the first iteration is summed up)."""
        return read_json(self._store.summary_path, {}) or {}

    @cached_property
    def manifest(self) -> dict[str, Any]:
        """manifest.json: when the run was created, each stage's timing."""
        return read_json(self._store.manifest_path, {}) or {}

    def stage(self, k: int, stage: str) -> dict[str, Any] | None:
        """Iteration ``k``'s stage result as stored (None while the stage has not finished)."""
        return self._store.stage_json(k, stage)

    # -- ratings ---------------------------------------------------------------------------------
    def leaderboard_iterations(self) -> list[int]:
        """The iterations with an eval leaderboard, in order."""
        return self._store.leaderboard_iterations()

    def board(self, k: int) -> list[dict[str, Any]]:
        """Iteration ``k``'s eval leaderboard rows (none before it is rated)."""
        return read_json(self._store.ratings_path(f"{iter_name(k)}.json"), [])

    def subset_boards(self, k: int) -> dict[str, list[dict[str, Any]]]:
        """Iteration ``k``'s leaderboards on the eval subsets (diverse, hard, mix)."""
        return read_json(self._store.ratings_path(f"{iter_name(k)}-subsets.json"), {})

    @cached_property
    def history(self) -> dict[str, list[dict[str, Any]]]:
        """Every model version's eval rating per iteration (iteration as text -> rows)."""
        return read_json(self._store.ratings_path("history.json"), {})

    # -- battles and verdicts --------------------------------------------------------------------
    def battles(self, phase: str | None = None) -> list[Battle]:
        """Every battle of the run (of ``phase``, if given), in log order."""
        return self._store.battles(None, phase)

    def judged(self, phase: str | None = None) -> list[JudgedBattle]:
        """Every battle with a valid verdict (of ``phase``, if given), in log order: failed
        battles and invalid verdicts never count (``RunStore.judged``). Read once per view."""
        if phase not in self._judged:
            self._judged[phase] = self._store.judged(None, phase)
        return self._judged[phase]

    def judgments(self, k: int, phase: str) -> dict[str, Judgment]:
        """Iteration ``k``'s judgments of ``phase`` (invalid verdicts too), by battle id."""
        return self._store.judgments(k, phase)

    def verdict_times(self) -> dict[str, float]:
        """When each battle's verdict was written to disk: its judgment shard's modification time
        (Unix seconds), by battle id."""
        return {bid: path.stat().st_mtime for shards in self._store.log_shards("judgments").values()
                for path in shards for bid in pq.read_table(path, columns=["battle_id"]).column("battle_id").to_pylist()}

    def plan(self, k: int) -> list[BattleSpec] | None:
        """Iteration ``k``'s planned train battles, every round's in order; None if none yet."""
        return self._store.plan(k)

    # -- files: the datasets and the logs, as ``flywheel data`` lists and reads them -------------
    def datasets(self) -> list[tuple[int, str, Path]]:
        """(iteration, kind, folder) of every curated dataset (``sft``, ``dpo``, ``rollouts``)."""
        return self._store.datasets()

    def log_shards(self, kind: str) -> dict[int, list[Path]]:
        """The ``battles`` or ``judgments`` shard files, by iteration."""
        return self._store.log_shards(kind)

    def log_files(self, kind: str) -> list[Path]:
        """Every Parquet file of the ``battles`` or ``judgments`` log, in name order."""
        return self._store.log_files(kind)

    @staticmethod
    def log_glob(kind: str, k: int) -> str:
        """The ``battles`` or ``judgments`` shards of iteration ``k`` as a pattern relative to the run."""
        return RunStore.log_glob(kind, k)
