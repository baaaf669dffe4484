"""A battle log's point fit and its bootstrap, over the pairs that met (``pairs.Pairs``).

- ``fit_log``: cells -> ``PointFit``: the pairs, groups, the prior (``prior=None``: 0 where the
  maximum-likelihood fit exists, else ``ratings.PRIOR``) and the point fit.
- ``bootstrap``: rounds resampled from the log with replacement (``resample.Resampler``, an exact
  multinomial draw over the cells) and refitted (``bt_fit.refit``), warm-started at the point.

The rounds are split into ``BOOT_CHUNKS`` chunks with their own seeds (spawned from ``seed``), run
on a thread per usable core; within a chunk, rounds are drawn one after another from the chunk's
generators (``resample.Streams``) and fitted ``batch_pairs // P`` at a time (P: the pairs that met), so a worker's arrays
stay small (``BATCH_PAIRS`` pair-rounds, 256 KB an array: in cache) whatever the number of models. A
round's fit does not depend on the rounds beside it, so neither the number of cores nor the batch
size changes the result. Meanwhile BLAS runs on one thread (``bt_fit.one_blas_thread``), so the
threads never stack on BLAS threads; numpy's resampling, sums and BLAS release the GIL.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flywheel.maths.bt_fit import fit_point, one_blas_thread, preconditioner, refit
from flywheel.maths.pairs import PairOps, Pairs, Skeleton, components, mle_exists
from flywheel.maths.ratings import PRIOR, usable_cpus
from flywheel.maths.resample import Resampler, Streams

BOOT_CHUNKS = 8  # bootstrap rounds are drawn and fitted in this many seeded chunks, on threads
BATCH_PAIRS = 1 << 15  # rounds fitted together hold about this many (round, pair) entries


@dataclass(frozen=True)
class PointFit:
    """A log's point fit: ``theta`` (float64[K], natural-log strengths, not centred), fitted with
    ``prior``; ``label`` (int64[K]): connected groups from 0, numbered by their first model."""

    pairs: Pairs
    theta: np.ndarray
    prior: float
    label: np.ndarray
    skeleton: Skeleton


def fit_log(k: int, cells: np.ndarray, counts: np.ndarray, prior: float | None = None) -> PointFit:
    """The point fit of a log's cells and counts (``ratings.cell_counts``)."""
    pairs = Pairs.of(k, cells)
    n, w = pairs.stats(counts)
    label = components(pairs, n[0] > 0)
    skeleton = Skeleton.of(pairs, n[0], w[0])
    if prior is None:
        prior = 0.0 if mle_exists(pairs, n, w, skeleton)[0] else PRIOR
    return PointFit(pairs, fit_point(pairs, n[0], w[0], float(prior), label), float(prior), label, skeleton)


def bootstrap(point: PointFit, counts: np.ndarray, rounds: int, seed: int, prior: float | None = None,
              batch_pairs: int = BATCH_PAIRS) -> np.ndarray:
    """Log-strengths of ``rounds`` bootstrap resamples of the log, float64[rounds, K] (not centred).
    ``prior`` as in ``fit_log``, decided per round; ``batch_pairs``: see the module's docstring."""
    pairs = point.pairs
    if rounds <= 0:
        return np.zeros((0, pairs.k))
    n, w = pairs.stats(counts)
    pre = preconditioner(pairs, n, w, point.theta, point.prior, point.label)
    resampler = Resampler(counts, pairs.slot, 3 * pairs.size)
    sizes = [len(c) for c in np.array_split(np.arange(rounds), min(rounds, BOOT_CHUNKS))]
    seeds = np.random.SeedSequence(seed).spawn(len(sizes))
    batch = min(max(1, batch_pairs // max(pairs.size, 1)), max(sizes))
    ops = PairOps(pairs, batch)  # read-only: shared by the threads

    def chunk(c: int) -> np.ndarray:
        streams = Streams.of(seeds[c])
        out = np.empty((sizes[c], pairs.k))
        for first in range(0, sizes[c], batch):
            draws = resampler.draws(streams, min(batch, sizes[c] - first))
            n, w = pairs.slot_stats(draws)
            if prior is None:
                priors = np.where(mle_exists(pairs, n, w, point.skeleton), 0.0, PRIOR)
            else:
                priors = np.full(len(n), float(prior))
            out[first:first + len(n)] = refit(pairs, pre, start=point.theta, n=n, w=w, prior=priors,
                                              chord_prior=point.prior, ops=ops)
        return out

    workers = min(len(sizes), usable_cpus())
    with one_blas_thread():  # a thread per core, each on one BLAS thread
        if workers <= 1:
            return np.concatenate([chunk(c) for c in range(len(sizes))])
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            return np.concatenate(list(pool.map(chunk, range(len(sizes)))))
