"""Bradley-Terry + bootstrap: ours vs the method Chatbot Arena runs today, in one run.

The anchor is Chatbot Arena's current published rating method, written here from its
description: the log is aggregated into its unique (model_a, model_b, outcome) rows with counts
(an int32 schedule through ``np.unique``); a weighted logistic loss over those rows is minimised
with scipy's L-BFGS-B (ties as half a win, tolerance 1e-6, at most 100 iterations); the bootstrap
draws every round's row counts from one multinomial over the unique rows and fits the rounds in
a process pool over all cores. It preprocesses the log once here (FastChat's report calls
``compute_bootstrap_bt`` and ``compute_bt``, which preprocess it once each).

Ours (``flywheel.maths.leaderboard.rate``): each column factorized on its own (in parallel for arrow-backed
columns); the log aggregated into cells of unordered pairs and outcomes; a batched Newton fit;
the rounds are multinomial draws over the cells in seeded chunks, drawn and fitted on threads.

Both get the same log as a pandas DataFrame with pandas' default (arrow-backed) string columns,
what ``pd.read_json`` or ``pd.read_parquet`` give a user today; ours is also timed on the same
columns as Python lists (``lists s``). Each time is the fastest of ``--repeats`` runs.

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
import pandas as pd

from flywheel.maths.leaderboard import RatingOptions, rate


# -- the logs -----------------------------------------------------------------------------------
def simulate(n: int, k: int, seed: int, skewed: bool) -> pd.DataFrame:
    """``n`` battles among ``k`` models with true Elo ~ N(1000, 200), 10% ties, as the DataFrame a
    user loads a battle log into today (pandas' default string columns). Skewed: pair (i, j) is
    drawn with weight 1 / (rank of i + 1) / (rank of j + 1)."""
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
    return pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner})


# -- the anchor: Chatbot Arena's current method ---------------------------------------------------
def anchor_preprocess(battles: pd.DataFrame):
    """Unique (a, b, outcome) rows and their counts (an int32 schedule, outcome 2/1/0 = A won /
    tie / B won); models by first appearance."""
    n = len(battles)
    codes, models = pd.factorize(pd.concat([battles["model_a"], battles["model_b"]]))
    schedule = np.full((n, 3), fill_value=1, dtype=np.int32)
    schedule[:, 0], schedule[:, 1] = codes[:n], codes[n:]
    schedule[(battles["winner"] == "model_a").to_numpy(), 2] = 2
    schedule[(battles["winner"] == "model_b").to_numpy(), 2] = 0
    rows, counts = np.unique(schedule, return_counts=True, axis=0)
    return rows[:, :2], rows[:, 2].astype(np.float64) / 2.0, list(models), counts.astype(np.float64)


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


def exact_mle(battles: pd.DataFrame) -> tuple[list[str], np.ndarray]:
    """The anchor's loss minimised to convergence (not timed): the MLE both methods estimate."""
    from scipy.optimize import minimize

    matchups, outcomes, models, weights = anchor_preprocess(battles)
    x = minimize(anchor_loss, np.zeros(len(models)), args=(matchups, outcomes, weights, math.log(10)), jac=True,
                 method="L-BFGS-B", options={"maxiter": 10_000, "gtol": 1e-12, "ftol": 1e-15}).x
    return models, 1000 + 400 * (x - x.mean())


def anchor(battles: pd.DataFrame, rounds: int, seed: int, workers: int):
    """(models, point Elo, bootstrap Elo [rounds, K]) the anchor's way."""
    matchups, outcomes, models, weights = anchor_preprocess(battles)
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
def best_of(repeats: int, fn, *args, **kw):
    """(the result of the first call, the fastest of ``repeats`` calls in seconds)."""
    out, times = None, []
    for i in range(repeats):
        t0 = time.perf_counter()
        got = fn(*args, **kw)
        times.append(time.perf_counter() - t0)
        out = got if i == 0 else out
    return out, min(times)


def compare(n: int, k: int, rounds: int, seed: int, skewed: bool, workers: int, repeats: int) -> dict:
    battles = simulate(n, k, seed, skewed)
    columns = [battles[c] for c in ("model_a", "model_b", "winner")]
    options = RatingOptions(rounds=rounds, seed=seed)
    report, ours_s = best_of(repeats, rate, *columns, options)
    _, lists_s = best_of(repeats, rate, *[c.tolist() for c in columns], options)
    (models, point, boots), anchor_s = best_of(repeats, anchor, battles, rounds, seed, workers)
    ours = {r.model: r for r in report.ratings}
    diff = max(abs(ours[m].rating - point[i]) for i, m in enumerate(models))
    exact_models, exact = exact_mle(battles)
    ours_err = max(abs(ours[m].rating - exact[i]) for i, m in enumerate(exact_models))
    anchor_err = max(abs(point[models.index(m)] - exact[i]) for i, m in enumerate(exact_models))
    width_anchor = float(np.mean(np.quantile(boots, 0.975, axis=0) - np.quantile(boots, 0.025, axis=0)))
    width_ours = float(np.mean([r.upper - r.lower for r in report.ratings]))
    return {"ours_s": ours_s, "lists_s": lists_s, "anchor_s": anchor_s, "diff": diff, "ours_err": ours_err,
            "anchor_err": anchor_err, "width_ours": width_ours, "width_anchor": width_anchor,
            "ratio": anchor_s / ours_s, "lists_ratio": anchor_s / lists_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--battles", type=int, default=1_000_000)
    ap.add_argument("--models", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (one uniform and one skewed log each)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="the anchor's process pool")
    ap.add_argument("--repeats", type=int, default=5, help="each method's time is the fastest of this many runs")
    ap.add_argument("--quick", action="store_true", help="100,000 battles, 32 models, 20 rounds")
    args = ap.parse_args()
    if args.quick:
        args.battles, args.models, args.rounds = 100_000, 32, 20
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    print(f"{args.battles:,} battles among {args.models} models, {args.rounds} bootstrap rounds, seeds {seeds}; "
          f"the anchor's bootstrap on {args.workers} process(es); each time is the fastest of {args.repeats} runs")
    print(f"{'log':>12}  {'ours s':>8}  {'lists s':>8}  {'anchor s':>9}  {'ratio':>6}  {'|ours-anchor|':>13}  "
          f"{'|ours-MLE|':>10}  "
          f"{'|anchor-MLE|':>12}  {'CI width ours/anchor':>20}")
    warm = simulate(1000, 4, 0, False)  # warm-up: imports (pandas, numpy's linalg, scipy) are not timed
    rate(warm["model_a"], warm["model_b"], warm["winner"], RatingOptions(rounds=2))
    anchor(warm, 2, 0, 1)
    results = []
    for seed in seeds:
        for skewed in (False, True):
            r = compare(args.battles, args.models, args.rounds, seed, skewed, args.workers, args.repeats)
            results.append(r)
            name = f"{'skewed' if skewed else 'uniform'}-{seed}"
            print(f"{name:>12}  {r['ours_s']:8.3f}  {r['lists_s']:8.3f}  {r['anchor_s']:9.2f}  {r['ratio']:6.1f}  {r['diff']:13.4f}  "
                  f"{r['ours_err']:10.4f}  {r['anchor_err']:12.4f}  {r['width_ours']:9.2f} / {r['width_anchor']:.2f}")
    ratios = [r["ratio"] for r in results]
    print(f"ratios: min {min(ratios):.1f}, median {statistics.median(ratios):.1f}, max {max(ratios):.1f}; largest "
          f"point difference {max(r['diff'] for r in results):.4f} Elo from the anchor, "
          f"{max(r['ours_err'] for r in results):.4f} from the exact MLE (the anchor's own: "
          f"{max(r['anchor_err'] for r in results):.4f}; ratings are rounded to 0.01); ours on Python lists "
          f"instead of the DataFrame's columns: median ratio {statistics.median(r['lists_ratio'] for r in results):.1f}")
    print(f"ratio: {statistics.median(ratios):.1f}")


if __name__ == "__main__":
    main()
