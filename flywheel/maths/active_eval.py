"""Active evaluation sampling: which pairs the next eval battles go to.

Chatbot Arena samples the next pairs where they most shrink the uncertainty of the ranking. Here
a round of battles is chosen greedily, one battle at a time, by how much it is expected to
shrink the variance of what the leaderboard is unsure of:

- the rating differences of neighbouring ranks whose 95% intervals overlap (their order is
  uncertain), and
- with weight ``width_weight``, every model's own rating variance (the CI widths; ratings
  centred, as a leaderboard's are).

Variances come from the Bradley-Terry fit's curvature (the inverse of its Fisher information, with
``PRIOR`` virtual ties that keep it finite before models meet). One more battle between a and b
adds ``p(1-p)`` of information along ``e_a - e_b``; its effect on the covariance is a rank-one
update, so a round of R battles costs R small matrix products. Pairs with equal ratings teach
the most per battle, lopsided pairs almost nothing, which is where uniform sampling spends much
of its budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from flywheel.maths.ratings import fit_bt

Z95 = 1.959963984540054
PRIOR = 1.0  # virtual ties against a reference at 0, per model (keeps the curvature invertible)


def fit_with_cov(w: np.ndarray, prior: float = PRIOR) -> tuple[np.ndarray, np.ndarray]:
    """Log-strengths and their covariance for the points matrix ``W[K, K]`` (``W[i, j]``: i's
    points against j): the MAP fit with ``prior`` virtual ties and the inverse of its Hessian."""
    theta = fit_bt(w, prior=prior)
    return theta, np.linalg.inv(information(w, theta, prior))


def information(w: np.ndarray, theta: np.ndarray, prior: float = PRIOR) -> np.ndarray:
    n = w + w.T
    p = 1.0 / (1.0 + np.exp(theta[None, :] - theta[:, None]))
    info = n * p * (1 - p)
    s = 1.0 / (1.0 + np.exp(-theta))
    return np.diag(info.sum(axis=1) + prior * s * (1 - s)) - info


def centred(cov: np.ndarray) -> np.ndarray:
    """The covariance of the ratings less their mean (a leaderboard's ratings are centred: the
    common shift, which no battle measures, is not part of a model's uncertainty)."""
    k = len(cov)
    proj = np.eye(k) - 1.0 / k
    return proj @ cov @ proj


def ci_widths(cov: np.ndarray, scale: float = 400.0 / math.log(10)) -> np.ndarray:
    """Each model's 95% interval width on the Elo scale (centred ratings)."""
    return 2 * Z95 * np.sqrt(np.clip(np.diag(centred(cov)), 0, None)) * scale


def uncertain_neighbours(theta: np.ndarray, cov: np.ndarray) -> list[tuple[int, int]]:
    """Neighbouring ranks whose order is uncertain: the 95% interval of their difference holds 0."""
    order = np.argsort(-theta)
    out = []
    for i, j in zip(order[:-1], order[1:]):
        var = cov[i, i] + cov[j, j] - 2 * cov[i, j]
        if abs(theta[i] - theta[j]) < Z95 * math.sqrt(max(var, 0.0)):
            out.append((int(i), int(j)))
    return out


def choose_round(theta: np.ndarray, cov: np.ndarray, candidates: Sequence[tuple[int, int]], size: int,
                 width_weight: float = 3.0, available: dict[tuple[int, int], int] | None = None
                 ) -> list[tuple[int, int]]:
    """``size`` battles (pairs, repeats allowed) from ``candidates``, each the one that most
    lowers the objective (variances of uncertain neighbour differences, plus ``width_weight`` x
    every model's variance) given the battles chosen before it. ``available``: how many more
    battles each pair can have (a pair runs out of prompts); pairs without any are skipped."""
    k = len(theta)
    cov = np.array(cov, dtype=np.float64, copy=True)
    left = dict(available) if available is not None else None
    pairs = [c for c in candidates if left is None or left.get(c, 0) > 0]
    if not pairs:
        return []
    focus = uncertain_neighbours(theta, cov)
    rows = [np.eye(k)[i] - np.eye(k)[j] for i, j in focus]
    target = (np.array(rows) if rows else np.zeros((0, k)))
    a_idx = np.array([a for a, _ in pairs])
    b_idx = np.array([b for _, b in pairs])
    diff = theta[a_idx] - theta[b_idx]
    q = 1.0 / (2.0 + np.exp(diff) + np.exp(-diff))  # p(1-p) of each candidate pair
    chosen: list[tuple[int, int]] = []
    for _ in range(size):
        ce = cov[:, a_idx] - cov[:, b_idx]  # C e for every candidate, [K, P]
        e_ce = ce[a_idx, np.arange(len(pairs))] - ce[b_idx, np.arange(len(pairs))]  # e' C e
        shrink = q / (1.0 + q * e_ce)
        gain = width_weight * ((ce - ce.mean(axis=0)) ** 2).sum(axis=0)  # centred variances
        if len(target):
            gain = gain + ((target @ ce) ** 2).sum(axis=0)
        gain = gain * shrink
        if left is not None:
            gain = np.where([left.get(p, 0) > 0 for p in pairs], gain, -np.inf)
        best = int(np.argmax(gain))
        if not np.isfinite(gain[best]):
            break
        chosen.append(pairs[best])
        if left is not None:
            left[pairs[best]] -= 1
        v = ce[:, best]
        cov -= shrink[best] * np.outer(v, v)
    return chosen
