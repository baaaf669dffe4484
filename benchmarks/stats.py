"""What the flywheel benchmarks share: seeds, means with 95% CIs over seeds, monotone (isotonic)
fits of accuracy against budget, the budget ratio read off those fits, and paired differences
of two models on the same prompts with a bootstrap over prompts (stratified by run).

A ratio is never read from a first crossing of noisy curves: each arm's accuracy-by-budget points
are fitted with a non-decreasing step-free curve (pool-adjacent-violators, linear between the
budgets), and ``budget_ratio`` compares the budgets at which the two fitted curves reach the same
accuracy."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np


def parse_seeds(values: Sequence[str]) -> list[int]:
    """``--seeds 5,6,7`` or ``--seeds 5 6 7`` (or both mixed) -> [5, 6, 7]."""
    seeds = [int(s) for v in values for s in str(v).replace(",", " ").split()]
    if not seeds:
        raise SystemExit("--seeds: give at least one seed, e.g. --seeds 5,6,7,8,9")
    return seeds


def t_quantile(df: int, level: float = 0.95) -> float:
    """Two-sided Student-t quantile (scipy's, with a normal fallback)."""
    try:
        from scipy.stats import t
        return float(t.ppf(0.5 + level / 2, df))
    except ImportError:  # pragma: no cover - scipy comes with the project's dependencies
        return 1.959963984540054


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its ``level`` confidence interval (Student t over the values;
    0 for a single value)."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, 0.0
    return m, t_quantile(len(values) - 1, level) * statistics.stdev(values) / math.sqrt(len(values))


def isotonic(ys: Sequence[float]) -> list[float]:
    """The least-squares non-decreasing fit of ``ys`` (pool-adjacent-violators, equal weights)."""
    blocks: list[list[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([float(y), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    return [s / n for s, n in blocks for _ in range(int(n))]


def budget_to_reach(budgets: Sequence[float], fitted: Sequence[float], goal: float) -> float | None:
    """The budget at which a non-decreasing curve (linear between points) first reaches ``goal``;
    None if it never does within the budgets tried (no extrapolation)."""
    pts = sorted(zip(budgets, fitted))
    if pts[0][1] >= goal:
        return float(pts[0][0])
    for (b0, a0), (b1, a1) in zip(pts, pts[1:]):
        if a1 >= goal:
            return b0 + (b1 - b0) * (goal - a0) / (a1 - a0)
    return None


def value_at(budgets: Sequence[float], fitted: Sequence[float], budget: float) -> float:
    """A curve (linear between points) at ``budget``, inside the budgets tried."""
    pts = sorted(zip(budgets, fitted))
    for (b0, a0), (b1, a1) in zip(pts, pts[1:]):
        if b0 <= budget <= b1:
            return a0 if b1 == b0 else a0 + (a1 - a0) * (budget - b0) / (b1 - b0)
    return pts[0][1] if budget < pts[0][0] else pts[-1][1]


def budget_ratio(budgets: Sequence[float], base: Sequence[float], ours: Sequence[float]) -> tuple[float, str]:
    """How many times fewer budget ``ours`` needs than ``base`` for the same accuracy, on the
    isotonic fits of both (accuracy by budget, same budgets, ascending).

    If ``ours`` reaches ``base``'s accuracy at the largest budget, the ratio is largest / the
    budget ``ours`` needs for it (at least 1; capped at largest / smallest, marked ``>=``).
    If not, the ratio is the budget ``base`` needs to reach ``ours``'s accuracy at the largest
    budget / the largest (below 1; marked ``<=`` where base is better even at the smallest
    budget). Returns (ratio, mark): mark is '>=' or '<=' where the ratio is only a bound, else ''."""
    fb, fo = isotonic(base), isotonic(ours)
    top, low = max(budgets), min(budgets)
    goal = value_at(budgets, fb, top)
    need = budget_to_reach(budgets, fo, goal)
    if need is not None:
        return top / need, ">=" if value_at(budgets, fo, low) > goal else ""
    reach = value_at(budgets, fo, top)  # below goal: base's curve reaches it within the budgets
    need_base = budget_to_reach(budgets, fb, reach)
    assert need_base is not None
    return need_base / top, "<=" if value_at(budgets, fb, low) > reach else ""



@dataclass(frozen=True)
class PairedDifference:
    """The mean of per-prompt differences (``ours - theirs``) and its bootstrap interval."""

    mean: float
    lower: float
    upper: float
    prompts: int  # prompt pairs, over every stratum


def per_prompt_differences(ours: Mapping[str, float], theirs: Mapping[str, float]) -> np.ndarray:
    """``ours[p] - theirs[p]`` (float64[P]) for every prompt id both have, in sorted id order; a
    prompt only one of them has is left out (the caller checks the two cover the same prompts)."""
    common = sorted(set(ours) & set(theirs))
    return np.array([float(ours[p]) - float(theirs[p]) for p in common], dtype=np.float64)


def stratified_bootstrap(strata: Sequence[np.ndarray], rounds: int = 2000, seed: int = 0,
                         level: float = 0.95) -> PairedDifference:
    """The mean of every per-prompt difference in ``strata`` (float64[P_s] each, e.g. one per run)
    and its percentile ``level`` interval over ``rounds`` resamples that draw, within each stratum,
    as many prompts as it has, with replacement (a paired bootstrap over prompts; with one stratum,
    the plain one). Seeded: the same input gives the same interval."""
    strata = [np.asarray(d, dtype=np.float64) for d in strata if len(d)]
    n = sum(len(d) for d in strata)
    if n == 0:
        raise ValueError("no prompt pairs to compare")
    rng = np.random.default_rng(seed)
    sums = np.zeros(rounds)
    for d in strata:
        sums += d[rng.integers(0, len(d), size=(rounds, len(d)))].sum(axis=1)
    lower, upper = np.quantile(sums / n, [(1 - level) / 2, (1 + level) / 2])
    return PairedDifference(float(np.concatenate(strata).mean()), float(lower), float(upper), n)


def _one_thread() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def run_all(fn: Callable[..., Any], calls: list[tuple], jobs: int) -> list[Any]:
    """``fn(*args)`` for every args tuple of ``calls``, in ``jobs`` processes (spawned, one torch
    thread each: the tiny models train ~8x faster per process than with torch's threads fighting
    over 2 cores), results in the order of ``calls``."""
    if jobs <= 1:
        _one_thread()
        return [fn(*c) for c in calls]
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_one_thread) as pool:
        futures = [pool.submit(fn, *c) for c in calls]
        return [f.result() for f in futures]


def quiet_runs() -> None:
    """No progress bars or telemetry in this process and the runs it spawns (they inherit these)."""
    from flywheel.face.cli import QUIET_ENV

    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


def default_jobs() -> int:
    from flywheel.maths.ratings import usable_cpus

    return usable_cpus()
