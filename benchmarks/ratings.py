"""Bradley-Terry + bootstrap: ours vs the method Chatbot Arena runs today, in one run.

The anchor is Chatbot Arena's current published rating method, written here from its
description: the log is aggregated into its unique (model_a, model_b, outcome) rows with counts;
a weighted logistic loss over those rows is minimised with scipy's L-BFGS-B (ties as half a win,
tolerance 1e-6, at most 100 iterations); the bootstrap draws every round's row counts from one
multinomial over the unique rows and fits the rounds in a process pool over all cores.

Ours (``flywheel.ratings.rate``): the log is aggregated into K x K cell counts once; a batched
Newton fit; the rounds are multinomial draws over the cells, all fitted together.

Two logs per seed: ``uniform`` (every pair equally often) and ``skewed`` (pair popularity
Zipf-like, as on a real arena, where some pairs meet thousands of times and others a handful).

    python -m benchmarks.ratings                              # 1,000,000 battles, 64 models, 100 rounds, seeds 0,1,2
    python -m benchmarks.ratings --seeds 7,8 --battles 200000 --models 32
    python -m benchmarks.ratings --quick                      # 100,000 battles, 32 models, 20 rounds

Prints each log's times, the largest point-estimate differences (Elo) between ours, the
anchor's and the exact maximum-likelihood fit (the anchor's loss minimised to convergence, not
timed), then ends with ``ratio: X``: the anchor's seconds / ours, the median over every log.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import statistics
import time
from functools import partial

import numpy as np

from flywheel.ratings import rate


# -- the logs -----------------------------------------------------------------------------------
def simulate(n: int, k: int, seed: int, skewed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` battles among ``k`` models with true Elo ~ N(1000, 200), 10% ties. Skewed: pair
    (i, j) is drawn with weight 1 / (rank of i + 1) / (rank of j + 1)."""
    rng = np.random.default_rng(seed)
    elo = rng.normal(1000, 200, k)
    if skewed:
        pop = 1.0 / np.arange(1, k + 1)
        pop = pop[rng.permutation(k)]
        pair = np.outer(pop, pop)
        np.fill_diagonal(pair, 0)
        flat = rng.choice(k * k, size=n, p=(pair / pair.sum()).ravel())
        a, b = flat // k, flat % k
    else:
        a = rng.integers(0, k, n)
        b = (a + rng.integers(1, k, n)) % k
    p = 1 / (1 + 10 ** ((elo[b] - elo[a]) / 400))
    tie = rng.random(n) < 0.1
    win_a = rng.random(n) < p
    names = np.array([f"model-{i:02d}" for i in range(k)], dtype=object)
    winner = np.where(tie, "tie", np.where(win_a, "model_a", "model_b")).astype(object)
    return names[a], names[b], winner


# -- the anchor: Chatbot Arena's current method ---------------------------------------------------
def anchor_preprocess(model_a, model_b, winner):
    """Unique (a, b, outcome) rows and their counts; models by first appearance."""
    import pandas as pd

    n = len(model_a)
    codes, models = pd.factorize(np.concatenate([model_a, model_b]))
    outcome = np.select([winner == "model_a", winner == "model_b"], [1.0, 0.0], 0.5)
    schedule = np.column_stack([codes[:n], codes[n:], outcome])
    rows, counts = np.unique(schedule, return_counts=True, axis=0)
    return rows[:, :2].astype(np.int64), rows[:, 2], list(models), counts.astype(np.float64)


def anchor_loss(ratings, matchups, outcomes, weights, alpha):
    d = alpha * (ratings[matchups[:, 0]] - ratings[matchups[:, 1]])
    p = 1.0 / (1.0 + np.exp(-d))
    eps = 1e-300
    loss = -((np.log(p + eps) * outcomes + np.log(1.0 - p + eps) * (1.0 - outcomes)) * weights).sum()
    g_rows = -alpha * (outcomes - p) * weights
    grad = np.zeros_like(ratings)
    np.add.at(grad, matchups[:, 0], g_rows)
    np.add.at(grad, matchups[:, 1], -g_rows)
    return loss, grad


def anchor_fit(matchups, outcomes, weights, n_models, alpha, tol=1e-6):
    from scipy.optimize import minimize

    res = minimize(anchor_loss, np.zeros(n_models), args=(matchups, outcomes, weights, alpha), jac=True,
                   method="L-BFGS-B", options={"maxiter": 100, "gtol": tol})
    return res.x


def exact_mle(model_a, model_b, winner) -> tuple[list[str], np.ndarray]:
    """The anchor's loss minimised to convergence (not timed): the MLE both methods estimate."""
    from scipy.optimize import minimize

    matchups, outcomes, models, weights = anchor_preprocess(model_a, model_b, winner)
    x = minimize(anchor_loss, np.zeros(len(models)), args=(matchups, outcomes, weights, math.log(10)), jac=True,
                 method="L-BFGS-B", options={"maxiter": 10_000, "gtol": 1e-12, "ftol": 1e-15}).x
    return models, 1000 + 400 * (x - x.mean())


