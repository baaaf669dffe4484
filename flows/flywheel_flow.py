"""The flywheel as a Prefect flow: it reads like the pipeline; the work lives in flywheel/."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from flywheel import pipeline, reports
from flywheel.config import FlywheelConfig
from flywheel.pipeline import Context
from flywheel.tinymodels import bootstrap
from flywheel.world import forget_players

# Stages hold the run directory's state on disk, so Prefect's input caching is off; retries
# are safe because every stage is idempotent.
TASK = dict(cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1)


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


@task(**TASK)
def select(ctx: Context, k: int, rnd: int, budgets: dict[str, int]) -> dict[str, Any]:
    """The bandits choose one round of prompts and opponents."""
    return pipeline.select(ctx, k, rnd, budgets)


@task(**TASK)
def play_shard(run_dir: str, k: int, rnd: int, i: int) -> int:
    """Targets and opponents answer one shard of the round's battles (on any worker)."""
    return pipeline.play_round_shard(run_dir, k, rnd, i)


@task(**TASK)
def judge_shard(run_dir: str, k: int, rnd: int, i: int) -> int:
    """The judge decides one shard of the round's battles (on any worker)."""
    return pipeline.judge_round_shard(run_dir, k, rnd, i)


@task(**TASK)
def battle(ctx: Context, k: int, rnd: int) -> dict[str, Any]:
    """Record the round's battles (the mapped shards played them)."""
    return pipeline.battle(ctx, k, rnd)


@task(**TASK)
def judge(ctx: Context, k: int, rnd: int) -> dict[str, Any]:
    """The round's verdicts (judged by the mapped shards) reward the bandits."""
    return pipeline.judge(ctx, k, rnd)


def mapped(shard_task, ctx: Context, k: int, rnd: int, stage: str) -> None:
    """Run ``shard_task`` over the round's shards on the flow's task runner, unless the stage is done."""
    if pipeline.stage_result(ctx.store, k, f"{stage}-r{rnd}") is not None:
        return
    n = pipeline.shard_count(ctx, k, rnd)
    if n:
        shard_task.map(unmapped(str(ctx.store.root)), unmapped(k), unmapped(rnd), list(range(n))).result()


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


@task(**TASK)
def rate(ctx: Context, k: int) -> dict[str, Any]:
    """Bradley-Terry and online Elo over the iteration's battles."""
    return pipeline.rate(ctx, k)


@task(**TASK)
def curate(ctx: Context, k: int) -> dict[str, Any]:
    """Winning traces become SFT and DPO datasets."""
    return pipeline.curate_stage(ctx, k)


@task(**TASK)
def train(ctx: Context, k: int, steps: dict[str, int]) -> dict[str, Any]:
    """TRL fine-tunes each target into its next version."""
    result = pipeline.train(ctx, k, steps)
    forget_players()
    return result


@task(**TASK)
def merge(ctx: Context, k: int) -> dict[str, Any]:
    """allocate.sharing federated: same-architecture targets are merged, weighted by accuracy."""
    result = pipeline.merge_stage(ctx, k)
    forget_players()
    return result


@task(**TASK)
def evaluate(ctx: Context, k: int) -> dict[str, Any]:
    """The newest versions play the held-out eval split; accuracy and Elo with CIs."""
    result = pipeline.evaluate(ctx, k)
    key = "-".join(filter(None, re.split(r"[^a-z0-9]+", str(ctx.cfg.run.name).lower())))
    rows = result["leaderboard"]
    create_table_artifact(table=rows, key=f"leaderboard-{key}"[:100],
                          description=f"Eval leaderboard of run {ctx.cfg.run.name} after iteration {k}")
    create_markdown_artifact(
        markdown=f"# {ctx.cfg.run.name}: eval leaderboard after iteration {k}\n\n" + reports.markdown_table(rows),
        key=f"leaderboard-md-{key}"[:100], description=f"Eval leaderboard after iteration {k}")
    return result


@task(**TASK)
def allocate(ctx: Context, k: int) -> dict[str, Any]:
    """Share the next iteration's compute among the targets."""
    result = pipeline.allocate_stage(ctx, k)
    if ctx.cfg.allocate.gpu_memory is not None:  # vLLM engines restart with their new memory share
        forget_players()
    return result


@flow(name="flywheel", task_runner=ThreadPoolTaskRunner(max_workers=1))
def flywheel(config: dict[str, Any], resume: str | None = None, more: int | None = None,
             lock_wait_s: float = 0.0) -> str:
    """Run (or resume) a flywheel: a baseline evaluation, then N iterations. Returns the run dir.

    ``more``: instead of run.iterations, run this many iterations beyond those already completed
    when the run's lock is taken (a scheduled trigger adds one)."""
    logger = get_run_logger()
    ctx = pipeline.open_run(FlywheelConfig.model_validate(config), Path(resume) if resume else None, lock_wait_s)
    try:
        logger.info("run directory: %s", ctx.store.root)
        done = pipeline.completed_iterations(ctx.store)
        last = ctx.cfg.run.iterations if more is None else max(done, default=0) + more
        ensure_models(ctx)
        if 0 not in done:
            t0 = time.perf_counter()
            evaluate(ctx, 0)
            allocate(ctx, 0)
            pipeline.record_iteration(ctx, 0, time.perf_counter() - t0)
        for k in range(1, last + 1):
            if k in pipeline.completed_iterations(ctx.store):
                continue
            t0 = time.perf_counter()
            plan = pipeline.stage_result(ctx.store, k - 1, "allocate")
            for rnd in range(1, ctx.cfg.select.rounds + 1):
                select(ctx, k, rnd, plan["battles"])
                mapped(play_shard, ctx, k, rnd, "battle")
                battle(ctx, k, rnd)
                mapped(judge_shard, ctx, k, rnd, "judge")
                judge(ctx, k, rnd)
            rate(ctx, k)
            curate(ctx, k)
            train(ctx, k, plan["train_steps"])
            merge(ctx, k)
            evaluate(ctx, k)
            allocate(ctx, k)
            entry = pipeline.record_iteration(ctx, k, time.perf_counter() - t0)
            logger.info("iteration %d: %s", k, {m: e["accuracy"] for m, e in entry["eval"].items()})
        return str(ctx.store.root)
    finally:
        ctx.store.unlock()


@flow(name="flywheel-scheduled")
def scheduled_flywheel(config: dict[str, Any]) -> str:
    """One scheduled trigger. ``schedule.mode: continue`` adds one iteration to the run
    ``run.root/run.name`` (creating it on the first trigger); ``fresh`` starts a new run.
    A trigger that finds the run in use waits ``schedule.lock_wait_s``, then refuses."""
    cfg = FlywheelConfig.model_validate(config).model_copy(deep=True)
    base = cfg.run.name or "scheduled"
    if cfg.schedule.mode == "fresh":
        cfg.run.name = f"{base}-{pipeline.new_run_id()}-{os.urandom(2).hex()}"
        return run_flywheel(cfg.model_dump(mode="json"))
    root = Path(cfg.run.root) / base
    cfg.run.name = base
    resume = str(root) if (root / "config.yaml").exists() else None
    return run_flywheel(cfg.model_dump(mode="json"), resume, more=1, lock_wait_s=cfg.schedule.lock_wait_s)
