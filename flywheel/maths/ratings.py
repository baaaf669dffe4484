"""Bradley-Terry ratings on the Elo scale, with bootstrap confidence intervals.

Layered like the classic arena code (preprocess -> fit -> compute -> bootstrap), but the battle
log is aggregated once into cell counts, so the fit and every bootstrap round cost what the pairs
that met cost, whatever the number of battles:

- ``canonical_names``: model names, checked for spellings that differ only by case or spaces.
- ``encode``: battle columns (lists, arrays, pandas columns) -> model index arrays and outcomes
  (1 = A won, 0 = B won, 0.5 = tie).
- ``cell_counts``: the distinct (pair, outcome) cells and how often each occurs; A vs B and
  B vs A (verdict flipped) are one cell.
- ``points_matrix``: cells -> ``W[..., i, j]``, the points model i scored against model j
  (a tie gives half a point to each side, as Chatbot Arena counts it).
- ``fit_bt``: maximum likelihood log-strengths for one or many dense ``W`` at once (batched
  Newton, O(K^3) a step): the reference the scalable fits are tested against, and small designs
  (``active_eval``).
- ``pairs``, ``bt_fit``, ``resample``, ``bootstrap`` (modules beside this one): the same fit over
  the list of pairs that met, and the bootstrap: resampling battles with replacement is a
  multinomial draw over the cells, drawn and refitted in seeded chunks on threads.
- ``leaderboard.rate``: all of the above -> a ``RatingReport`` (typed rows, matrices, warnings).

Scale: ``rating = init + scale * log_base(strength)``; base 10, scale 400, init 1000 by default.
Within each connected group of models the mean rating is ``init``, unless an anchor pins one
model's rating.

The prior: the maximum-likelihood fit (Chatbot Arena's) exists only where every model of a group
can be reached from every other through wins (a model that never lost, or never won, breaks
that: its MLE is infinite). ``prior=None`` (the default) fits the plain MLE wherever it exists,
so point estimates equal the classic fit, and adds ``PRIOR`` virtual ties of every model against
an ``init``-rated reference only to a fit (the point, or one bootstrap round) where it does not
exist, which keeps every rating finite. A number fits with that prior everywhere; ``0`` is the
classic fit (infinite ratings where the MLE does not exist are clipped, not meaningful).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from flywheel.ground.records import SCORE_A as OUTCOME  # model A's points per verdict

PRIOR = 0.1


@dataclass(frozen=True)
class Rating:
    """One leaderboard row."""

    model: str
    rating: float
    lower: float
    upper: float
    rank: int
    battles: int
    wins: int
    losses: int
    ties: int
    group: int = 1
    note: str = ""

    @property
    def win_rate(self) -> float:
        """Share of battles won outright (ties are not wins)."""
        return self.wins / self.battles if self.battles else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "win_rate": round(self.win_rate, 4)}


@dataclass(frozen=True)
class RatingReport:
    """A leaderboard plus the matrices behind it. ``models`` orders the matrices' rows/columns."""

    ratings: list[Rating]
    models: list[str]
    win_rate: list[list[float | None]]  # [i][j]: i's score vs j (ties half), None if never met
    battle_counts: list[list[int]]
    warnings: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        return [r.to_dict() for r in self.ratings]


# -- preprocess ---------------------------------------------------------------------------------

def _name_key(name: str) -> str:
    return "".join(name.split()).casefold()


