"""The flywheel as a Prefect flow: each stage of flywheel/stages/ runs as a Prefect task, and a
round's battle and judgment shards as mapped tasks on the run's task runner. The order of the
stages is flywheel.stages.iteration's; the work lives in flywheel/."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from prefect import Task, flow, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from flywheel import reports
from flywheel.config import FlywheelConfig
from flywheel.stages.context import Context, close_run, new_run_id, open_run
from flywheel.stages.iteration import Shard, run_to
from flywheel.stages.results import EvalResult, IterationSummary
from flywheel.stages.summary import completed_iterations
from flywheel.tinymodels import bootstrap

T = TypeVar("T")

# Stages hold the run directory's state on disk, so Prefect's input caching is off; retries
# are safe because every stage is idempotent.
TASK = dict(cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1)
_TASKS: dict[str, Task] = {}


def as_task(name: str, fn: Callable[..., Any]) -> Task:
    """The Prefect task of a stage (one per stage name and function)."""
    key = f"{name}:{fn.__module__}.{fn.__qualname__}"
    if key not in _TASKS:
        _TASKS[key] = task(fn, name=name, **TASK)
    return _TASKS[key]


@task(**TASK)
def ensure_models(ctx: Context) -> list[str]:
    """Build and pre-train the embedded world's tiny models that are missing."""
    world = ctx.cfg.world
    players = ctx.cfg.targets + ctx.cfg.opponents
    # Players by name, and players whose path is one of the world's models (three targets
    # trained from one pre-trained student, say).
    names = [p.name for p in players] + [Path(p.path).name for p in players
                                         if p.path and Path(p.path).resolve().parent == Path(world.models_dir).resolve()]
    return [str(p) for p in bootstrap(world, only=names)]


class PrefectRunner:
    """Runs each stage as a Prefect task in the flow, and a round's shards as mapped tasks."""

    def stage(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        result = as_task(name, fn)(*args)
        if isinstance(result, EvalResult):
            publish_leaderboard(args[0], args[1], result)
        return result

    def shards(self, name: str, fn: Shard, run_dir: str, k: int, rnd: int, n: int) -> None:
        if n:
            as_task(name, fn).map(unmapped(run_dir), unmapped(k), unmapped(rnd), list(range(n))).result()


def publish_leaderboard(ctx: Context, k: int, result: EvalResult) -> None:
    """The eval leaderboard as Prefect artifacts (a table and markdown), per run."""
    key = "-".join(filter(None, re.split(r"[^a-z0-9]+", str(ctx.cfg.run.name).lower())))
    rows = result.leaderboard
    create_table_artifact(table=rows, key=f"leaderboard-{key}"[:100],
                          description=f"Eval leaderboard of run {ctx.cfg.run.name} after iteration {k}")
    create_markdown_artifact(
        markdown=f"# {ctx.cfg.run.name}: eval leaderboard after iteration {k}\n\n" + reports.markdown_table(rows),
        key=f"leaderboard-md-{key}"[:100], description=f"Eval leaderboard after iteration {k}")


def task_runner(run: dict[str, Any]):
    """The task runner a run's config asks for (``run.task_runner``), imported lazily."""
    kind, address, workers = run.get("task_runner", "default"), run.get("runner_address"), run.get("workers", 1)
    if kind == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError:
            raise RuntimeError("run.task_runner dask needs prefect-dask: pip install 'flywheel[dask]'") from None
        if address:
            return DaskTaskRunner(address=address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True,
                                              "dashboard_address": None})
    if kind == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError:
            raise RuntimeError("run.task_runner ray needs prefect-ray: pip install prefect-ray") from None
        return RayTaskRunner(address=address) if address else RayTaskRunner()
    return ThreadPoolTaskRunner(max_workers=workers)


def run_flywheel(config: dict[str, Any], resume: str | None = None, **kw: Any) -> str:
    """The flywheel flow on the task runner of the run's config (the run directory's own one on resume)."""
    run = config["run"]
    if resume is not None:
        from flywheel.config import load_config

        run = load_config(Path(resume) / "config.yaml").model_dump(mode="json")["run"]
    return flywheel.with_options(task_runner=task_runner(run))(config, resume, **kw)


@flow(name="flywheel", task_runner=ThreadPoolTaskRunner(max_workers=1))
def flywheel(config: dict[str, Any], resume: str | None = None, more: int | None = None,
             lock_wait_s: float = 0.0) -> str:
    """Run (or resume) a flywheel: a baseline evaluation, then N iterations. Returns the run dir.

    ``more``: instead of run.iterations, run this many iterations beyond those already completed
    when the run's lock is taken (a scheduled trigger adds one)."""
    logger = get_run_logger()
    ctx = open_run(FlywheelConfig.model_validate(config), Path(resume) if resume else None, lock_wait_s)
    try:
        logger.info("run directory: %s", ctx.store.root)
        done = completed_iterations(ctx.store)
        last = ctx.cfg.run.iterations if more is None else max(done, default=0) + more
        ensure_models(ctx)

        def finished(entry: IterationSummary) -> None:
            logger.info("iteration %d: %s", entry.iteration, {m: e.accuracy for m, e in entry.eval.items()})

        run_to(ctx, last, PrefectRunner(), finished)
        return str(ctx.store.root)
    finally:
        close_run(ctx)


@flow(name="flywheel-scheduled")
def scheduled_flywheel(config: dict[str, Any]) -> str:
    """One scheduled trigger. ``schedule.mode: continue`` adds one iteration to the run
    ``run.root/run.name`` (creating it on the first trigger); ``fresh`` starts a new run.
    A trigger that finds the run in use waits ``schedule.lock_wait_s``, then refuses."""
    cfg = FlywheelConfig.model_validate(config).model_copy(deep=True)
    base = cfg.run.name or "scheduled"
    if cfg.schedule.mode == "fresh":
        cfg.run.name = f"{base}-{new_run_id()}-{os.urandom(2).hex()}"
        return run_flywheel(cfg.model_dump(mode="json"))
    root = Path(cfg.run.root) / base
    cfg.run.name = base
    resume = str(root) if (root / "config.yaml").exists() else None
    return run_flywheel(cfg.model_dump(mode="json"), resume, more=1, lock_wait_s=cfg.schedule.lock_wait_s)
