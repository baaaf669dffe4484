"""The flywheel as a Prefect flow: it reads like the pipeline; the work lives in flywheel/."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

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
    return [str(p) for p in bootstrap(ctx.cfg.world, only=[n for n in ctx.roster.targets + ctx.roster.opponents])]


@task(**TASK)
def select(ctx: Context, k: int, rnd: int, budgets: dict[str, int]) -> dict[str, Any]:
    """The bandits choose one round of prompts and opponents."""
    return pipeline.select(ctx, k, rnd, budgets)


@task(**TASK)
def battle(ctx: Context, k: int, rnd: int) -> dict[str, Any]:
    """Targets and opponents answer the chosen prompts."""
    return pipeline.battle(ctx, k, rnd)


@task(**TASK)
def judge(ctx: Context, k: int, rnd: int) -> dict[str, Any]:
    """The judge decides every new battle; its verdicts reward the bandits."""
    return pipeline.judge(ctx, k, rnd)


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
    return pipeline.allocate_stage(ctx, k)


@flow(name="flywheel")
def flywheel(config: dict[str, Any], resume: str | None = None) -> str:
    """Run (or resume) a flywheel: a baseline evaluation, then N iterations. Returns the run dir."""
    logger = get_run_logger()
    ctx = pipeline.open_run(FlywheelConfig.model_validate(config), Path(resume) if resume else None)
    try:
        logger.info("run directory: %s", ctx.store.root)
        ensure_models(ctx)
        if 0 not in pipeline.completed_iterations(ctx.store):
            t0 = time.perf_counter()
            evaluate(ctx, 0)
            allocate(ctx, 0)
            pipeline.record_iteration(ctx, 0, time.perf_counter() - t0)
        for k in range(1, ctx.cfg.run.iterations + 1):
            if k in pipeline.completed_iterations(ctx.store):
                continue
            t0 = time.perf_counter()
            plan = pipeline.stage_result(ctx.store, k - 1, "allocate")
            for rnd in range(1, ctx.cfg.select.rounds + 1):
                select(ctx, k, rnd, plan["battles"])
                battle(ctx, k, rnd)
                judge(ctx, k, rnd)
            rate(ctx, k)
            curate(ctx, k)
            train(ctx, k, plan["train_steps"])
            evaluate(ctx, k)
            allocate(ctx, k)
            entry = pipeline.record_iteration(ctx, k, time.perf_counter() - t0)
            logger.info("iteration %d: %s", k, {m: e["accuracy"] for m, e in entry["eval"].items()})
        return str(ctx.store.root)
    finally:
        ctx.store.unlock()