def anchor(model_a, model_b, winner, rounds: int, seed: int, workers: int):
    """(models, point Elo, bootstrap Elo [rounds, K]) the anchor's way."""
    matchups, outcomes, models, weights = anchor_preprocess(model_a, model_b, winner)
    alpha = math.log(10)
    point = anchor_fit(matchups, outcomes, weights, len(models), alpha)
    n = int(weights.sum())
    rng = np.random.default_rng(seed)
    boot_weights = rng.multinomial(n, weights / weights.sum(), size=rounds).astype(np.float64) / n
    fit = partial(anchor_fit, matchups, outcomes, n_models=len(models), alpha=alpha)
    with mp.get_context("fork").Pool(workers) as pool:
        boots = np.array(pool.map(fit, boot_weights))
    to_elo = lambda r: 1000 + 400 * (r - r.mean(axis=-1, keepdims=True))  # noqa: E731 - same centring as ours
    return models, to_elo(point), to_elo(boots)


# -- one log --------------------------------------------------------------------------------------
def compare(n: int, k: int, rounds: int, seed: int, skewed: bool, workers: int) -> dict:
    model_a, model_b, winner = simulate(n, k, seed, skewed)
    t0 = time.perf_counter()
    report = rate(model_a, model_b, winner, rounds=rounds, seed=seed)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    models, point, boots = anchor(model_a, model_b, winner, rounds, seed, workers)
    anchor_s = time.perf_counter() - t0
    ours = {r.model: r for r in report.ratings}
    diff = max(abs(ours[m].rating - point[i]) for i, m in enumerate(models))
    exact_models, exact = exact_mle(model_a, model_b, winner)
    ours_err = max(abs(ours[m].rating - exact[i]) for i, m in enumerate(exact_models))
    anchor_err = max(abs(point[models.index(m)] - exact[i]) for i, m in enumerate(exact_models))
    width_anchor = float(np.mean(np.quantile(boots, 0.975, axis=0) - np.quantile(boots, 0.025, axis=0)))
    width_ours = float(np.mean([r.upper - r.lower for r in report.ratings]))
    return {"ours_s": ours_s, "anchor_s": anchor_s, "diff": diff, "ours_err": ours_err, "anchor_err": anchor_err,
            "width_ours": width_ours,
            "width_anchor": width_anchor, "ratio": anchor_s / ours_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--battles", type=int, default=1_000_000)
    ap.add_argument("--models", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (one uniform and one skewed log each)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="the anchor's process pool")
    ap.add_argument("--quick", action="store_true", help="100,000 battles, 32 models, 20 rounds")
    args = ap.parse_args()
    if args.quick:
        args.battles, args.models, args.rounds = 100_000, 32, 20
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    print(f"{args.battles:,} battles among {args.models} models, {args.rounds} bootstrap rounds, seeds {seeds}; "
          f"the anchor's bootstrap on {args.workers} process(es)")
    print(f"{'log':>12}  {'ours s':>8}  {'anchor s':>9}  {'ratio':>6}  {'|ours-anchor|':>13}  {'|ours-MLE|':>10}  "
          f"{'|anchor-MLE|':>12}  {'CI width ours/anchor':>20}")
    rate(*simulate(1000, 4, 0, False), rounds=2)  # warm-up: imports (pandas, numpy's linalg) are not timed
    results = []
    for seed in seeds:
        for skewed in (False, True):
            r = compare(args.battles, args.models, args.rounds, seed, skewed, args.workers)
            results.append(r)
            name = f"{'skewed' if skewed else 'uniform'}-{seed}"
            print(f"{name:>12}  {r['ours_s']:8.2f}  {r['anchor_s']:9.2f}  {r['ratio']:6.1f}  {r['diff']:13.4f}  "
                  f"{r['ours_err']:10.4f}  {r['anchor_err']:12.4f}  {r['width_ours']:9.2f} / {r['width_anchor']:.2f}")
    ratios = [r["ratio"] for r in results]
    print(f"ratios: min {min(ratios):.1f}, median {statistics.median(ratios):.1f}, max {max(ratios):.1f}; largest "
          f"point difference {max(r['diff'] for r in results):.4f} Elo from the anchor, "
          f"{max(r['ours_err'] for r in results):.4f} from the exact MLE (the anchor's own: "
          f"{max(r['anchor_err'] for r in results):.4f}; ratings are rounded to 0.01)")
    print(f"ratio: {statistics.median(ratios):.1f}")


if __name__ == "__main__":
    main()
