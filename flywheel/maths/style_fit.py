"""The style-controlled Bradley-Terry fit (``flywheel.maths.style_control``): features, the log's
layout for the fit, and the exact penalised optimum.

Per battle n, with the models' ratings r (log-``base`` units) and the style coefficients beta:

    z_n = alpha * (r[a_n] - r[b_n]) + x_n . beta,   P(A wins) = sigmoid(z_n),   alpha = ln(base)

The objective: the soft-label log-loss (a tie is y = 0.5) plus ``reg / 2`` times the squared
norm of every parameter (ratings and beta), ``REG`` = 0.5 as Chatbot Arena's. It is strictly
convex, so the optimum is unique and finite; at it each connected group's ratings sum to zero.

- ``style_features``: style counts -> (A - B) / (A + B + 1) per element, columns standardised.
- ``design``: the battles oriented so the lower model index plays A (a B-vs-A battle flips its
  outcome and negates its features: the same term of the loss) and sorted by pair, so a pair's
  battles are contiguous and sums over them are ``np.add.reduceat``, not scatters.
- ``fit_style``: the optimum for one or many battle weightings at once: batched Newton on K
  ratings + F coefficients; a step that would raise the loss is halved.
- ``assemble``: a pair-level gradient and Hessian (what every battle of a pair adds up to,
  ``LossSums``) -> the gradient and Hessian over (ratings, beta); shared with the bootstrap
  (``flywheel.maths.style_bootstrap``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

REG = 0.5
LN10 = math.log(10.0)


# -- preprocess ---------------------------------------------------------------------------------
def style_features(style_a: np.ndarray, style_b: np.ndarray) -> np.ndarray:
    """float64[N, F] from the answers' style counts ``style_a``, ``style_b`` (numbers[N, F]):
    (A - B) / (A + B + 1) per element, then each column minus its mean over its standard deviation
    (0 where the column never varies: nothing to control for)."""
    sa, sb = np.asarray(style_a, dtype=np.float64), np.asarray(style_b, dtype=np.float64)
    if sa.shape != sb.shape or sa.ndim != 2:
        raise ValueError(f"style vectors must be two [N, F] arrays (got {sa.shape} and {sb.shape})")
    if len(sa) and (np.min(sa) < 0 or np.min(sb) < 0):
        raise ValueError("style counts must not be negative")
    x = (sa - sb) / (sa + sb + 1.0)
    if not len(x):
        return x
    std = x.std(axis=0)
    varies = std > 1e-12 * np.maximum(1.0, np.abs(x).max(axis=0))
    return np.where(varies, (x - x.mean(axis=0)) / np.where(varies, std, 1.0), 0.0)


@dataclass(frozen=True)
class Design:
    """A battle log ready for the fit: N battles, A the lower model index, sorted by pair.

    ``pair_a``, ``pair_b`` int64[P]: the distinct pairs; ``starts`` int64[P]: where each pair's
    battles begin; ``sizes`` int64[P]: how many; ``x`` float64[N, F] features and ``y``
    float64[N] outcomes (1 A won, 0.5 tie, 0 B won) in that order; ``k`` models."""

    k: int
    pair_a: np.ndarray
    pair_b: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    x: np.ndarray
    y: np.ndarray

    @property
    def n(self) -> int:
        return len(self.y)

    @property
    def f(self) -> int:
        return self.x.shape[1]


def design(k: int, a: np.ndarray, b: np.ndarray, y: np.ndarray, x: np.ndarray) -> Design:
    """The battles (model indices ``a``, ``b`` int[N], outcomes ``y`` float[N], features ``x``
    float[N, F]) as a ``Design``."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    y, x = np.asarray(y, dtype=np.float64), np.asarray(x, dtype=np.float64).reshape(len(y), -1)
    flip = a > b
    lo, hi = np.where(flip, b, a), np.where(flip, a, b)
    y = np.where(flip, 1.0 - y, y)
    x = np.where(flip[:, None], -x, x)
    key = lo * k + hi
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, len(key)])
    return Design(k=k, pair_a=key[starts] // k, pair_b=key[starts] % k, starts=starts, sizes=sizes,
                  x=np.ascontiguousarray(x[order]), y=y[order])


# -- fit ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LossSums:
    """What the battles add up to in R fits, dl/dz and d2l/dz2 being the loss's derivatives in a
    battle's logit: ``g_pair`` [R, P]: the sum of dl/dz over each pair's battles; ``g_beta``
    [R, F]: of dl/dz * x over all battles; ``h_pair`` [R, P]: of d2l/dz2 per pair; ``h_cross``
    [R, P, F]: of d2l/dz2 * x per pair; ``h_beta`` [R, F, F]: of d2l/dz2 * x x^T over all battles."""

    g_pair: np.ndarray
    g_beta: np.ndarray
    h_pair: np.ndarray
    h_cross: np.ndarray
    h_beta: np.ndarray


