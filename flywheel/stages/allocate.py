"""allocate: share the next iteration's training steps and battles among the targets, from each
target's gain in validation standing per unit of compute (flywheel/learning/allocation.py)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from flywheel.ground.records import versioned
from flywheel.learning.allocation import Allocation, allocate
from flywheel.run.context import Context, read_stage, stage
from flywheel.run.results import TrainResult


@stage("allocate", Allocation)
def allocate_compute(ctx: Context, k: int) -> Allocation:
    """``allocate.signal``: validation accuracy gain, or validation loss drop, per unit of compute,
    of the version each target kept after each iteration (a version not promoted gained nothing)."""
    progress: dict[str, list[float]] = {t: [] for t in ctx.roster.targets}
    compute: dict[str, list[float]] = {t: [] for t in ctx.roster.targets}
    for i in range(k + 1):
        tr = read_stage(ctx.store, i, "train", TrainResult) if i > 0 else None
        for t in ctx.roster.targets:
            version = ctx.version_eval(ctx.current_version(t, i + 1))
            value = version.standing(ctx.cfg.allocate.signal) if version else None
            if value is not None:
                progress[t].append(value)
                steps = tr.steps(t) if tr else 0
                compute[t].append(steps * (_n_params(ctx, t) if ctx.cfg.allocate.compute == "params" else 1))
    previous = read_stage(ctx.store, k - 1, "allocate", Allocation) if k > 0 else None
    return allocate(ctx.cfg.allocate, ctx.roster.targets, ctx.cfg.train.steps, ctx.cfg.select.battles_per_iteration,
                    progress, compute, previous=previous.shares if previous else None,
                    was_pooled=previous.pooled is not False if previous else True, seed=ctx.cfg.run.seed)


@functools.lru_cache(maxsize=64)
def _params_at(path: str) -> int:
    from safetensors import safe_open

    total = 0
    with safe_open(str(Path(path) / "model.safetensors"), "pt") as f:
        for name in f.keys():
            total += int(np.prod(f.get_slice(name).get_shape()))
    return total


def _n_params(ctx: Context, target: str) -> int:
    """Parameters of a target (its base weights), for compute measured as steps x parameters."""
    return _params_at(ctx.roster.path(versioned(target, 0)))