def canonical_names(names: Sequence[str], fold: bool = False) -> dict[str, str]:
    """Map each spelling to its model name. Spellings that differ only by case or spaces are an
    error, unless ``fold``: then they merge under the most frequent spelling."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    groups: dict[str, list[str]] = {}
    for n in counts:
        groups.setdefault(_name_key(n), []).append(n)
    clashes = [g for g in groups.values() if len(g) > 1]
    if clashes and not fold:
        shown = "; ".join(" / ".join(repr(n) for n in sorted(g)) for g in clashes[:5])
        raise ValueError(f"model names that differ only by case or spaces: {shown} "
                         "(fix the log, or merge them with --fold-names)")
    out = {}
    for g in groups.values():
        best = max(g, key=lambda n: (counts[n], n == n.strip(), n))
        out.update({n: best for n in g})
    return out


def _factorize(values, what: str) -> tuple[np.ndarray, list]:
    """(codes int64[N], distinct values) of one column, in C (pandas): arrow-backed columns (pandas'
    default strings) stay arrow; lists become object arrays. A missing value is an error."""
    import pandas as pd

    if not isinstance(values, (pd.Series, pd.Index, pd.api.extensions.ExtensionArray, np.ndarray)):
        values = np.asarray(values, dtype=object)
    codes, uniques = pd.factorize(values)
    if len(codes) and codes.min() < 0:
        raise ValueError(f"row {int(np.argmax(codes < 0)) + 1}: {what} is missing")
    return codes.astype(np.int64, copy=False), list(uniques)


def _scores(winner, what: str = "winner") -> np.ndarray:
    """int8[N]: model A's points doubled (2 = A won, 1 = tie, 0 = B won) of a winner column. An
    arrow-backed column is looked up in C (``pyarrow.compute.index_in``); anything else, or a column
    with a value that is missing or unknown, goes through ``_factorize`` (which names the problem)."""
    table = np.array([round(2 * v) for v in OUTCOME.values()], dtype=np.int8)
    column = getattr(winner, "array", winner)
    if "arrow" in type(column).__name__.lower():  # pandas' ArrowStringArray, ArrowExtensionArray
        import pyarrow as pa
        import pyarrow.compute as pc

        found = pc.index_in(pa.array(column), value_set=pa.array(list(OUTCOME)))
        if found.null_count == 0:
            return table[found.to_numpy(zero_copy_only=False)]
    codes, values = _factorize(winner, what)
    unknown = [w for w in values if w not in OUTCOME]
    if unknown:
        raise ValueError(f"unknown winner {unknown[0]!r}; expected one of {list(OUTCOME)}")
    return np.array([table[list(OUTCOME).index(w)] for w in values], dtype=np.int8)[codes]


def encode(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str], fold_names: bool = False
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Battle columns -> (models, a_idx int64[N], b_idx int64[N], outcome float64[N]) (outcome: model
    A's points, 1 = A won, 0 = B won, 0.5 = tie). See ``encode_scores``."""
    models, a, b, score = encode_scores(model_a, model_b, winner, fold_names)
    return models, a.astype(np.int64), b.astype(np.int64), score / 2.0


def encode_scores(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str], fold_names: bool = False
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Battle columns -> (models, a_idx int32[N], b_idx int32[N], score int8[N]): the models' indices
    in ``models`` and model A's points doubled (2 = A won, 1 = tie, 0 = B won): ``encode`` in the
    narrow types ``cell_counts`` reads fastest.

    Each column is factorized in C, so only its distinct spellings are handled in Python."""
    columns = {"model_a": model_a, "model_b": model_b, "winner": winner}
    if len({len(c) for c in columns.values()}) > 1:
        raise ValueError("columns differ in length: " + ", ".join(f"{k} {len(c)}" for k, c in columns.items()))
    jobs = {"model_a": _factorize, "model_b": _factorize, "winner": _scores}
    if all(getattr(c, "dtype", object) != object for c in columns.values()):
        # Arrow-backed columns (pandas' default strings) are handled without the GIL: in parallel.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(3) as pool:
            done = dict(zip(columns, pool.map(lambda name: jobs[name](columns[name], name), columns)))
    else:
        done = {name: jobs[name](col, name) for name, col in columns.items()}
    (codes_a, spell_a), (codes_b, spell_b), score = done["model_a"], done["model_b"], done["winner"]
    spellings = list(dict.fromkeys(spell_a + spell_b))
    if fold_names:
        count = dict.fromkeys(spellings, 0)
        for codes, spell in ((codes_a, spell_a), (codes_b, spell_b)):
            for name, c in zip(spell, np.bincount(codes, minlength=len(spell)).tolist()):
                count[name] += c
        canon = _fold_by_count(spellings, np.array([count[n] for n in spellings]))
    else:
        canon = canonical_names(spellings)  # only distinct spellings are checked
    models = sorted(set(canon.values()))
    index = {m: i for i, m in enumerate(models)}
    a = np.array([index[canon[n]] for n in spell_a], dtype=np.int32)[codes_a]
    b = np.array([index[canon[n]] for n in spell_b], dtype=np.int32)[codes_b]
    same = a == b
    if same.any():
        raise ValueError(f"a model cannot battle itself ({models[int(a[np.argmax(same)])]!r})")
    return models, a, b, score


def _fold_by_count(spellings: list[str], counts: np.ndarray) -> dict[str, str]:
    """``canonical_names(..., fold=True)`` over distinct spellings with their counts."""
    groups: dict[str, list[str]] = {}
    for name in spellings:
        groups.setdefault(_name_key(name), []).append(name)
    count = dict(zip(spellings, counts.tolist()))
    out = {}
    for g in groups.values():
        best = max(g, key=lambda n: (count[n], n == n.strip(), n))
        out.update({n: best for n in g})
    return out


def cell_counts(k: int, a: np.ndarray, b: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct cells ``(i * k + j) * 3 + outcome_code`` (int64[M]) and their counts (int64[M]), of
    battles ``a`` vs ``b`` (model indices) with outcomes ``y``: A's points (float, ``encode``) or
    A's points doubled (int8, ``encode_scores``).

    A battle is stored with its lower model index first (i < j; code 2 = i won, 1 = tie, 0 = j
    won), so B vs A and A vs B share a cell: the points matrix, and a multinomial resample of it
    (the marginal of one over ordered cells), are exactly those of the ordered log."""
    size = k * k * 3
    dtype = np.int32 if size < 2**31 else np.int64  # half the memory traffic of int64 where it fits
    a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    key = np.minimum(a, b) * dtype(3 * k - 3)  # (low * k + high) * 3 = low * (3k - 3) + (a + b) * 3
    both = a + b
    both *= 3
    key += both
    y = np.asarray(y)
    score = np.rint(y * 2).astype(np.int8) if y.dtype.kind == "f" else y.astype(np.int8, copy=False)
    code = np.int8(2) - score - score  # where B is the lower index, the verdict seen from its side:
    code *= (a > b).view(np.int8)  # 2 - score there, score elsewhere
    code += score
    key += code
    if size <= max(4 * len(key), 1 << 16):  # dense: one pass, no sort
        counts = np.bincount(key, minlength=size)
        cells = np.flatnonzero(counts)
        return cells, counts[cells]
    cells, counts = np.unique(key, return_counts=True)
    return cells.astype(np.int64), counts


