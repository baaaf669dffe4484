"""The run context every stage gets (config, run directory, roster, prompt splits, judge), how a
run is opened or resumed, and the bookkeeping that makes a finished stage run only once."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, TypeVar

from flywheel.arena.selection import arm_of, evolved_arm
from flywheel.config.loading import dump_config, load_config
from flywheel.config.tree import FlywheelConfig
from flywheel.ground.atomic import atomic_write_json, atomic_write_text
from flywheel.ground.records import EvolvedPrompt, PlayerVersion, Prompt, stable_id, versioned
from flywheel.ground.store import RunStore
from flywheel.learning.allocation import Allocation
from flywheel.run.results import EvalResult, PromoteResult, VersionEval
from flywheel.worlds.world import Roster, world_pools
from judges.build import build_judge, build_verifier
from judges.pairwise import PairwiseJudge


class JsonRecord(Protocol):
    """A stage result: a frozen record with a JSON round trip (run/results.py)."""

    def to_json(self) -> dict[str, Any]: ...

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Any: ...


R = TypeVar("R", bound=JsonRecord)


def cascade_guard_stage(rnd: int) -> str:
    """The stage file where the cascade's guard records the tiers it turned off in round ``rnd``."""
    return f"judge-cascade-r{rnd}"


# The contexts of run directories open in this process, by resolved path: the flow's own one
# (registered by open_run), and those that workers build for mapped shards.
_CONTEXTS: dict[str, Context] = {}


def latest_gpu_shares(store: RunStore, last: int) -> dict[str, float] | None:
    """The GPU-memory shares of the latest allocation on disk (iteration ``last`` or before), which
    the allocate stage handed to the roster when it ran: a resumed run and a shard's worker
    start from them."""
    for k in range(last, -1, -1):
        data = store.stage_json(k, "allocate")
        if data is not None:
            return Allocation.from_json(data).gpu_memory
    return None


