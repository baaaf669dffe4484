"""Resampling a battle log with replacement, exactly, at the cost of its cells rather than its battles.

Drawing N battles with replacement from a log of N battles gives cell counts that follow the
multinomial law Multinomial(N, c / N) over its cells (``c``: the log's cell counts). numpy's
``Generator.multinomial`` draws it as one binomial per cell; ``Resampler`` draws the same law
faster, by Poissonization:

1. Every cell's count is drawn as an independent Poisson(c_m): one Poisson draw per cell for cells
   with ``c_m >= BIG`` (constant cost), and for the small cells together a Poisson(sum c) total,
   each of those battles a uniform pick among the small cells' battles (cost per battle, less than a
   Poisson draw for a cell of a few battles).
2. The drawn counts total S, not N. Given S they are Multinomial(S, c / N). If S > N, S - N of the S
   drawn battles are removed, a uniform choice without replacement: the N left are a uniform subset
   of S independent draws, so Multinomial(N, c / N). If S < N, N - S more battles are drawn with
   replacement from the log and added.

The result is exactly the multinomial resample (only the generator's stream differs from
``Generator.multinomial``'s). |S - N| is about sqrt(N), so step 2 costs little.
"""

from __future__ import annotations

import numpy as np

BIG = 8  # cells of at least this many battles get their own Poisson draw


class Resampler:
    """Exact multinomial resamples of cell counts ``counts`` (int[M], total N > 0), laid out at
    ``place`` (int[M], default ``arange(M)``) of an array of ``size`` entries (default M; the other
    entries stay 0)."""

    def __init__(self, counts: np.ndarray, place: np.ndarray | None = None, size: int | None = None):
        counts = np.asarray(counts, dtype=np.int64)
        place = np.arange(len(counts)) if place is None else np.asarray(place, dtype=np.int64)
        self.size, self.total = len(counts) if size is None else size, int(counts.sum())
        self.big = place[counts >= BIG]
        self.rates = counts[counts >= BIG].astype(np.float64)
        dtype = np.int32 if self.size < 2**31 else np.int64
        small = counts < BIG
        self.small_battles = np.repeat(place[small].astype(dtype), counts[small])  # one entry per battle
        laid = np.zeros(self.size, dtype=np.int64)
        laid[place] = counts
        self.cumulative = np.cumsum(laid)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """One resample: int64[size] counts totalling N."""
        x = np.zeros(self.size, dtype=np.int64)
        x[self.big] = rng.poisson(self.rates)
        if len(self.small_battles):
            picks = rng.integers(0, len(self.small_battles), rng.poisson(len(self.small_battles)))
            x += np.bincount(self.small_battles[picks], minlength=self.size)
        extra = int(x.sum()) - self.total
        if extra > 0:
            gone = _distinct(rng, self.total + extra, extra)
            x -= np.bincount(np.searchsorted(np.cumsum(x), gone, side="right"), minlength=self.size)
        elif extra < 0:
            more = rng.integers(0, self.total, -extra)
            x += np.bincount(np.searchsorted(self.cumulative, more, side="right"), minlength=self.size)
        return x


def _distinct(rng: np.random.Generator, population: int, size: int) -> np.ndarray:
    """``size`` distinct integers below ``population``, every such set equally likely: uniform draws,
    duplicates dropped and drawn again (the law of the set is invariant under any permutation of the
    population, hence uniform). Unlike ``Generator.choice(..., replace=False)``, it releases the GIL."""
    chosen = np.unique(rng.integers(0, population, size))
    while len(chosen) < size:
        chosen = np.unique(np.concatenate([chosen, rng.integers(0, population, size - len(chosen))]))
    return chosen
