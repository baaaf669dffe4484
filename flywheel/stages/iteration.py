"""One flywheel iteration, in order, written once: the Prefect flow (flows/) and the benchmarks
both run iterations through ``run_iteration``; they differ only in how a stage is run (a
Prefect task, or a plain call) and how a round's shards are spread (mapped tasks, or a loop)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from flywheel.learning.allocation import Allocation
from flywheel.run.context import Context, read_stage
from flywheel.run.results import IterationSummary
from flywheel.run.summary import completed_iterations, record_iteration
from flywheel.stages import (allocate, battle, curate, evaluate, evolve, judge, merge, promote, rate, select, teach,
                             train)

T = TypeVar("T")
Shard = Callable[[str, int, int, int], int]


class Runner(Protocol):
    """How stages run: ``stage(name, fn, *args)`` runs one stage (``fn(*args)``);
    ``shards(name, fn, run_dir, k, rnd, n)`` runs ``fn(run_dir, k, rnd, i)`` for the n shards."""

    def stage(self, name: str, fn: Callable[..., T], *args: Any) -> T: ...

    def shards(self, name: str, fn: Shard, run_dir: str, k: int, rnd: int, n: int) -> None: ...


class InProcess:
    """Every stage a plain call in this process, shards one after another."""

    def stage(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)

    def shards(self, name: str, fn: Shard, run_dir: str, k: int, rnd: int, n: int) -> None:
        for i in range(n):
            fn(run_dir, k, rnd, i)


def run_baseline(ctx: Context, runner: Runner = InProcess()) -> IterationSummary:
    """Iteration 0: the starting versions are evaluated and the first allocation is made."""
    t0 = time.perf_counter()
    runner.stage("evaluate", evaluate.evaluate_versions, ctx, 0)
    _allocate(ctx, 0, runner)
    return record_iteration(ctx, 0, time.perf_counter() - t0)


def run_iteration(ctx: Context, k: int, runner: Runner = InProcess()) -> IterationSummary:
    """select -> battle -> judge -> reward per round, (teach per teaching round, evolve,) then rate -> curate ->
    train -> merge -> evaluate -> promote -> allocate; every stage skips itself when its result is on disk (resume)."""
    t0 = time.perf_counter()
    plan = read_stage(ctx.store, k - 1, "allocate", Allocation)
    if plan is None:
        raise RuntimeError(f"iteration {k}: no allocation from iteration {k - 1} (run it first)")
    run_dir = str(ctx.store.root)
    for rnd in range(1, ctx.cfg.select.rounds + 1):
        runner.stage("select", select.select_round, ctx, k, rnd, plan.battles)
        n = battle.shard_count(ctx, k, rnd)
        if ctx.store.stage_json(k, f"battle-r{rnd}") is None:
            _timed_shards(ctx, k, f"play-shards-r{rnd}", lambda: runner.shards(
                "play-shard", battle.play_shard, run_dir, k, rnd, n))
        runner.stage("battle", battle.battle_round, ctx, k, rnd)
        if ctx.store.stage_json(k, f"judge-r{rnd}") is None:
            _timed_shards(ctx, k, f"judge-shards-r{rnd}", lambda: runner.shards(
                "judge-shard", judge.judge_shard, run_dir, k, rnd, n))
        runner.stage("judge", judge.judge_round, ctx, k, rnd)
        runner.stage("reward", select.reward_round, ctx, k, rnd)
    if ctx.cfg.select.teaching.enabled:  # opponents teach the targets; the best lessons join the SFT data
        for rnd in range(1, ctx.cfg.select.teaching.rounds + 1):
            runner.stage("teach", teach.teach_round, ctx, k, rnd)
    if ctx.cfg.select.evolve.enabled:  # new prompts from the arms that yielded most, arms from iteration k + 1
        runner.stage("evolve", evolve.evolve_prompts, ctx, k)
    runner.stage("rate", rate.rate_arena, ctx, k)
    runner.stage("curate", curate.curate_datasets, ctx, k)
    runner.stage("train", train.train_targets, ctx, k, plan.train_steps)
    ctx.release_players()  # new versions on disk; free the memory for the next stages
    runner.stage("merge", merge.merge_targets, ctx, k)
    ctx.release_players()
    runner.stage("evaluate", evaluate.evaluate_versions, ctx, k)
    runner.stage("promote", promote.promote_versions, ctx, k)
    _allocate(ctx, k, runner)
    return record_iteration(ctx, k, time.perf_counter() - t0)


def _timed_shards(ctx: Context, k: int, name: str, play: Callable[[], None]) -> None:
    """Run a round's shards (``play``) and record their wall time as ``name`` in the manifest: the
    round's ``battle-r<n>`` and ``judge-r<n>`` stages time only what is left once they are done."""
    t0 = time.perf_counter()
    play()
    ctx.store.save_timing(k, name, time.perf_counter() - t0)


def _allocate(ctx: Context, k: int, runner: Runner) -> None:
    alloc = runner.stage("allocate", allocate.allocate_compute, ctx, k)
    if ctx.cfg.allocate.gpu_memory is not None:  # vLLM engines restart with their new memory share
        ctx.roster.hand_in(alloc.gpu_memory)
        ctx.release_players()


def run_to(ctx: Context, last: int, runner: Runner = InProcess(),
           done: Callable[[IterationSummary], None] | None = None) -> None:
    """The baseline, then every iteration up to ``last`` that is not completed yet."""
    if 0 not in completed_iterations(ctx.store):
        run_baseline(ctx, runner)
    for k in range(1, last + 1):
        if k in completed_iterations(ctx.store):
            continue
        entry = run_iteration(ctx, k, runner)
        if done is not None:
            done(entry)
