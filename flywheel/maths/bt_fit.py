"""Bradley-Terry fits over the pairs that met (``pairs.Pairs``): the point fit and the refits of
bootstrap rounds, with the costs that let them scale to thousands of models.

- ``fit_point``: one log, Newton's method with dense solves of the K x K Hessian (assembled from
  the pairs in O(P)); the same steps as ``ratings.fit_bt``. It runs once, on the calling thread.
- ``preconditioner``: the inverse of the point fit's Hessian, computed once (K^3).
- Both solve on one BLAS thread (``one_blas_thread``).
- ``refit``: many fits (bootstrap rounds) warm-started at the point. A round is a small
  perturbation of the log, so its Hessian is close to the point's: each round first takes chord
  steps ``theta += M^-1 grad(theta)`` with that one shared inverse (O(P + K^2) a step, no
  factorisation per round); a round whose steps stop shrinking fast (by half or more a step), or
  whose prior differs from the point's, is finished by Newton's method with the Newton system
  solved by conjugate gradients preconditioned by the same inverse (Hessian-vector products in
  O(P)). Newton stops after a step no larger than ``tol``; the chord, also where its steps' geometric
  decay puts what is left below ``tol``. Each round stops on its own, so a round's
  result does not depend on which rounds are fitted beside it. ``refit``'s only BLAS call is the
  product with the inverse; ``bootstrap`` runs rounds on threads with BLAS held to one thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from flywheel.maths.pairs import PairOps, Pairs

CHORD_STEPS = 30  # at most this many chord steps a round before Newton takes over
CG_STEPS = 50  # conjugate-gradient steps per Newton step, at most
CG_TOL = 1e-3  # relative residual (in the preconditioner's norm) a Newton system is solved to


_BLAS = threading.Lock()
_CONTROLLER = None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS and LAPACK on one thread meanwhile (``threadpoolctl``; the limit is process-wide, so
    callers take turns). A K x K solve needs no more for the sizes rated here, and a busy machine
    makes multi-threaded BLAS spin: on a shared 2-core machine a 256 x 256 solve took 140 ms on two
    BLAS threads against 0.6 ms on one."""
    global _CONTROLLER
    with _BLAS:
        if _CONTROLLER is None:
            from threadpoolctl import ThreadpoolController

            _CONTROLLER = ThreadpoolController()  # the libraries numpy has loaded, found once
        with _CONTROLLER.limit(limits=1, user_api="blas"):
            yield


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _gauge(label: np.ndarray) -> np.ndarray:
    """float64[K, K]: 1/K where two models share a group. Added (times the Hessian's mean diagonal)
    to a fit without a prior, whose likelihood is flat along each group's common shift, it makes
    the Newton system regular without changing the fit (as in ``ratings.fit_bt``)."""
    label = np.asarray(label)
    return (label[:, None] == label[None, :]) / len(label)


def fit_point(pairs: Pairs, n: np.ndarray, w: np.ndarray, prior: float, label: np.ndarray,
              tol: float = 1e-5, max_iter: int = 100) -> np.ndarray:
    """Log-strengths float64[K] of one log (``n``, ``w``: float64[P]) with ``prior`` virtual ties
    against a reference at 0: clipped Newton steps from zeros, stopping after a step no larger than
    ``tol`` (``ratings.fit_bt``'s rule). ``label`` (int[K]): the log's groups, for the gauge."""
    n, w = n.reshape(1, -1), w.reshape(1, -1)
    ops = PairOps(pairs, 1)
    theta = np.zeros((1, pairs.k))
    base = ops.scatter(w)
    priors = np.array([float(prior)])
    gauge = _gauge(label) if prior == 0 else None
    with one_blas_thread():
        for _ in range(max_iter):
            g, p = ops.gradient(theta, n, priors, base)
            hess = _hessian(pairs, n[0] * p[0] * (1 - p[0]), theta[0], prior, gauge)
            step = np.linalg.solve(hess, g[0])
            biggest = float(np.abs(step).max())
            theta[0] += step * min(1.0, 2.0 / max(biggest, 1e-300))
            if biggest < tol:
                break
    return theta[0]


