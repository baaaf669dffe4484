"""battle: targets and opponents answer one round's planned battles, a shard at a time.

A shard (``run.shard_size`` battles of the round's plan) is the unit a mapped task plays on any
worker: it is written whole or not at all, and its battles (their ids carry the round and the
plan index) go to no other file, so nothing else of the log is read: the cost of a shard does
not grow with the iteration."""

from __future__ import annotations

from flywheel.arena.battles import play_batch
from flywheel.ground.records import Battle
from flywheel.run.context import Context, stage, worker_context
from flywheel.run.results import BattleResult


def shard_count(ctx: Context, k: int, rnd: int) -> int:
    """How many shards round ``rnd``'s plan has (``run.shard_size`` battles each)."""
    return -(-ctx.store.plan_size(k, rnd) // ctx.cfg.run.shard_size)


def play_shard(run_dir: str, k: int, rnd: int, i: int) -> int:
    """Play shard ``i`` of round ``rnd``'s plan into ``battles/``, unless it is there already.
    Returns the battles played now."""
    ctx = worker_context(run_dir)
    name, size = ctx.store.shard_name(k, rnd, i), ctx.cfg.run.shard_size
    if ctx.store.shard_exists("battles", name):
        return 0
    todo = ctx.store.plan_shard(k, rnd, i, size)
    play_batch(ctx.roster, ctx.store, todo, ctx.prompts, name)
    return len(todo)


@stage("battle", BattleResult, per_round=True)
def battle_round(ctx: Context, k: int, rnd: int) -> BattleResult:
    """Play every shard of the round not on disk yet (none after the flow's mapped shard tasks;
    run alone, this plays them here)."""
    new = sum(play_shard(str(ctx.store.root), k, rnd, i) for i in range(shard_count(ctx, k, rnd)))
    n = shard_count(ctx, k, rnd)
    on_disk = sum(len(ctx.store.read_shard("battles", ctx.store.shard_name(k, rnd, i), Battle)) for i in range(n))
    return BattleResult(ctx.store.plan_size(k, rnd), on_disk, new)