def results(k: int, cells: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(wins, losses, ties), int64[K] each, from the cells."""
    pair, code = cells // 3, cells % 3
    i, j = pair // k, pair % k
    tally = lambda idx, c: np.bincount(idx[code == c], counts[code == c], minlength=k).astype(np.int64)  # noqa: E731
    return tally(i, 2) + tally(j, 0), tally(i, 0) + tally(j, 2), tally(i, 1) + tally(j, 1)


def points_matrix(k: int, cells: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``W[..., i, j]``: points of i against j. ``counts`` is int[M] or int[R, M] (R rounds)."""
    pair, code = cells // 3, cells % 3
    a, b = pair // k, pair % k
    pts_a = code / 2.0
    counts = np.asarray(counts, dtype=np.float64)
    flat = counts.reshape(-1, counts.shape[-1])
    # One bincount over (round, pair) indices for all rounds at once.
    r = np.arange(flat.shape[0])[:, None] * (k * k)
    idx_ab = (r + (a * k + b)[None, :]).ravel()
    idx_ba = (r + (b * k + a)[None, :]).ravel()
    size = flat.shape[0] * k * k
    w = np.bincount(idx_ab, weights=(flat * pts_a).ravel(), minlength=size)
    w += np.bincount(idx_ba, weights=(flat * (1 - pts_a)).ravel(), minlength=size)
    return w.reshape(counts.shape[:-1] + (k, k))


# -- fit ----------------------------------------------------------------------------------------
def _closure(adjacent: np.ndarray) -> np.ndarray:
    """Reachability (reflexive, transitive) of bool ``[..., K, K]`` by repeated squaring."""
    k = adjacent.shape[-1]
    reach = adjacent | np.eye(k, dtype=bool)
    for _ in range(max(1, math.ceil(math.log2(max(k, 2))))):
        longer = (reach.astype(np.float32) @ reach.astype(np.float32)) > 0
        if np.array_equal(longer, reach):  # closed: paths no longer reach further
            break
        reach = longer
    return reach


def same_group(w: np.ndarray) -> np.ndarray:
    """bool[..., K, K]: models i and j are connected through battles."""
    met = np.asarray(w) > 0
    return _closure(met | np.swapaxes(met, -1, -2))


def mle_exists(w: np.ndarray) -> np.ndarray:
    """bool[...] for ``W[..., K, K]``: whether the maximum-likelihood fit is finite, i.e. within
    every connected group each model reaches every other through points scored (Zermelo's
    condition). Where every pair that met scored both ways (the usual case) it holds at once;
    only the other fits pay for the transitive closure."""
    w = np.asarray(w)
    k = w.shape[-1]
    pos = (w > 0).reshape(-1, k, k)
    out = np.all(pos == np.swapaxes(pos, 1, 2), axis=(1, 2))
    if not np.all(out):
        rest = ~out
        out[rest] = np.all(_closure(pos[rest]) == same_group(w.reshape(-1, k, k)[rest]), axis=(1, 2))
    return out.reshape(w.shape[:-2])


def resolve_prior(w: np.ndarray, prior: float | None) -> np.ndarray:
    """The prior of each fit in ``W[..., K, K]``: ``prior`` as given, or (None) 0 where the MLE
    exists and ``PRIOR`` where it does not."""
    if prior is not None:
        return np.full(np.asarray(w).shape[:-2], float(prior))
    return np.where(mle_exists(w), 0.0, PRIOR)


def fit_bt(w: np.ndarray, prior: float | np.ndarray | None = None, max_iter: int = 100, tol: float = 1e-5,
           start: np.ndarray | None = None) -> np.ndarray:
    """Maximum a posteriori log-strengths (natural log) for ``W[..., K, K]``.

    Batched Newton steps on a concave objective: the Bradley-Terry log-likelihood plus ``prior``
    virtual ties of each model against a reference at 0 (a number, one per fit, or None: see
    ``resolve_prior``). Steps are clipped, so models that never lose (or never win) move steadily
    instead of overshooting. The fit stops after a step no larger than ``tol`` (natural-log units):
    Newton converges quadratically, so what remains is about ``tol ** 2`` (1e-10 by default; a
    rating is rounded to 0.01 Elo, 6e-5 here). ``start`` (float[K], e.g. the point fit for
    bootstrap rounds) is where every fit begins; zeros by default. Not centred: see ``center``.
    """
    w = np.asarray(w, dtype=np.float64)
    lead, k = w.shape[:-2], w.shape[-1]
    if prior is None or np.ndim(prior) == 0:
        prior = resolve_prior(w, None if prior is None else float(prior))
    prior = np.broadcast_to(np.asarray(prior, dtype=np.float64), lead).reshape(-1, 1)
    w = w.reshape((-1, k, k))
    n = w + np.swapaxes(w, 1, 2)
    wins = w.sum(axis=2)
    theta = np.zeros(w.shape[:2]) if start is None else np.repeat(np.asarray(start, np.float64)[None], len(w), 0)
    eye = np.eye(k)
    # Without a prior the likelihood is flat along each group's common shift: a rank-one term per
    # group makes the Newton system regular without changing the fit (the shift is centred away).
    gauge = same_group(w) * (prior[:, :, None] == 0) / k
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(theta[:, None, :] - theta[:, :, None]))  # P(i beats j)
        s = 1.0 / (1.0 + np.exp(-theta))  # P(i beats the reference)
        grad = wins - (n * p).sum(axis=2) + prior * (0.5 - s)
        info = n * p * (1 - p)
        diag = info.sum(axis=2) + prior * s * (1 - s)
        hess = info - eye * diag[:, :, None] - gauge * diag.mean(axis=1)[:, None, None]
        step = np.linalg.solve(hess, -grad[:, :, None])[:, :, 0]
        biggest = np.abs(step).max(axis=1, keepdims=True)
        theta = theta + step * np.minimum(1.0, 2.0 / np.maximum(biggest, 1e-300))
        if biggest.max() < tol:
            break
    return theta.reshape(lead + (k,))


