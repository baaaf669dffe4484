"""Resampling a battle log with replacement, exactly, at the cost of its cells rather than its battles.

Drawing N battles with replacement from a log of N battles gives cell counts that follow the
multinomial law Multinomial(N, c / N) over its cells (``c``: the log's cell counts). numpy's
``Generator.multinomial`` draws it as one binomial per cell; ``Resampler`` draws the same law
faster, by Poissonization:

1. Every cell's count is drawn as an independent Poisson(c_m). A cell of at most ``TABLE_MAX``
   battles inverts its Poisson CDF at one uniform (``PoissonTable``: one table per distinct count,
   a guide table to start the search near the answer); a bigger cell gets numpy's Poisson draw.
2. The drawn counts total S, not N. Given S they are Multinomial(S, c / N). If S > N, S - N of the S
   drawn battles are removed, a uniform choice without replacement: the N left are a uniform subset
   of S independent draws, so Multinomial(N, c / N). If S < N, N - S more battles are drawn with
   replacement from the log and added.

The result is the multinomial resample (only the generator's stream differs from
``Generator.multinomial``'s); the tables hold the Poisson CDFs to float64 rounding, and the mass
beyond ``TAIL`` standard deviations (under 1e-20) folds into their ends. |S - N| is about sqrt(N),
so step 2 costs little.

Rounds drawn together (``draws``) equal the same rounds drawn one at a time: the uniforms, the big
cells' Poisson draws, the corrections and their redraws each come from their own stream
(``Streams``), consumed in round order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TABLE_MAX = 1024  # cells of at most this many battles draw their Poisson count from a table
TAIL = 10.0  # a table spans the mean +- this many standard deviations (plus a margin above)
STEPS = 4  # a draw not found within this many steps from its guide entry is found by bisection


@dataclass(frozen=True)
class Streams:
    """The four generators one sequence of rounds draws from (``of``: spawned from one seed)."""

    uniform: np.random.Generator
    poisson: np.random.Generator
    correct: np.random.Generator
    again: np.random.Generator

    @classmethod
    def of(cls, seed: int | np.random.SeedSequence) -> Streams:
        seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        return cls(*(np.random.default_rng(s) for s in seq.spawn(4)))


class PoissonTable:
    """Poisson(m) draws for integer means ``means`` (int[C], each 1..TABLE_MAX) by inverting the CDF.

    One row per distinct mean: the CDF over k = lo..lo + W - 1 (lo: the mean minus ``TAIL``
    standard deviations, at least 0; 1.0 from the row's last value on), and a guide of W entries
    per row: entry j is the first k with h(CDF(k)) >= j, h(v) = min(floor(v * W), W - 1). h is
    monotone in floating point too, so the answer at a uniform u, the first k with CDF(k) >= u, is
    never before the guide's entry h(u); the search steps on from there (a step or two; after
    ``STEPS``, as in a guide entry that covers a thin tail, it bisects to the row's end)."""

    def __init__(self, means: np.ndarray):
        values, row = np.unique(np.asarray(means, dtype=np.int64), return_inverse=True)
        lam = values.astype(np.float64)
        spread = TAIL * np.sqrt(lam)
        lo = np.maximum(0, np.floor(lam - spread)).astype(np.int64)
        hi = np.ceil(lam + spread + 3 * TAIL).astype(np.int64)
        self.width = width = int((hi - lo).max()) + 1
        k = lo[:, None] + np.arange(width)
        log_fact = np.array([math.lgamma(i + 1.0) for i in range(int(k.max()) + 1)])
        pmf = np.exp(k * np.log(lam)[:, None] - lam[:, None] - log_fact[k])
        pmf[k > hi[:, None]] = 0.0
        cdf = np.cumsum(pmf, axis=1)
        cdf /= cdf[:, -1:]  # the row's last value (and the padding) exactly 1.0
        self.cdf, self.k = cdf.ravel(), k.ravel()
        start = np.arange(len(values)) * width
        steps = np.minimum((cdf * width).astype(np.int64), width - 1) + start[:, None]
        self.guide = np.searchsorted(steps.ravel(), np.arange(len(values) * width))
        self.start = start[row]  # each cell's row, as its first flat index

    def draw(self, u: np.ndarray) -> np.ndarray:
        """The Poisson draws at uniforms ``u`` (float64[R, C] in [0, 1), column c for mean c): int64[R, C]."""
        w, cells = self.width, len(self.start)
        at = (u * w).astype(np.int64)
        np.minimum(at, w - 1, out=at)
        at += self.start
        at = self.guide[at.ravel()]
        u = u.ravel()
        ahead = np.flatnonzero(self.cdf[at] < u)
        for _ in range(STEPS):  # nearly every draw is settled within a step or two
            if not ahead.size:
                break
            at[ahead] += 1
            ahead = ahead[self.cdf[at[ahead]] < u[ahead]]
        if ahead.size:  # a guide entry in a thin tail: bisect between there and the row's end
            lo, hi = at[ahead] + 1, self.start[ahead % cells] + w - 1
            while True:
                going = np.flatnonzero(lo < hi)
                if not going.size:
                    break
                mid = (lo[going] + hi[going]) // 2
                low = self.cdf[mid] < u[ahead[going]]
                lo[going[low]], hi[going[~low]] = mid[low] + 1, mid[~low]
            at[ahead] = lo
        return self.k[at].reshape(-1, cells)


class Resampler:
    """Exact multinomial resamples of cell counts ``counts`` (int[M], total N > 0), laid out at
    ``place`` (int[M], default ``arange(M)``) of an array of ``size`` entries (default M; the other
    entries stay 0)."""

    def __init__(self, counts: np.ndarray, place: np.ndarray | None = None, size: int | None = None):
        counts = np.asarray(counts, dtype=np.int64)
        place = np.arange(len(counts)) if place is None else np.asarray(place, dtype=np.int64)
        self.size, self.total = len(counts) if size is None else size, int(counts.sum())
        tabled = (counts > 0) & (counts <= TABLE_MAX)
        self.tabled, self.table = place[tabled], PoissonTable(counts[tabled]) if tabled.any() else None
        self.big = place[counts > TABLE_MAX]
        self.rates = counts[counts > TABLE_MAX].astype(np.float64)
        laid = np.zeros(self.size, dtype=np.int64)
        laid[place] = counts
        self.cumulative = np.cumsum(laid)

    def draws(self, streams: Streams, rounds: int) -> np.ndarray:
        """``rounds`` resamples: int64[rounds, size], each row totalling N."""
        x = np.zeros((rounds, self.size), dtype=np.int64)
        if self.table is not None:
            x[:, self.tabled] = self.table.draw(streams.uniform.random((rounds, len(self.tabled))))
        if len(self.big):
            x[:, self.big] = streams.poisson.poisson(self.rates, (rounds, len(self.big)))
        self._correct(streams, x)
        return x

    def draw(self, streams: Streams) -> np.ndarray:
        """One resample: int64[size] counts totalling N."""
        return self.draws(streams, 1)[0]

    def _correct(self, streams: Streams, x: np.ndarray) -> None:
        """Bring every round (row) of Poisson counts ``x`` to N battles, in place (step 2).

        A round of S battles takes |S - N| uniforms from ``streams.correct``, in round order: the
        battle to add (S < N: floor(u N), the log's battles in cell order) or the drawn battle to
        remove (S > N: floor(u S), the round's battles in cell order; one drawn twice is drawn again
        from ``streams.again``, round by round). Reading an integer below M off a float64 uniform
        is uniform to within M / 2^53."""
        n = self.total
        drawn = x.sum(axis=1)
        extra = drawn - n
        row = np.repeat(np.arange(len(x)), np.abs(extra))
        u = streams.correct.random(len(row))
        short = extra[row] < 0
        if short.any():  # sorted by round, then by battle: the search runs through each round's picks in order
            picks = np.sort(row[short] * n + (u[short] * n).astype(np.int64))
            more = np.searchsorted(self.cumulative, picks % n, side="right")
            np.add.at(x, (picks // n, more), 1)
        long_rows = np.flatnonzero(extra > 0)
        if len(long_rows):  # positions in the long rounds' battles laid end to end
            first = np.cumsum(drawn[long_rows]) - drawn[long_rows]
            which = np.searchsorted(long_rows, row[~short])
            at = first[which] + (u[~short] * drawn[row[~short]]).astype(np.int64)
            at = _distinct_per_round(streams.again, at, which, first, drawn[long_rows])
            cells = np.searchsorted(np.cumsum(x[long_rows]), at, side="right")
            np.subtract.at(x, (long_rows[cells // self.size], cells % self.size), 1)


def _distinct_per_round(rng: np.random.Generator, at: np.ndarray, rounds: np.ndarray, first: np.ndarray,
                        drawn: np.ndarray) -> np.ndarray:
    """The positions ``at`` (position i in round ``rounds[i]``'s range first[r] .. first[r] + drawn[r]
    - 1), with every position drawn twice in a round replaced by redraws from ``rng``, round by
    round, until the round's positions are distinct: sorted, as many as given. Uniform draws with
    duplicates dropped and drawn again make a set whose law is invariant under any permutation of
    the round's positions, hence uniform over the sets of its size."""
    at = np.sort(at)
    twice = np.flatnonzero(at[1:] == at[:-1]) + 1
    if not len(twice):
        return at
    keep = np.ones(len(at), dtype=bool)
    keep[twice] = False
    kept = at[keep]
    want = np.bincount(rounds, minlength=len(first))
    parts, done = [], 0
    for r in np.unique(np.searchsorted(first, at[twice], side="right") - 1):  # the rounds short of positions
        lo, hi = np.searchsorted(kept, [first[r], first[r] + drawn[r]])
        mine = kept[lo:hi]
        while len(mine) < want[r]:
            again = first[r] + (rng.random(want[r] - len(mine)) * drawn[r]).astype(np.int64)
            mine = np.sort(np.concatenate([mine, again]))
            mine = mine[np.r_[True, mine[1:] != mine[:-1]]]
        parts += [kept[done:lo], mine]
        done = hi
    return np.concatenate(parts + [kept[done:]])
