"""The run directory: every file written atomically, logs append-only, resumable by construction.

The store is the one owner of the run directory's layout: no other module spells a path in it.
Layout (see data/README.md)::

    <run>/config.yaml  manifest.json  summary.json  usage.jsonl  spend.jsonl  .lock
    <run>/tracking.json                          the experiment tracker's run id (tracking.kind mlflow)
    <run>/server-logs/<time>.log                 the output of the model server a run started (serve.command)
    <run>/battles/<iter>-<phase>-<n>.parquet     append-only battle log shards
    <run>/judgments/<iter>-<phase>-<n>.parquet   every judgment, with the judge's raw output
    <run>/iter-000k/plan-rN.parquet  sft/  dpo/  the selection (per round) and datasets
    <run>/iter-000k/stages/<stage>.json          each finished stage's result
    <run>/bandits/iter-000k-rN-<target>.json     bandit state after each selection round
    <run>/evolved/iter-000k.jsonl                prompts evolved after iteration k, with their lineage
    <run>/teaching/iter-000k-rN.jsonl            lessons of teaching round N (select.teaching), written whole
    <run>/teaching/bandits/iter-000k-rN-<target>.json  teacher bandits after each teaching round
    <run>/ratings/iter-000k.json|md  history.json  eval-subsets.json  iter-000k-subsets.json|-arena.json
    <run>/models/<name>@<k>/  models/.premerge/  trained versions (and, federated, before merging)
    <run>/cache/generations.sqlite  judgments.sqlite  generation and judge-output caches (SQLite)

A shard is written to a temporary name and renamed, so it is either whole or absent. Stages
skip records whose ids are already on disk, so a killed run resumes with nothing lost and
nothing counted twice. The store's neighbours: ``atomic`` (atomic writes, damaged files),
``checkpoints`` (model checkpoints), ``cache`` (the SQLite caches) and ``run_view`` (a run read,
as the commands that read one ask for it).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from flywheel.ground.atomic import append_bytes, atomic_write_json, atomic_write_text, read_json
from flywheel.ground.cache import KeyValueCache
from flywheel.ground.ledger import SpendLedger
from flywheel.ground.plan_files import PlanFiles, arrow_schema, iter_name  # noqa: F401 - iter_name: the store's names
from flywheel.ground.records import Battle, EvolvedPrompt, JudgedBattle, Judgment, Lesson, _Row
from flywheel.ground.row_files import read_jsonl

R = TypeVar("R", bound=_Row)


class RunLockedError(RuntimeError):
    """Another process holds this run directory."""


LOCKED: list[Path] = []  # run directories this process has taken the lock of, in order (`flywheel run`'s)


# The datasets a run writes in each iteration's folder: curated SFT rows and DPO pairs, and GRPO's rollouts.
DATASET_KINDS = ("sft", "dpo", "rollouts")


class RunStore(PlanFiles):
    """Reads and writes one run directory."""

    def __init__(self, root: Path, cache_dir: Path | None = None) -> None:
        self.root = Path(root)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else self.root / "cache"
        self._lock_fd: int | None = None
        self.generations = KeyValueCache(self.cache_dir / "generations.sqlite")
        self.judge_outputs = KeyValueCache(self.cache_dir / "judgments.sqlite")

    # -- locking ---------------------------------------------------------------------------
    def lock(self, wait_s: float = 0.0) -> None:
        """Take the run's lock; if another process holds it, wait up to ``wait_s`` seconds, then
        fail with a message that says so (the directory is left untouched)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    waited = f" (waited {wait_s:g} s)" if wait_s else ""
                    raise RunLockedError(f"{self.root} is in use by another flywheel process{waited}; "
                                         "nothing was changed") from None
                time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
        self._lock_fd = fd
        if self.root not in LOCKED:
            LOCKED.append(self.root)

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- paths -----------------------------------------------------------------------------
    def iter_dir(self, k: int) -> Path:
        return self.root / iter_name(k)

    def stage_path(self, k: int, stage: str) -> Path:
        """Where iteration ``k``'s finished stage keeps its result."""
        return self.iter_dir(k) / "stages" / f"{stage}.json"

    def train_state_dir(self, k: int, target: str) -> Path:
        """Where iteration ``k``'s training of ``target`` keeps its Trainer checkpoints while it
        runs (``train.checkpoint_steps``), so that a killed run resumes it; removed once done."""
        return self.iter_dir(k) / "train-state" / target

    def spread_path(self, k: int, target: str) -> Path:
        """Where iteration ``k``'s select stage keeps ``target``'s per-category weights of the
        evenly spread battles (``select.gap_spread``), so that every round, resumed or not, reads the same."""
        return self.iter_dir(k) / f"spread-{target}.json"

    def rollout_log(self, k: int, target: str) -> Path:
        """Where iteration ``k``'s GRPO phase of ``target`` appends its rollouts until the train
        stage publishes them as the dataset ``iter-000k/rollouts``."""
        return self.iter_dir(k) / "rollouts-log" / f"{target}.jsonl"

    def reward_model_dir(self, target: str, k: int) -> Path:
        """Where iteration ``k``'s reward model of ``target`` (``train.method: reward``) is saved."""
        return self.root / "reward-models" / f"{target}@{k}"

    def latest_reward_model(self, target: str, before: int) -> Path | None:
        """The newest reward model of ``target`` made before iteration ``before``, or None."""
        made = [(int(d.name.rsplit("@", 1)[1]), d) for d in (self.root / "reward-models").glob(f"{target}@*")
                if d.is_dir() and d.name.rsplit("@", 1)[1].isdigit() and (d / "config.json").is_file()]
        made = [(k, d) for k, d in made if k < before]
        return max(made)[1] if made else None

    def model_dir(self, versioned_name: str) -> Path:
        return self.root / "models" / versioned_name

    def premerge_dir(self, versioned_name: str) -> Path:
        """Where a federated run keeps a trained version before merging (read only from there)."""
        return self.root / "models" / ".premerge" / versioned_name

    def dataset_dir(self, k: int, kind: str) -> Path:
        """Iteration ``k``'s curated ``sft`` or ``dpo`` dataset."""
        return self.iter_dir(k) / kind

    def ratings_path(self, name: str) -> Path:
        """A file under ratings/: ``iter-000k.json``, ``history.json``, ``eval-subsets.json``, ..."""
        return self.root / "ratings" / name

    def leaderboard_iterations(self) -> list[int]:
        """The iterations with an eval leaderboard (``ratings/iter-000k.json``), in order."""
        return sorted(int(p.stem.split("-")[1]) for p in self.ratings_path("").glob("iter-[0-9][0-9][0-9][0-9].json"))

    def datasets(self) -> list[tuple[int, str, Path]]:
        """(iteration, kind, directory) of every curated dataset directory (``iter-000k/<kind>``)."""
        return [(int(d.parent.name.split("-")[1]), d.name, d) for d in sorted(self.root.glob("iter-*/*"))
                if d.name in DATASET_KINDS and d.is_dir()]

    def log_dir(self, kind: str) -> Path:
        """The folder of the ``battles`` or ``judgments`` log."""
        return self.root / kind

    def log_files(self, kind: str) -> list[Path]:
        """Every Parquet file of the ``battles`` or ``judgments`` log, in name order."""
        return sorted(self.log_dir(kind).glob("*.parquet"))

    @staticmethod
    def log_glob(kind: str, k: int) -> str:
        """The ``battles`` or ``judgments`` shards of iteration ``k`` as a pattern relative to the run."""
        return f"{kind}/{iter_name(k)}-*.parquet"

    def log_shards(self, kind: str) -> dict[int, list[Path]]:
        """The ``battles`` or ``judgments`` shard files, by iteration."""
        out: dict[int, list[Path]] = {}
        for p in sorted(self.log_dir(kind).glob("iter-*.parquet")):
            out.setdefault(int(p.name.split("-")[1]), []).append(p)
        return out

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @staticmethod
    def is_run_dir(path: Path) -> bool:
        """Whether ``path`` holds a run (its config.yaml)."""
        return RunStore(path).config_path.is_file()

    @property
    def summary_path(self) -> Path:
        return self.root / "summary.json"

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @staticmethod
    def pending_server_log(root: Path, name: str) -> Path:
        """Where a run's model server logs before the run directory exists (beside it, under run.root)."""
        return Path(root) / f".{name}.server.log"

    def adopt_server_log(self, pending: Path) -> Path:
        """Move a server's log into this run (the server goes on writing to it: same file)."""
        folder = self.root / "server-logs"
        folder.mkdir(parents=True, exist_ok=True)
        dest = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        os.replace(pending, dest)
        return dest

    @property
    def tracking_path(self) -> Path:
        """The experiment tracker's record of this run (``tracking.kind``): its store, experiment and run id."""
        return self.root / "tracking.json"

    # -- stage results ---------------------------------------------------------------------
    def stage_json(self, k: int, stage: str) -> dict[str, Any] | None:
        """Iteration ``k``'s stage result as stored (None while the stage has not finished)."""
        return read_json(self.stage_path(k, stage))

    def save_stage_json(self, k: int, stage: str, result: dict[str, Any], seconds: float) -> None:
        """Store a finished stage's result and its timing (in the manifest)."""
        atomic_write_json(self.stage_path(k, stage), result)
        self.save_timing(k, stage, seconds)

    def save_timing(self, k: int, name: str, seconds: float) -> None:
        """Record ``name``'s wall time in iteration ``k`` in the manifest's ``timings``."""
        manifest = read_json(self.manifest_path, {})
        manifest.setdefault("timings", {})[f"{iter_name(k)}/{name}"] = round(seconds, 3)
        atomic_write_json(self.manifest_path, manifest)

    def record_machine(self, machine: dict[str, Any]) -> None:
        """Add the machine a resumed run continues on to the manifest's ``machines``."""
        manifest = read_json(self.manifest_path, {})
        manifest.setdefault("machines", []).append(machine)
        atomic_write_json(self.manifest_path, manifest)

    # -- bandit state ------------------------------------------------------------------------
    def bandit_path(self, target: str, k: int, rnd: int) -> Path:
        """The target's bandit state after selection round ``rnd`` of iteration ``k``."""
        return self.root / "bandits" / f"{iter_name(k)}-r{rnd}-{target}.json"

    def latest_bandit_state(self, target: str, before: tuple[int, int]) -> dict[str, Any] | None:
        """The target's bandit state saved last before (iteration, round) ``before``, if any."""
        return self._latest_state(self.root / "bandits", target, before)

    def _latest_state(self, folder: Path, target: str, before: tuple[int, int]) -> dict[str, Any] | None:
        found = []
        for path in folder.glob("iter-*-r*-*.json"):
            m = re.fullmatch(r"iter-(\d+)-r(\d+)-(.+)\.json", path.name)
            if m and m[3] == target and (int(m[1]), int(m[2])) < before:  # names may contain dashes
                found.append(((int(m[1]), int(m[2])), path))
        return read_json(max(found)[1]) if found else None

    # -- evolved prompts (select.evolve): evolved/iter-000k.jsonl, each written whole ------------
    def evolved_path(self, k: int) -> Path:
        return self.root / "evolved" / f"{iter_name(k)}.jsonl"

    def write_evolved(self, k: int, prompts: list[EvolvedPrompt]) -> None:
        atomic_write_text(self.evolved_path(k), "".join(json.dumps(p.to_row()) + "\n" for p in prompts))

    def evolved_iterations(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in (self.root / "evolved").glob("iter-[0-9][0-9][0-9][0-9].jsonl"))

    def evolved(self, k: int | None = None) -> list[EvolvedPrompt]:
        """The prompts evolved after iteration ``k``, or (None) after every iteration, in order."""
        paths = [self.evolved_path(i) for i in ([k] if k is not None else self.evolved_iterations())]
        return [EvolvedPrompt.from_row(r) for p in paths for r in read_jsonl(p)]

    # -- teaching (select.teaching): teaching/iter-000k-rN.jsonl, each written whole -------------
    def lessons_path(self, k: int, rnd: int) -> Path:
        return self.root / "teaching" / f"{iter_name(k)}-r{rnd}.jsonl"

    def write_lessons(self, k: int, rnd: int, lessons: list[Lesson]) -> None:
        atomic_write_text(self.lessons_path(k, rnd), "".join(json.dumps(x.to_row()) + "\n" for x in lessons))

    def lessons(self, k: int | None = None, rnd: int | None = None) -> list[Lesson]:
        """The lessons of round ``rnd`` of iteration ``k`` (None: every round, every iteration), in order."""
        pattern = f"{iter_name(k) if k is not None else 'iter-*'}-r{rnd if rnd is not None else '*'}.jsonl"
        key = lambda p: tuple(int(x) for x in re.findall(r"\d+", p.name))  # noqa: E731
        return [Lesson.from_row(r) for p in sorted((self.root / "teaching").glob(pattern), key=key)
                for r in read_jsonl(p)]

    def teacher_bandit_path(self, target: str, k: int, rnd: int) -> Path:
        """The target's teacher bandits after teaching round ``rnd`` of iteration ``k``."""
        return self.root / "teaching" / "bandits" / f"{iter_name(k)}-r{rnd}-{target}.json"

    def latest_teacher_state(self, target: str, before: tuple[int, int]) -> dict[str, Any] | None:
        """The target's teacher bandits saved last before (iteration, round) ``before``, if any."""
        return self._latest_state(self.root / "teaching" / "bandits", target, before)

    # -- append-only shards ----------------------------------------------------------------
    def _append(self, kind: str, prefix: str, rows: list[dict[str, Any]], cls: type, name: str | None = None) -> Path | None:
        """Write one shard: ``name`` (a mapped task's own shard, race-free) or the next number."""
        if not rows:
            return None
        folder = self.log_dir(kind)
        folder.mkdir(parents=True, exist_ok=True)
        if name is None:
            n = len(list(folder.glob(f"{prefix}-*.parquet")))
            name = f"{prefix}-{n:05d}"
        path = folder / f"{name}.parquet"
        tmp = folder / f".{path.name}.tmp"
        pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(cls)), tmp)
        os.replace(tmp, path)
        return path

    def _read(self, kind: str, cls: type[R], prefix: str = "") -> list[R]:
        folder = self.log_dir(kind)
        if not folder.exists():
            return []
        out: list[R] = []
        for path in sorted(folder.glob(f"{prefix}*.parquet")):
            out += [cls.from_row(r) for r in pq.read_table(path).to_pylist()]
        return out

    @staticmethod
    def _prefix(iteration: int | None, phase: str | None) -> str:
        if iteration is None:
            return ""
        return iter_name(iteration) + (f"-{phase}" if phase else "")

    def append_battles(self, battles: list[Battle], name: str | None = None) -> None:
        for (k, phase), group in _group(battles, lambda b: (b.iteration, b.phase)).items():
            self._append("battles", f"{iter_name(k)}-{phase}", [b.to_row() for b in group], Battle, name)

    def shard_files(self, kind: str, k: int, phase: str) -> list[str]:
        """The ``battles`` or ``judgments`` shards of (iteration, phase), relative to the run."""
        return sorted(str(p.relative_to(self.root)) for p in self.log_dir(kind).glob(f"{iter_name(k)}-{phase}-*.parquet"))

    def quarantine_attempts(self, prefix: str) -> int:
        """How many ``quarantine/<prefix>-*`` folders there are (earlier quarantines of a round)."""
        return len(list((self.root / "quarantine").glob(f"{prefix}-*")))

    def quarantine_judgments(self, names: list[str], why: str) -> Path:
        """Move these judgment shards out of the log (to ``quarantine/<why>/``): their verdicts
        count nowhere, and the battles are judged again on resume."""
        folder = self.root / "quarantine" / why
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            src = self.log_dir("judgments") / f"{name}.parquet"
            if src.exists():
                os.replace(src, folder / src.name)
        return folder

    def shard_exists(self, kind: str, name: str) -> bool:
        return (self.log_dir(kind) / f"{name}.parquet").exists()

    def read_shard(self, kind: str, name: str, cls: type[R]) -> list[R]:
        path = self.log_dir(kind) / f"{name}.parquet"
        return [cls.from_row(r) for r in pq.read_table(path).to_pylist()] if path.exists() else []

    def battles(self, iteration: int | None = None, phase: str | None = None) -> list[Battle]:
        rows = self._read("battles", Battle, self._prefix(iteration, phase))
        return [b for b in rows if phase is None or b.phase == phase]

    def append_judgments(self, judgments: list[Judgment], iteration: int, phase: str, name: str | None = None) -> None:
        self._append("judgments", f"{iter_name(iteration)}-{phase}", [j.to_row() for j in judgments], Judgment, name)

    def judgments(self, iteration: int | None = None, phase: str | None = None) -> dict[str, Judgment]:
        return {j.battle_id: j for j in self._read("judgments", Judgment, self._prefix(iteration, phase))}

    def judged(self, iteration: int | None = None, phase: str | None = None) -> list[JudgedBattle]:
        """Battles joined with their valid judgments, in log order: failed battles and invalid
        verdicts never count."""
        js = self.judgments(iteration, phase)
        return [JudgedBattle(b, js[b.battle_id]) for b in self.battles(iteration, phase)
                if b.ok and b.battle_id in js and js[b.battle_id].valid]

    # -- small append-only logs ------------------------------------------------------------
    def append_usage(self, row: dict[str, Any]) -> None:
        """One row of ``usage.jsonl``: a player's (or the judge's) generations, calls and cost."""
        self.append_jsonl("usage.jsonl", row)

    def usage(self) -> list[dict[str, Any]]:
        return self.read_jsonl("usage.jsonl")

    @property
    def spend_path(self) -> Path:
        return self.root / "spend.jsonl"

    def spend_ledger(self) -> SpendLedger:
        """The run's spending ledger, one row per paid call of any process (what ``budget.max_usd``
        counts; flywheel/ground/ledger.py). ``usage.jsonl`` reports the same spending per batch, after
        the batch; the ledger is the source of truth. A run from before the ledger starts it with
        what its ``usage.jsonl`` says was spent."""
        ledger = SpendLedger(self.spend_path)
        if not ledger.has_rows():
            ledger.carry(sum(r.get("cost_usd", 0.0) for r in self.usage()))
        return ledger

    def append_jsonl(self, name: str, row: dict[str, Any]) -> None:
        append_bytes(self.root / name, json.dumps(row) + "\n")

    def read_jsonl(self, name: str) -> list[dict[str, Any]]:
        return read_jsonl(self.root / name)


def _group(items, key):
    out: dict = {}
    for it in items:
        out.setdefault(key(it), []).append(it)
    return out