def groups(n: np.ndarray) -> np.ndarray:
    """Connected groups of the comparison graph (``n[i, j] > 0``): int64[K] labels from 0."""
    k = n.shape[0]
    label = -np.ones(k, dtype=np.int64)
    g = 0
    for start in range(k):
        if label[start] >= 0:
            continue
        stack = [start]
        label[start] = g
        while stack:
            i = stack.pop()
            for j in np.nonzero(n[i] > 0)[0]:
                if label[j] < 0:
                    label[j] = g
                    stack.append(j)
        g += 1
    return label


def center(theta: np.ndarray, label: np.ndarray, anchor: tuple[int, float] | None = None) -> np.ndarray:
    """Shift each group to mean 0, or (for the anchor's group) so the anchor sits at its value."""
    theta = np.array(theta, dtype=np.float64, copy=True)
    for g in np.unique(label):
        cols = label == g
        if anchor is not None and cols[anchor[0]]:
            theta[..., cols] -= theta[..., [anchor[0]]] - anchor[1]
        else:
            theta[..., cols] -= theta[..., cols].mean(axis=-1, keepdims=True)
    return theta


def to_elo(theta: np.ndarray, scale: float = 400.0, base: float = 10.0, init: float = 1000.0) -> np.ndarray:
    return init + scale * theta / math.log(base)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS tells it)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
