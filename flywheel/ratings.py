"""Bradley-Terry ratings on the Elo scale, with bootstrap confidence intervals.

Layered like the classic arena code (preprocess -> fit -> compute -> bootstrap), but the battle
log is aggregated once into cell counts, so the fit and every bootstrap round cost O(K^2)
regardless of the number of battles, and all bootstrap rounds are fitted together:

- ``encode``: battle rows -> model index arrays and outcomes (1 = A won, 0 = B won, 0.5 = tie).
- ``cell_counts``: the distinct (a, b, outcome) cells and how often each occurs.
- ``points_matrix``: cells -> ``W[..., i, j]``, the points model i scored against model j
  (a tie gives half a point to each side).
- ``fit_bt``: maximum likelihood log-strengths for one or many ``W`` at once (batched Newton).
- ``bootstrap``: resampling battles with replacement is a multinomial draw over the cells.
- ``leaderboard``: everything above, to typed ``Rating`` rows.

Scale: ``rating = init + scale * log_base(strength)``, strengths centred so the mean rating is
``init`` (base 10, scale 400, init 1000 by default, as Chatbot Arena does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

OUTCOME = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}


@dataclass(frozen=True)
class Rating:
    model: str
    rating: float
    lower: float
    upper: float
    rank: int
    battles: int
    wins: int
    losses: int
    ties: int

    @property
    def win_rate(self) -> float:
        return self.wins / self.battles if self.battles else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "win_rate": round(self.win_rate, 4)}


def encode(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str]
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Battle columns -> (models, a_idx int64[N], b_idx int64[N], outcome float64[N])."""
    models = sorted(set(model_a) | set(model_b))
    index = {m: i for i, m in enumerate(models)}
    a = np.fromiter((index[m] for m in model_a), dtype=np.int64, count=len(model_a))
    b = np.fromiter((index[m] for m in model_b), dtype=np.int64, count=len(model_b))
    try:
        y = np.fromiter((OUTCOME[w] for w in winner), dtype=np.float64, count=len(winner))
    except KeyError as e:
        raise ValueError(f"unknown winner {e.args[0]!r}; expected one of {list(OUTCOME)}") from None
    return models, a, b, y