@dataclass
class Context:
    """What every stage needs: the config, the run directory, the roster (with its player pool)
    and the three prompt splits; ``train_pool`` is the world's, the prompts the evolve stage wrote
    (``evolved``, read from the store whenever another iteration's are on disk) join it in
    ``prompts`` and ``pool_by_cell``."""

    cfg: FlywheelConfig
    store: RunStore
    roster: Roster = field(init=False)
    train_pool: list[Prompt] = field(init=False)
    eval_split: list[Prompt] = field(init=False)
    validation: list[Prompt] = field(init=False)
    _pools: dict[tuple[int, ...], tuple[list[EvolvedPrompt], dict[str, Prompt], dict[str, list[Prompt]]]] = field(
        init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.roster = Roster(self.cfg, self.store)
        self.roster.hand_in(latest_gpu_shares(self.store, self.cfg.run.iterations))
        self.train_pool, self.eval_split, self.validation = world_pools(self.cfg.world)

    def _pool(self) -> tuple[list[EvolvedPrompt], dict[str, Prompt], dict[str, list[Prompt]]]:
        """(evolved prompts, every prompt by id, train prompts by arm), built again once the
        store holds another iteration's evolved prompts."""
        stamp = tuple(self.store.evolved_iterations())
        if stamp not in self._pools:
            evolved = self.store.evolved()
            mine = [e.prompt() for e in evolved]
            cells: dict[str, list[Prompt]] = {}
            for p in self.train_pool:
                cells.setdefault(arm_of(p), []).append(p)
            for p in mine:
                cells.setdefault(evolved_arm(p), []).append(p)
            every = self.train_pool + mine + self.eval_split + self.validation
            self._pools = {stamp: (evolved, {p.id: p for p in every}, dict(sorted(cells.items())))}
        return self._pools[stamp]

    @property
    def evolved(self) -> list[EvolvedPrompt]:
        """The prompts evolved so far (``select.evolve``), with their lineage, in iteration order."""
        return self._pool()[0]

    @property
    def prompts(self) -> dict[str, Prompt]:
        return self._pool()[1]

    @functools.cached_property
    def judge(self) -> PairwiseJudge:
        return build_judge(self.cfg.judge, self.roster, self.store.judge_outputs if self.cfg.judge.cache else None,
                           self.cascade_off)

    def cascade_off(self) -> set[tuple[int, str]]:
        """The cascade tiers its guard turned off so far in the run, as (tier, judge name): every
        ``stages/judge-cascade-r<rnd>.json`` of every iteration (flywheel/stages/judge.py)."""
        off: set[tuple[int, str]] = set()
        for k in range(1, self.cfg.run.iterations + 1):
            for rnd in range(1, self.cfg.select.rounds + 1):
                data = self.store.stage_json(k, cascade_guard_stage(rnd)) or {}
                off.update((t["tier"], t["judge"]) for t in data.get("off", []))
        return off

    @functools.cached_property
    def correct(self) -> Callable[[str | None, Prompt], bool]:
        """Whether a response answers a prompt: the configured verifier's check (with its
        final-answer extraction), which eval accuracy and the eval subsets use."""
        verifier = build_verifier(self.cfg.judge.verifier)
        return lambda response, prompt: verifier.correct(response, prompt.reference)

    @property
    def pool_by_cell(self) -> dict[str, list[Prompt]]:
        """The train prompts by selection arm: the world's cells, and evolved prompts' arms."""
        return self._pool()[2]

    def current_version(self, target: str, k: int) -> str:
        """The version of ``target`` that plays (and is trained on) in iteration ``k``: the one
        iteration k-1's promote stage kept; version k-1 in runs made before that stage."""
        kept = read_stage(self.store, k - 1, "promote", PromoteResult) if k > 1 else None
        decision = kept.targets.get(target) if kept else None
        return decision.current if decision else versioned(target, max(k - 1, 0))

    def version_eval(self, version: str) -> VersionEval | None:
        """A target version's figures, from the evaluation of the iteration that made it."""
        k = PlayerVersion.parse(version).k
        done = read_stage(self.store, k, "evaluate", EvalResult) if k is not None else None
        return done.eval.get(version) if done else None

    def release_players(self) -> None:
        """Close every loaded player (after versions change on disk, or GPU shares do)."""
        self.roster.pool.release()


# -- opening a run ------------------------------------------------------------------------------
def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def open_run(cfg: FlywheelConfig, resume: Path | None = None, lock_wait_s: float = 0.0) -> Context:
    """Create a run directory (config.yaml, manifest.json) or reopen one for ``--resume``.

    On resume the run's own config.yaml is the config; the run directory is locked either way
    (waiting up to ``lock_wait_s`` for another process to finish with it)."""
    if resume is not None:
        config = RunStore(resume).config_path
        if not config.exists():
            raise FileNotFoundError(f"{resume} is not a run directory (no config.yaml)")
        cfg = load_config(config)
        store = RunStore(resume, cfg.run.cache_dir)
        store.lock(lock_wait_s)
        store.record_machine(machine())
        return _register(Context(cfg, store))
    run_id = cfg.run.name or new_run_id()
    root = Path(cfg.run.root) / run_id
    if RunStore(root).config_path.exists():
        raise FileExistsError(f"{root} already exists; use --resume {root} to continue it")
    cfg = cfg.model_copy(deep=True)
    cfg.run.name = run_id
    store = RunStore(root, cfg.run.cache_dir)
    store.lock(lock_wait_s)
    if store.config_path.exists():  # created by another process while this one waited
        store.unlock()
        raise FileExistsError(f"{root} already exists; use --resume {root} to continue it")
    ctx = Context(cfg, store)
    atomic_write_text(store.config_path, dump_config(cfg))
    atomic_write_json(store.manifest_path, _manifest(ctx))
    return _register(ctx)


def close_run(ctx: Context) -> None:
    """Release the run's players and its lock (the flow's ``finally``)."""
    ctx.release_players()
    _CONTEXTS.pop(str(ctx.store.root.resolve()), None)
    ctx.store.unlock()


def _register(ctx: Context) -> Context:
    _CONTEXTS[str(ctx.store.root.resolve())] = ctx
    return ctx


def worker_context(run_dir: str) -> Context:
    """The Context of a run directory in this process: the flow's own one (registered by
    open_run), or one a worker builds from the run's config.yaml (without taking the lock,
    which the flow process holds)."""
    key = str(Path(run_dir).resolve())
    if key not in _CONTEXTS:
        cfg = load_config(RunStore(Path(run_dir)).config_path)
        _CONTEXTS[key] = Context(cfg, RunStore(Path(run_dir), cfg.run.cache_dir))
    return _CONTEXTS[key]


def _manifest(ctx: Context) -> dict[str, Any]:
    versions = {}
    for pkg in ("flywheel", "torch", "transformers", "trl", "datasets", "prefect", "peft", "numpy"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None

    def split(prompts: list[Prompt]) -> dict[str, Any]:
        return {"prompts": len(prompts), "hash": stable_id(*sorted(p.text for p in prompts))}

    return {
        "run_id": ctx.cfg.run.name,
        "created": datetime.now(timezone.utc).isoformat(),
        "packages": versions,
        "seeds": {"run": ctx.cfg.run.seed, "world": ctx.cfg.world.seed, "tasks": ctx.cfg.world.tasks.seed},
        "inputs": {"train_pool": split(ctx.train_pool), "eval_split": split(ctx.eval_split),
                   "validation_split": split(ctx.validation)},
        "players": {n: ctx.roster.path(n) for n in ctx.roster.targets + ctx.roster.opponents},
        "machines": [machine()],
        "timings": {},
    }


def machine() -> dict[str, Any]:
    """The machine a process opened or resumed the run on: platform, Python, the CPUs it may use,
    memory, and the NVIDIA GPUs the driver lists (read from /proc: CUDA is not initialised here,
    which would break forked workers)."""
    gpus = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                gpus.append(line.split(":", 1)[1].strip())
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory = None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"started": datetime.now(timezone.utc).isoformat(), "host": platform.node(),
            "platform": platform.platform(), "python": platform.python_version(), "cpus": cpus,
            "memory_gib": memory, "gpus": gpus}


# -- stage bookkeeping --------------------------------------------------------------------------
def read_stage(store: RunStore, k: int, name: str, result: type[R]) -> R | None:
    """Iteration ``k``'s stage result (``name``: ``evaluate``, ``select-r2``, ...), typed."""
    data = store.stage_json(k, name)
    return None if data is None else result.from_json(data)


def stage(base: str, result: type[JsonRecord], per_round: bool = False,
          publishes: str | None = None) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Run the stage unless its result is on disk; store the result and the stage's timing.
    A ``per_round`` stage takes the round number after ``k`` and is recorded as ``<base>-r<n>``.
    ``publishes`` names what the Prefect flow publishes once the stage is done (``leaderboard``,
    ``datasets``, ``checkpoints``: flows/flywheel_flow.py's ``PUBLISHERS``); the stage itself
    publishes nothing."""
    def wrap(fn: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(fn)
        def run(ctx: Context, k: int, *args: Any) -> R:
            name = f"{base}-r{args[0]}" if per_round else base
            done = read_stage(ctx.store, k, name, result)
            if done is not None:
                return done
            t0 = time.perf_counter()
            out = fn(ctx, k, *args)
            ctx.store.save_stage_json(k, name, out.to_json(), time.perf_counter() - t0)
            return out

        run.publishes = publishes  # type: ignore[attr-defined]
        return run

    return wrap