def assemble(d: Design, theta: np.ndarray, sums: LossSums, alpha: float, reg: float):
    """(gradient float64[R, K + F], Hessian float64[R, K + F, K + F]) of the penalised loss at
    ``theta`` float64[R, K + F] from what the battles add up to (``sums``); ``alpha``, the logit's
    derivative in a rating, is applied here."""
    r, k, f = len(theta), d.k, d.f
    rows = np.arange(r)[:, None] * k
    at_a, at_b = (rows + d.pair_a).ravel(), (rows + d.pair_b).ravel()

    def to_models(values: np.ndarray, width: int) -> np.ndarray:  # [R, P, width] -> A's minus B's, [R, K, width]
        cols = np.arange(width)
        flat = values.reshape(-1)
        size = r * k * width
        got = (np.bincount((at_a[:, None] * width + cols).ravel(), flat, size)
               - np.bincount((at_b[:, None] * width + cols).ravel(), flat, size))
        return got.reshape(r, k, width)

    grad = reg * theta
    grad[:, :k] += alpha * to_models(sums.g_pair, 1)[:, :, 0]
    grad[:, k:] += sums.g_beta
    hess = np.zeros((r, k + f, k + f))
    pv = np.zeros((r, k, k))
    pv[:, d.pair_a, d.pair_b] = sums.h_pair  # the pairs are distinct: plain assignment
    pv += np.swapaxes(pv, 1, 2)
    hess[:, :k, :k] = alpha * alpha * (np.eye(k) * pv.sum(axis=2)[:, :, None] - pv)
    cross = alpha * to_models(sums.h_cross, f)  # [R, K, F]
    hess[:, :k, k:] = cross
    hess[:, k:, :k] = np.swapaxes(cross, 1, 2)
    hess[:, k:, k:] = sums.h_beta
    hess += reg * np.eye(k + f)
    return grad, hess


def _state(d: Design, theta: np.ndarray, w: np.ndarray, alpha: float, reg: float):
    """(z float64[R, N], e = exp(-|z|), penalised loss float64[R]) at ``theta`` float64[R, K + F]."""
    z = alpha * np.repeat(theta[:, d.pair_a] - theta[:, d.pair_b], d.sizes, axis=1)
    z += theta[:, d.k:] @ d.x.T
    e = np.exp(-np.abs(z))
    nll = np.maximum(z, 0.0) + np.log1p(e) - d.y * z  # softplus(z) - y z
    return z, e, (w * nll).sum(axis=1) + 0.5 * reg * (theta * theta).sum(axis=1)


def _newton_step(d: Design, theta: np.ndarray, *, z: np.ndarray, e: np.ndarray, w: np.ndarray, alpha: float,
                 reg: float) -> np.ndarray:
    """The Newton step float64[R, K + F] (to subtract) at ``theta``, from its ``_state`` (``z``, ``e``)
    under the battle weights ``w`` float64[R, N]."""
    p = np.where(z >= 0, 1.0, e) / (1.0 + e)  # sigmoid(z) without overflow
    resid = w * (p - d.y)
    v = w * p * (1.0 - p)
    vx = v[:, :, None] * d.x  # [R, N, F]
    sums = LossSums(g_pair=np.add.reduceat(resid, d.starts, axis=1), g_beta=resid @ d.x,
                    h_pair=np.add.reduceat(v, d.starts, axis=1), h_cross=np.add.reduceat(vx, d.starts, axis=1),
                    h_beta=np.swapaxes(vx, 1, 2) @ d.x)
    grad, hess = assemble(d, theta, sums, alpha, reg)
    return np.linalg.solve(hess, grad[:, :, None])[:, :, 0]


def fit_style(d: Design, weights: np.ndarray | None = None, reg: float = REG, alpha: float = LN10,
              start: np.ndarray | None = None, tol: float = 1e-7, max_iter: int = 100) -> np.ndarray:
    """float64[R, K + F]: the penalised optimum (ratings in log-``base`` units, then the style
    coefficients) for each row of the battle weights ``weights`` float64[R, N] (counts; default
    one row of ones), from ``start`` float64[K + F] or [R, K + F] (default zeros).

    Batched Newton: a step that would raise a row's loss is halved until it does not. A row stops
    after a step no larger than ``tol`` (Newton converges quadratically: about ``tol ** 2`` is left).
    """
    if reg <= 0:
        raise ValueError("reg must be positive (the penalty keeps the fit finite and unique)")
    w = np.ones((1, d.n)) if weights is None else np.atleast_2d(np.asarray(weights, dtype=np.float64))
    theta = np.zeros((len(w), d.k + d.f))
    if start is not None:
        theta[:] = np.asarray(start, dtype=np.float64)
    if d.n == 0 or not len(w):
        return theta * 0.0
    active = np.arange(len(w))
    z, e, loss = _state(d, theta, w, alpha, reg)
    for _ in range(max_iter):
        wa = w[active]
        step = _newton_step(d, theta[active], z=z, e=e, w=wa, alpha=alpha, reg=reg)
        scale = np.ones(len(active))
        for _ in range(60):  # halve the step of each row whose loss would rise
            new = theta[active] - scale[:, None] * step
            nz, ne, nloss = _state(d, new, wa, alpha, reg)
            worse = nloss > loss + 1e-13 * np.abs(loss)
            if not worse.any():
                break
            scale = np.where(worse, scale / 2, scale)
        keep = ~worse  # a row that finds no descent is at its optimum to rounding
        theta[active[keep]] = new[keep]
        going = keep & (np.abs(scale[:, None] * step).max(axis=1) > tol)
        if not going.any():
            break
        active = active[going]
        z, e, loss = nz[going], ne[going], nloss[going]
    return theta