def _hessian(pairs: Pairs, h: np.ndarray, theta: np.ndarray, prior: float, gauge: np.ndarray | None) -> np.ndarray:
    """The negated Hessian, with the gauge, and a ridge of 1e-10 of its mean diagonal: where a fit
    without a prior runs off (no MLE), pairs won with certainty weigh nothing and would leave it
    singular. A ridge changes the steps, not the point they converge to."""
    s = _sigmoid(theta)
    hess = pairs.hessian(h, prior * s * (1 - s))
    scale = hess.diagonal().mean()
    if gauge is not None:
        hess += gauge * scale
    hess[np.diag_indices(pairs.k)] += 1e-10 * scale + 1e-300
    return hess


def preconditioner(pairs: Pairs, n: np.ndarray, w: np.ndarray, theta: np.ndarray, prior: float,
                   label: np.ndarray) -> Preconditioner:
    """The inverse of the negated Hessian at the point fit ``theta`` (with the gauge where ``prior``
    is 0), symmetric, and that Hessian's diagonal: the ``M^-1`` of ``refit``."""
    p = PairOps(pairs, 1).probs(theta.reshape(1, -1))[0]
    hess = _hessian(pairs, n.reshape(-1) * p * (1 - p), theta, prior, _gauge(label) if prior == 0 else None)
    with one_blas_thread():
        inv = np.linalg.inv(hess)
    return Preconditioner((inv + inv.T) / 2, hess.diagonal().copy())


@dataclass(frozen=True)
class Preconditioner:
    """``inv``: the inverse of the point fit's negated Hessian (float64[K, K], symmetric); ``diag``:
    that Hessian's diagonal (float64[K]). Newton steps rescale ``inv`` by each fit's own diagonal
    (``sqrt(diag / own)`` on both sides), which follows a model whose curvature moved far (one that
    ran off, or played little)."""

    inv: np.ndarray
    diag: np.ndarray


