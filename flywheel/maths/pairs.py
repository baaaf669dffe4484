"""The pairs of models that met: the Bradley-Terry representation that scales with the log.

A log of K models is held as the P pairs that met (``i < j``), not as K x K matrices, so what a
fit needs costs O(P) per fit (plus K exponentials): P is at most the number of distinct pairs in
the log, often far below K^2 / 2. Arrays carry fits (the point fit, or bootstrap rounds) on their
first axis:

- ``Pairs.of``: the cells of ``ratings.cell_counts`` -> the pairs and each cell's place among them.
- ``Pairs.stats``: cell counts ``int[R, M]`` -> battles ``n`` and points of ``i`` ``w``, float64[R, P].
- ``PairOps``: the log-likelihood's gradient, and the product of its (negated) Hessian with
  vectors, for up to ``rows`` fits at once.
- ``components``, ``two_way_forest`` and ``mle_exists``: the connected groups, and Zermelo's
  condition (within each group every model reaches every other through points scored), checked
  along the pairs in O(P) rather than by a K x K transitive closure.

Nothing here calls BLAS, and the sums release the GIL: bootstrap threads run side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pairs:
    """The ``P`` pairs of models that met, ``i[q] < j[q]`` (int64[P], sorted by ``i * k + j``), and
    ``slot``: cell ``m`` of the log's cells sits at ``slot[m] = q * 3 + outcome code`` of a
    ``[P, 3]`` layout (code 2: ``i`` won, 1: tie, 0: ``j`` won)."""

    k: int
    i: np.ndarray
    j: np.ndarray
    slot: np.ndarray

    @classmethod
    def of(cls, k: int, cells: np.ndarray) -> Pairs:
        """The pairs of sorted cells ``(i * k + j) * 3 + code`` (``ratings.cell_counts``)."""
        cells = np.asarray(cells, dtype=np.int64)
        pair = cells // 3
        new = np.ones(len(pair), dtype=bool)
        new[1:] = pair[1:] != pair[:-1]
        first = pair[new]
        return cls(k, first // k, first % k, (np.cumsum(new) - 1) * 3 + cells % 3)

    @property
    def size(self) -> int:
        return len(self.i)

    def stats(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(battles ``n``, points of ``i`` against ``j`` ``w``), float64[R, P] each, of cell counts
        ``int[M]`` or ``int[R, M]`` (a tie is half a point to each side)."""
        counts = np.asarray(counts)
        counts = counts.reshape(-1, counts.shape[-1])
        laid = np.zeros((len(counts), 3 * self.size), dtype=counts.dtype)
        laid[:, self.slot] = counts
        return self.slot_stats(laid)

    def slot_stats(self, laid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``stats`` of counts already laid out by ``slot`` (int[R, 3P])."""
        c3 = laid.reshape(len(laid), self.size, 3)
        ties = c3[:, :, 1].astype(np.float64)
        n = ties + c3[:, :, 0]
        n += c3[:, :, 2]
        ties *= 0.5
        ties += c3[:, :, 2]
        return n, ties

    def hessian(self, h: np.ndarray, curv: np.ndarray) -> np.ndarray:
        """float64[K, K]: the negated Hessian of one fit, pair weights ``h`` (float64[P]) and diagonal
        ``curv`` (float64[K]) from a prior."""
        k = self.k
        out = np.zeros((k, k))
        out[self.i, self.j] = -h
        out[self.j, self.i] = -h
        out[np.arange(k), np.arange(k)] = np.bincount(self.i, h, k) + np.bincount(self.j, h, k) + curv
        return out


class PairOps:
    """The likelihood's sums over the pairs for up to ``rows`` fits at once (arrays [r, P] and
    [r, K] with r <= rows): flat indices are made once and their prefixes serve fewer rows. A sum
    over each model's pairs is a segment sum (``np.add.reduceat``) over the pairs in ``i`` order
    (as they are stored) and over them in ``j`` order (one gather)."""

    def __init__(self, pairs: Pairs, rows: int):
        self.pairs, self.k, self._rows = pairs, pairs.k, rows
        size, k = pairs.size, pairs.k
        off = np.arange(rows)[:, None]
        self._i, self._j = (off * k + pairs.i).ravel(), (off * k + pairs.j).ravel()
        by_j = np.argsort(pairs.j, kind="stable")
        self._by_j = (off * size + by_j).ravel()
        self._seg_i, self._to_i = self._segments(pairs.i, off, size, k)
        self._seg_j, self._to_j = self._segments(pairs.j[by_j], off, size, k)

    @staticmethod
    def _segments(sorted_models: np.ndarray, off: np.ndarray, size: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(flat starts of each model's run in each row, the flat [r, K] place of each run's sum)."""
        starts = np.flatnonzero(np.r_[True, sorted_models[1:] != sorted_models[:-1]])
        return (off * size + starts).ravel(), (off * k + sorted_models[starts]).ravel()

    def scatter(self, x: np.ndarray, sign: float = -1.0) -> np.ndarray:
        """float64[r, K]: per model, the sum of ``x[r, q]`` over its pairs as ``i``, plus ``sign``
        times the sum over its pairs as ``j``."""
        r = x.shape[0]
        flat = x.ravel()
        out = np.zeros(r * self.k)
        n_i, n_j = r * (len(self._seg_i) // self._rows), r * (len(self._seg_j) // self._rows)
        out[self._to_i[:n_i]] = np.add.reduceat(flat, self._seg_i[:n_i])
        by_j = np.add.reduceat(flat[self._by_j[:flat.size]], self._seg_j[:n_j])
        if sign < 0:
            out[self._to_j[:n_j]] -= by_j
        else:
            out[self._to_j[:n_j]] += by_j
        return out.reshape(r, self.k)

    def _gather(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(``v[r, i[q]]``, ``v[r, j[q]]``), float64[r, P] each (fancy indexing, which releases the GIL,
        where ``np.repeat`` would not)."""
        size, flat = v.shape[0] * self.pairs.size, v.ravel()
        return flat[self._i[:size]].reshape(v.shape[0], -1), flat[self._j[:size]].reshape(v.shape[0], -1)

    def probs(self, theta: np.ndarray) -> np.ndarray:
        """P(i beats j), float64[r, P]: ``e_i / (e_i + e_j)`` with ``e = exp(theta - max)``, K
        exponentials rather than one per pair. Log-strengths more than 700 below a fit's best are
        floored there (only fits that diverge, with no prior, get that far)."""
        e = np.exp(np.maximum(theta - theta.max(axis=1, keepdims=True), -700.0))
        ei, ej = self._gather(e)
        ej += ei
        ei /= ej
        return ei

    def gradient(self, theta: np.ndarray, n: np.ndarray, prior: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(gradient float64[r, K], P(i beats j) float64[r, P]) of the log-likelihood plus ``prior[r]``
        virtual ties of every model against a reference at 0. ``base``: ``scatter(w)``, the part that
        does not depend on ``theta`` (each model's points minus its battles as ``j``)."""
        p = self.probs(theta)
        g = base - self.scatter(n * p)
        if np.any(prior):
            g += prior[:, None] * (0.5 - 1.0 / (1.0 + np.exp(-theta)))
        return g, p

    def hess_times(self, h: np.ndarray, curv: np.ndarray, v: np.ndarray) -> np.ndarray:
        """float64[r, K]: the negated Hessian (pair weights ``h = n p (1 - p)`` [r, P], diagonal
        ``curv`` [r, K] from the prior) times ``v`` [r, K]."""
        vi, vj = self._gather(v)
        vi -= vj
        vi *= h
        return self.scatter(vi) + curv * v


# -- the comparison graph ----------------------------------------------------------------------------
def _labels(k: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """int64[k]: each node's smallest connected node index, the graph's edges being ``a - b``:
    minimum labels spread along the edges, with pointer jumping, until nothing changes."""
    label = np.arange(k, dtype=np.int64)
    while True:
        before = label.copy()
        low = np.minimum(label[a], label[b])
        np.minimum.at(label, a, low)
        np.minimum.at(label, b, low)
        label = label[label]
        if np.array_equal(label, before):
            return label


def components(pairs: Pairs, present: np.ndarray) -> np.ndarray:
    """int64[K]: group labels 0, 1, ... (numbered by each group's first model) of the graph of the
    pairs where ``present`` (bool[P])."""
    return np.unique(_labels(pairs.k, pairs.i[present], pairs.j[present]), return_inverse=True)[1].astype(np.int64)


def _reach(k: int, start: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """bool[k]: the nodes reached from ``start`` (bool[k]) along the directed edges ``src -> dst``."""
    reached = start.copy()
    while True:
        new = dst[reached[src] & ~reached[dst]]
        if not len(new):
            return reached
        reached[new] = True


@dataclass(frozen=True)
class Skeleton:
    """Pairs that scored both ways in a log (two-way pairs), chosen to keep each of its groups
    joined through a bootstrap round: a maximum spanning forest of the two-way pairs (Prim's
    algorithm; weight: the smaller side's points) and each model's ``TOP`` heaviest two-way pairs.
    ``edges``: pair indices (int64[E]); ``groups``: the log's number of connected groups."""

    edges: np.ndarray
    groups: int

    TOP = 4

    @classmethod
    def of(cls, pairs: Pairs, n: np.ndarray, w: np.ndarray) -> Skeleton:
        """The skeleton of one log (``n``, ``w``: float64[P]); O(K^2) time and memory."""
        k = pairs.k
        weight = np.minimum(w, n - w)
        dense = np.zeros((k, k))
        dense[pairs.i, pairs.j] = weight
        dense[pairs.j, pairs.i] = weight
        index = np.full((k, k), -1, dtype=np.int64)
        index[pairs.i, pairs.j] = np.arange(pairs.size)
        index[pairs.j, pairs.i] = np.arange(pairs.size)
        inside = np.zeros(k, dtype=bool)
        best = np.zeros(k)
        parent = np.full(k, -1, dtype=np.int64)
        for _ in range(k):  # Prim's algorithm: one model joins per step
            open_best = np.where(inside, -1.0, best)
            v = int(np.argmax(open_best))
            if open_best[v] <= 0:  # no two-way pair reaches the trees: a new tree starts
                v = int(np.argmin(inside))
                parent[v] = -1
            inside[v] = True
            better = ~inside & (dense[v] > best)
            best[better] = dense[v][better]
            parent[better] = v
        tree = index[parent[parent >= 0], np.flatnonzero(parent >= 0)]
        top = min(cls.TOP, k - 1)
        heavy = np.argpartition(-dense, top - 1, axis=1)[:, :top] if top > 0 else np.zeros((k, 0), dtype=np.int64)
        rows = np.repeat(np.arange(k), heavy.shape[1])
        heavy_pairs = index[rows, heavy.ravel()][dense[rows, heavy.ravel()] > 0]
        groups = int(components(pairs, n > 0).max(initial=-1)) + 1
        return cls(np.union1d(tree, heavy_pairs).astype(np.int64), groups)


def mle_exists(pairs: Pairs, n: np.ndarray, w: np.ndarray, skeleton: Skeleton | None = None) -> np.ndarray:
    """bool[R]: whether each fit's maximum-likelihood estimate is finite (``ratings.mle_exists`` on the
    pairs): within every connected group, every model reaches every other through points scored.

    A pair where both sides scored joins its models both ways, so models linked by such pairs of the
    log's ``Skeleton`` (the first fit's own by default) reach each other: a fit whose skeleton keeps
    each of the log's groups in one piece passes at once (the usual case). Otherwise the pieces are
    joined by every two-way pair of the fit, contracted, and the condition checked between them."""
    if skeleton is None:
        skeleton = Skeleton.of(pairs, n[0], w[0])
    k = pairs.k
    two_way = (w > 0) & (w < n)
    rows, e = np.nonzero(two_way[:, skeleton.edges])  # every fit at once, as one graph of R * K models
    piece = _labels(len(n) * k, rows * k + pairs.i[skeleton.edges[e]], rows * k + pairs.j[skeleton.edges[e]])
    out = np.ones(len(n), dtype=bool)
    roots = (piece == np.arange(len(piece))).reshape(-1, k).sum(axis=1)
    for r in np.flatnonzero(roots > skeleton.groups):
        piece = _labels(k, pairs.i[two_way[r]], pairs.j[two_way[r]])
        out[r] = _contracted(pairs, piece, np.unique(piece), n[r], w[r])
    return out


def _contracted(pairs: Pairs, piece: np.ndarray, pieces: np.ndarray, n: np.ndarray, w: np.ndarray) -> bool:
    """Zermelo's condition on the graph between ``pieces`` (each strongly connected within)."""
    a, b = piece[pairs.i], piece[pairs.j]
    cross = (a != b) & (n > 0)
    fwd, bwd = cross & (w > 0), cross & (w < n)  # i scored against j; j scored against i
    m = len(pieces)
    src = np.searchsorted(pieces, np.concatenate([a[fwd], b[bwd]]))
    dst = np.searchsorted(pieces, np.concatenate([b[fwd], a[bwd]]))
    edges = np.unique(src * m + dst)
    src, dst = edges // m, edges % m
    root = _labels(m, src, dst) == np.arange(m)
    return bool(_reach(m, root, src, dst).all() and _reach(m, root, dst, src).all())