def cell_counts(k: int, a: np.ndarray, b: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct cells ``(a * k + b) * 3 + outcome_code`` (int64[M]) and their counts (int64[M])."""
    code = np.rint(y * 2).astype(np.int64)  # 0 = B won, 1 = tie, 2 = A won
    keys = (a * k + b) * 3 + code
    cells, counts = np.unique(keys, return_counts=True)
    return cells, counts


def points_matrix(k: int, cells: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``W[..., i, j]``: points of i against j. ``counts`` is int[M] or int[R, M] (R rounds)."""
    code = cells % 3
    pair = cells // 3
    a, b = pair // k, pair % k
    counts = np.asarray(counts, dtype=np.float64)
    lead = counts.shape[:-1]
    w = np.zeros(lead + (k * k,), dtype=np.float64)
    pts_a = code / 2.0  # A's points per battle in this cell
    flat = counts.reshape(-1, counts.shape[-1])
    wf = w.reshape(-1, k * k)
    for r in range(flat.shape[0]):
        wf[r] = np.bincount(a * k + b, weights=flat[r] * pts_a, minlength=k * k)
        wf[r] += np.bincount(b * k + a, weights=flat[r] * (1 - pts_a), minlength=k * k)
    return w.reshape(lead + (k, k))


def fit_bt(w: np.ndarray, ridge: float = 1e-6, max_iter: int = 100, tol: float = 1e-10) -> np.ndarray:
    """Maximum likelihood log-strengths (natural log) for ``W[..., K, K]``, centred to mean 0.

    Batched Newton steps on the concave log-likelihood; each step is clipped so that models that
    never lose (or never win) move steadily instead of diverging, and a tiny ridge keeps those
    estimates finite. Models with no battles stay at 0.
    """
    w = np.asarray(w, dtype=np.float64)
    lead, k = w.shape[:-2], w.shape[-1]
    w = w.reshape((-1, k, k))
    n = w + np.swapaxes(w, 1, 2)
    theta = np.zeros(w.shape[:2])
    wins = w.sum(axis=2)
    eye = np.eye(k)
    for _ in range(max_iter):
        diff = theta[:, :, None] - theta[:, None, :]
        p = 1.0 / (1.0 + np.exp(-diff))
        grad = wins - (n * p).sum(axis=2) - ridge * theta
        info = n * p * (1 - p)
        hess = info - eye * (info.sum(axis=2)[:, :, None] + ridge)  # negative definite
        step = np.linalg.solve(hess, -grad[:, :, None])[:, :, 0]
        biggest = np.abs(step).max(axis=1, keepdims=True)
        step = step * np.minimum(1.0, 2.0 / np.maximum(biggest, 1e-300))
        theta = theta + step
        if biggest.max() < tol:
            break
    theta = theta - theta.mean(axis=1, keepdims=True)
    return theta.reshape(lead + (k,))


def to_elo(theta: np.ndarray, scale: float = 400.0, base: float = 10.0, init: float = 1000.0) -> np.ndarray:
    return init + scale * theta / math.log(base)


def bootstrap(
    k: int, cells: np.ndarray, counts: np.ndarray, rounds: int, seed: int, ridge: float = 1e-6
) -> np.ndarray:
    """Log-strengths of ``rounds`` bootstrap resamples of the battles, float64[rounds, K]."""
    if rounds <= 0:
        return np.zeros((0, k))
    rng = np.random.default_rng(seed)
    total = int(counts.sum())
    draws = rng.multinomial(total, counts / total, size=rounds)
    return fit_bt(points_matrix(k, cells, draws), ridge=ridge)


def online_elo(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str], k_factor: float = 4.0,
    scale: float = 400.0, base: float = 10.0, init: float = 1000.0,
) -> dict[str, float]:
    """Sequential Elo updates in log order (for live progress; order-dependent by design)."""
    r: dict[str, float] = {}
    for ma, mb, w in zip(model_a, model_b, winner):
        ra, rb = r.setdefault(ma, init), r.setdefault(mb, init)
        ea = 1.0 / (1.0 + base ** ((rb - ra) / scale))
        sa = OUTCOME[w]
        r[ma] = ra + k_factor * (sa - ea)
        r[mb] = rb + k_factor * ((1 - sa) - (1 - ea))
    return r


def leaderboard(
    model_a: Sequence[str],
    model_b: Sequence[str],
    winner: Sequence[str],
    rounds: int = 100,
    ci: float = 0.95,
    seed: int = 0,
    scale: float = 400.0,
    base: float = 10.0,
    init: float = 1000.0,
) -> list[Rating]:
    """Ratings with bootstrap CIs, best first. Rank = 1 + models whose lower bound beats our upper."""
    if len(model_a) == 0:
        return []
    models, a, b, y = encode(model_a, model_b, winner)
    k = len(models)
    cells, counts = cell_counts(k, a, b, y)
    point = to_elo(fit_bt(points_matrix(k, cells, counts)), scale, base, init)
    if rounds > 0:
        boots = to_elo(bootstrap(k, cells, counts, rounds, seed), scale, base, init)
        lower = np.quantile(boots, (1 - ci) / 2, axis=0)
        upper = np.quantile(boots, 1 - (1 - ci) / 2, axis=0)
    else:
        lower, upper = point.copy(), point.copy()
    battles = np.bincount(a, minlength=k) + np.bincount(b, minlength=k)
    wins = np.bincount(a, weights=y == 1.0, minlength=k) + np.bincount(b, weights=y == 0.0, minlength=k)
    ties = np.bincount(a, weights=y == 0.5, minlength=k) + np.bincount(b, weights=y == 0.5, minlength=k)
    rows = []
    for i, m in enumerate(models):
        rank = 1 + int(np.sum(lower > upper[i]))
        rows.append(
            Rating(
                model=m,
                rating=round(float(point[i]), 2),
                lower=round(float(min(lower[i], point[i])), 2),
                upper=round(float(max(upper[i], point[i])), 2),
                rank=rank,
                battles=int(battles[i]),
                wins=int(wins[i]),
                losses=int(battles[i] - wins[i] - ties[i]),
                ties=int(ties[i]),
            )
        )
    return sorted(rows, key=lambda r: (-r.rating, r.model))