def _times(minv: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x @ minv`` (``minv`` symmetric), one row at a time, so that a row's result does not depend on
    the rows beside it (a BLAS matrix product sums in an order that depends on its shape)."""
    return np.matmul(x[:, None, :], minv)[:, 0, :]


def refit(pairs: Pairs, pre: Preconditioner, start: np.ndarray, n: np.ndarray, w: np.ndarray, prior: np.ndarray,
          chord_prior: float, tol: float = 1e-5, max_iter: int = 100, ops: PairOps | None = None) -> np.ndarray:
    """Log-strengths float64[R, K] of ``R`` fits (``n``, ``w``: float64[R, P]; ``prior``: float64[R])
    from ``start`` (float64[K]). Fits whose prior is ``chord_prior`` (the one ``pre`` was made
    with) take chord steps first; the others, and those the chord is slow on, Newton steps.
    ``ops``: the pairs' ``PairOps`` for at least R rows, made once for many calls (else here)."""
    theta = np.repeat(np.asarray(start, dtype=np.float64)[None], len(n), axis=0)
    ops = PairOps(pairs, len(n)) if ops is None else ops
    fits = _Fits(ops=ops, pre=pre, theta=theta, n=n, prior=np.asarray(prior, dtype=np.float64), base=ops.scatter(w),
                 tol=tol)
    slow = fits.chord(np.flatnonzero(prior == chord_prior))
    fits.newton(np.union1d(np.flatnonzero(prior != chord_prior), slow), max_iter)
    return theta


class _Fits:
    """The rounds of one ``refit``; each method fits a subset of rows in place, dropping a row from
    its working arrays as soon as that row is done."""

    def __init__(self, *, ops: PairOps, pre: Preconditioner, theta: np.ndarray, n: np.ndarray, prior: np.ndarray,
                 base: np.ndarray, tol: float) -> None:
        self.ops, self.pre, self.theta, self.tol = ops, pre, theta, tol
        self.n, self.prior, self.base = n, prior, base

    def _rows(self, rows):
        return self.theta[rows], self.n[rows], self.prior[rows], self.base[rows]

    def chord(self, rows: np.ndarray) -> np.ndarray:
        """Chord steps on ``rows`` until a step below ``tol``, or until the steps' geometric decay says
        the distance left to the fixed point is below ``tol``; returns the rows left to Newton (a step
        shrank by less than half, or ``CHORD_STEPS`` ran out)."""
        slow = []
        th, n, pr, base = self._rows(rows)
        prev = np.full(len(rows), np.inf)
        for step in range(CHORD_STEPS):
            if not len(rows):
                break
            g, _ = self.ops.gradient(th, n, pr, base)
            d = _times(self.pre.inv, g)
            biggest = np.abs(d).max(axis=1)
            th += d * np.minimum(1.0, 2.0 / np.maximum(biggest, 1e-300))[:, None]
            rate = biggest / prev  # steps shrink geometrically: what is left is at most step * rate / (1 - rate)
            done = (biggest < self.tol) | ((step >= 1) & (rate < 0.5) & (biggest * rate < self.tol * (1 - rate)))
            lag = ~done & (step >= 1) & (rate > 0.5)
            prev = biggest
            if (done | lag).any():
                self.theta[rows[done | lag]] = th[done | lag]
                slow.append(rows[lag])
                keep = ~(done | lag)
                rows, th, n, pr, base, prev = rows[keep], th[keep], n[keep], pr[keep], base[keep], prev[keep]
        self.theta[rows] = th
        slow.append(rows)
        return np.concatenate(slow).astype(np.int64)

    def newton(self, rows: np.ndarray, max_iter: int) -> None:
        """Clipped Newton steps on ``rows``, each Newton system solved by preconditioned CG."""
        th, n, pr, base = self._rows(rows)
        for _ in range(max_iter):
            if not len(rows):
                break
            g, p = self.ops.gradient(th, n, pr, base)
            h = n * p * (1 - p)
            d = self._cg(h, self._curv(th, pr), g, self._scale(h, th, pr))
            biggest = np.abs(d).max(axis=1)
            th += d * np.minimum(1.0, 2.0 / np.maximum(biggest, 1e-300))[:, None]
            done = biggest < self.tol
            if done.any():
                self.theta[rows[done]] = th[done]
                keep = ~done
                rows, th, n, pr, base = rows[keep], th[keep], n[keep], pr[keep], base[keep]
        self.theta[rows] = th

    @staticmethod
    def _curv(th: np.ndarray, prior: np.ndarray) -> np.ndarray:
        s = _sigmoid(th)
        return prior[:, None] * s * (1 - s)

    def _scale(self, h: np.ndarray, th: np.ndarray, prior: np.ndarray) -> np.ndarray:
        """``sqrt(diag / own)`` per fit and model, 0 where a model has no curvature in a fit."""
        own = self.ops.scatter(h, sign=1.0) + self._curv(th, prior)
        return np.sqrt(self.pre.diag / np.where(own > 0, own, 1.0)) * (own > 0)

    def _cg(self, h: np.ndarray, curv: np.ndarray, g: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """Solves ``H x = g`` per row by conjugate gradients (``H``: pair weights ``h``, diagonal
        ``curv``) preconditioned by ``scale * inv * scale``, to ``CG_TOL`` or ``CG_STEPS``. A model
        with no battles and no prior in a fit (``scale`` 0) does not move."""
        x = np.zeros_like(g)
        r = g.copy()
        z = scale * _times(self.pre.inv, scale * r)
        direction = z.copy()
        rz = (r * z).sum(axis=1)
        goal = CG_TOL ** 2 * rz
        live = rz > 0
        for _ in range(CG_STEPS):
            if not live.any():
                break
            q = self.ops.hess_times(h, curv, direction)
            curvature = (direction * q).sum(axis=1)
            live &= curvature > 0
            alpha = np.where(live, rz / np.where(live, curvature, 1.0), 0.0)
            x += alpha[:, None] * direction
            r -= alpha[:, None] * q
            z = scale * _times(self.pre.inv, scale * r)
            rz_next = (r * z).sum(axis=1)
            live &= rz_next > goal
            beta = np.where(live, rz_next / np.where(rz > 0, rz, 1.0), 0.0)
            direction = z + beta[:, None] * direction
            rz = rz_next
        return x
