"""Bradley-Terry + bootstrap: ours vs the classic way, in one run.

Classic (Chatbot Arena's published recipe): a logistic-loss fit over the battle rows with scipy
L-BFGS (ties as half a win each), bootstrapped by resampling rows and refitting each round in a
process pool. Ours: aggregate the log into K x K cell counts once; fit with batched Newton;
every bootstrap round is a multinomial draw over the cells, all rounds fitted together.

    python -m benchmarks.ratings                     # 1,000,000 battles, 64 models, 100 rounds
    python -m benchmarks.ratings --battles 20000 --models 8 --rounds 10

Prints both times, the largest point-estimate difference, and ends with ``ratio: X``
(classic seconds / ours).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from flywheel.ratings import rate

LN10 = math.log(10)
_ROWS: dict[str, np.ndarray] = {}


def simulate(n: int, k: int, seed: int) -> tuple[list[str], list[str], list[str]]:
    rng = np.random.default_rng(seed)
    elo = rng.normal(1000, 200, k)
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k
    p = 1 / (1 + 10 ** ((elo[b] - elo[a]) / 400))
    tie = rng.random(n) < 0.1
    win_a = rng.random(n) < p
    names = np.array([f"model-{i:02d}" for i in range(k)])
    winner = np.where(tie, "tie", np.where(win_a, "model_a", "model_b"))
    return names[a].tolist(), names[b].tolist(), winner.tolist()


def _classic_fit(a: np.ndarray, b: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """L-BFGS over the rows: P(A wins) = sigmoid(ln10 * (beta_a - beta_b)); Elo = 400 beta + 1000."""
    from scipy import sparse
    from scipy.optimize import minimize

    n = len(a)
    rows = np.repeat(np.arange(n), 2)
    cols = np.stack([a, b], 1).ravel()
    vals = np.tile([LN10, -LN10], n)
    x = sparse.csr_matrix((vals, (rows, cols)), shape=(n, k))

    def loss(beta):
        z = x @ beta
        p = 1 / (1 + np.exp(-z))
        eps = 1e-12
        f = -(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)).sum()
        return f, x.T @ (p - y)

    beta = minimize(loss, np.zeros(k), jac=True, method="L-BFGS-B", options={"gtol": 1e-8, "maxiter": 1000}).x
    return 1000 + 400 * (beta - beta.mean())


def _classic_round(seed: int) -> np.ndarray:
    a, b, y, k = _ROWS["a"], _ROWS["b"], _ROWS["y"], int(_ROWS["k"][0])
    idx = np.random.default_rng(seed).integers(0, len(a), len(a))
    return _classic_fit(a[idx], b[idx], y[idx], k)


def classic(model_a, model_b, winner, rounds: int, workers: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    models = sorted(set(model_a) | set(model_b))
    ix = {m: i for i, m in enumerate(models)}
    a = np.array([ix[m] for m in model_a])
    b = np.array([ix[m] for m in model_b])
    y = np.array([{"model_a": 1.0, "model_b": 0.0}.get(w, 0.5) for w in winner])
    point = _classic_fit(a, b, y, len(models))
    _ROWS.update(a=a, b=b, y=y, k=np.array([len(models)]))  # inherited by the forked workers
    with ProcessPoolExecutor(max_workers=workers) as pool:
        boots = np.array(list(pool.map(_classic_round, range(rounds))))
    return point, boots, models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--battles", type=int, default=1_000_000)
    ap.add_argument("--models", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    model_a, model_b, winner = simulate(args.battles, args.models, args.seed)
    print(f"{args.battles:,} battles among {args.models} models, {args.rounds} bootstrap rounds, "
          f"{args.workers} worker process(es) for the classic bootstrap")

    t0 = time.perf_counter()
    report = rate(model_a, model_b, winner, rounds=args.rounds, seed=args.seed)
    ours_s = time.perf_counter() - t0
    print(f"ours:    {ours_s:8.2f} s  (aggregate once, batched Newton, multinomial bootstrap)")

    t0 = time.perf_counter()
    point, boots, models = classic(model_a, model_b, winner, args.rounds, args.workers)
    classic_s = time.perf_counter() - t0
    print(f"classic: {classic_s:8.2f} s  (L-BFGS over rows, refit per round in a process pool)")

    ours = {r.model: r for r in report.ratings}
    diff = max(abs(ours[m].rating - point[i]) for i, m in enumerate(models))
    lo, hi = np.quantile(boots, 0.025, axis=0), np.quantile(boots, 0.975, axis=0)
    width_ours = np.mean([r.upper - r.lower for r in report.ratings])
    width_classic = float(np.mean(hi - lo))
    print(f"largest point-estimate difference: {diff:.4f} Elo")
    print(f"mean 95% CI width: ours {width_ours:.2f} Elo, classic {width_classic:.2f} Elo")
    print(f"ratio: {classic_s / ours_s:.1f}")


if __name__ == "__main__":
    main()
