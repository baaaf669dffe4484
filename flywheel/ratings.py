"""Bradley-Terry ratings on the Elo scale, with bootstrap confidence intervals.

Layered like the classic arena code (preprocess -> fit -> compute -> bootstrap), but the battle
log is aggregated once into cell counts, so the fit and every bootstrap round cost O(K^2)
whatever the number of battles, and all bootstrap rounds are fitted together:

- ``canonical_names``: model names, checked for spellings that differ only by case or spaces.
- ``encode``: battle rows -> model index arrays and outcomes (1 = A won, 0 = B won, 0.5 = tie).
- ``cell_counts``: the distinct (a, b, outcome) cells and how often each occurs.
- ``points_matrix``: cells -> ``W[..., i, j]``, the points model i scored against model j
  (a tie gives half a point to each side, as Chatbot Arena counts it).
- ``fit_bt``: maximum likelihood log-strengths for one or many ``W`` at once (batched Newton).
- ``bootstrap``: resampling battles with replacement is a multinomial draw over the cells.
- ``rate``: all of the above -> a ``RatingReport`` (typed rows, matrices, warnings).

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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from flywheel.records import SCORE_A as OUTCOME  # model A's points per verdict

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


def encode(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str], fold_names: bool = False
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Battle columns -> (models, a_idx int64[N], b_idx int64[N], outcome float64[N]).

    Names are factorized in C (pandas), so only the distinct spellings are handled in Python."""
    import pandas as pd

    n = len(model_a)
    codes, spellings = pd.factorize(np.concatenate([np.asarray(model_a, dtype=object), np.asarray(model_b, dtype=object)]))
    counts = np.bincount(codes, minlength=len(spellings))
    # Only distinct spellings are checked; folding keeps the most frequent spelling of a name.
    canon = _fold_by_count(list(spellings), counts) if fold_names else canonical_names(list(spellings))
    models = sorted(set(canon.values()))
    index = {m: i for i, m in enumerate(models)}
    remap = np.array([index[canon[name]] for name in spellings], dtype=np.int64)
    a, b = remap[codes[:n]], remap[codes[n:]]
    w_codes, w_values = pd.factorize(np.asarray(winner, dtype=object))
    unknown = [w for w in w_values if w not in OUTCOME]
    if unknown:
        raise ValueError(f"unknown winner {unknown[0]!r}; expected one of {list(OUTCOME)}")
    y = np.array([OUTCOME[w] for w in w_values], dtype=np.float64)[w_codes] if len(w_values) else np.zeros(0)
    if np.any(a == b):
        raise ValueError(f"a model cannot battle itself ({models[int(a[np.argmax(a == b)])]!r})")
    return models, a, b, y


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
    """Distinct cells ``(a * k + b) * 3 + outcome_code`` (int64[M]) and their counts (int64[M])."""
    code = np.rint(y * 2).astype(np.int64)  # 0 = B won, 1 = tie, 2 = A won
    cells, counts = np.unique((a * k + b) * 3 + code, return_counts=True)
    return cells, counts


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
        reach = (reach.astype(np.float32) @ reach.astype(np.float32)) > 0
    return reach


def same_group(w: np.ndarray) -> np.ndarray:
    """bool[..., K, K]: models i and j are connected through battles."""
    met = np.asarray(w) > 0
    return _closure(met | np.swapaxes(met, -1, -2))


def mle_exists(w: np.ndarray) -> np.ndarray:
    """bool[...] for ``W[..., K, K]``: whether the maximum-likelihood fit is finite, i.e. within
    every connected group each model reaches every other through points scored (Zermelo's
    condition)."""
    return np.all(_closure(np.asarray(w) > 0) == same_group(w), axis=(-2, -1))


def resolve_prior(w: np.ndarray, prior: float | None) -> np.ndarray:
    """The prior of each fit in ``W[..., K, K]``: ``prior`` as given, or (None) 0 where the MLE
    exists and ``PRIOR`` where it does not."""
    if prior is not None:
        return np.full(np.asarray(w).shape[:-2], float(prior))
    return np.where(mle_exists(w), 0.0, PRIOR)


def fit_bt(w: np.ndarray, prior: float | np.ndarray | None = None, max_iter: int = 100, tol: float = 1e-9
           ) -> np.ndarray:
    """Maximum a posteriori log-strengths (natural log) for ``W[..., K, K]``.

    Batched Newton steps on a concave objective: the Bradley-Terry log-likelihood plus ``prior``
    virtual ties of each model against a reference at 0 (a number, one per fit, or None: see
    ``resolve_prior``). Steps are clipped, so models that never lose (or never win) move steadily
    instead of overshooting. Not centred: see ``center``.
    """
    w = np.asarray(w, dtype=np.float64)
    lead, k = w.shape[:-2], w.shape[-1]
    if prior is None or np.ndim(prior) == 0:
        prior = resolve_prior(w, None if prior is None else float(prior))
    prior = np.broadcast_to(np.asarray(prior, dtype=np.float64), lead).reshape(-1, 1)
    w = w.reshape((-1, k, k))
    n = w + np.swapaxes(w, 1, 2)
    wins = w.sum(axis=2)
    theta = np.zeros(w.shape[:2])
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


def bootstrap(
    k: int, cells: np.ndarray, counts: np.ndarray, rounds: int, seed: int, prior: float | None = None
) -> np.ndarray:
    """Log-strengths of ``rounds`` bootstrap resamples of the battles, float64[rounds, K].

    Drawing N battles with replacement from the log is a multinomial draw over its cells."""
    if rounds <= 0:
        return np.zeros((0, k))
    rng = np.random.default_rng(seed)
    total = int(counts.sum())
    draws = rng.multinomial(total, counts / total, size=rounds)
    return fit_bt(points_matrix(k, cells, draws), prior=prior)


def online_elo(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str], k_factor: float = 4.0,
    scale: float = 400.0, base: float = 10.0, init: float = 1000.0,
) -> dict[str, float]:
    """Sequential Elo updates in log order (for live progress; order-dependent by design)."""
    r: dict[str, float] = {}
    for ma, mb, w in zip(model_a, model_b, winner):
        ra, rb = r.setdefault(ma, init), r.setdefault(mb, init)
        ea = 1.0 / (1.0 + base ** ((rb - ra) / scale))
        delta = k_factor * (OUTCOME[w] - ea)
        r[ma], r[mb] = ra + delta, rb - delta
    return r


# -- compute ------------------------------------------------------------------------------------
def rate(
    model_a: Sequence[str],
    model_b: Sequence[str],
    winner: Sequence[str],
    rounds: int = 100,
    ci: float = 0.95,
    seed: int = 0,
    scale: float = 400.0,
    base: float = 10.0,
    init: float = 1000.0,
    anchor: tuple[str, float] | None = None,
    prior: float | None = None,
    fold_names: bool = False,
) -> RatingReport:
    """Ratings with bootstrap CIs (best first), the win-rate and battle-count matrices, warnings.

    Rank = 1 + the number of models in the same group whose lower bound is above this model's
    upper bound. Zero battles give an empty report."""
    if len(model_a) == 0:
        return RatingReport([], [], [], [], ["no battles to rate"])
    models, a, b, y = encode(model_a, model_b, winner, fold_names)
    k = len(models)
    cells, counts = cell_counts(k, a, b, y)
    w = points_matrix(k, cells, counts)
    n = w + w.T
    label = groups(n)
    anchor_ix = None
    if anchor is not None:
        if anchor[0] not in models:
            raise ValueError(f"anchor model {anchor[0]!r} has no battles in this log")
        anchor_ix = (models.index(anchor[0]), (anchor[1] - init) * math.log(base) / scale)
    point = to_elo(center(fit_bt(w, prior), label, anchor_ix), scale, base, init)
    if rounds > 0:
        boots = to_elo(center(bootstrap(k, cells, counts, rounds, seed, prior), label, anchor_ix), scale, base, init)
        lower = np.minimum(np.quantile(boots, (1 - ci) / 2, axis=0), point)
        upper = np.maximum(np.quantile(boots, 1 - (1 - ci) / 2, axis=0), point)
    else:
        lower, upper = point.copy(), point.copy()
    battles = n.sum(axis=1).astype(int)
    wins = (np.bincount(a, weights=y == 1.0, minlength=k) + np.bincount(b, weights=y == 0.0, minlength=k)).astype(int)
    ties = (np.bincount(a, weights=y == 0.5, minlength=k) + np.bincount(b, weights=y == 0.5, minlength=k)).astype(int)
    n_groups = int(label.max()) + 1
    warnings = []
    if n_groups > 1:
        warnings.append(f"the comparison graph has {n_groups} disconnected groups of models; ratings compare "
                        "only within a group (column 'group')")
    rows = []
    for i, m in enumerate(models):
        same = label == label[i]
        losses = int(battles[i] - wins[i] - ties[i])
        note = "never lost" if losses == 0 and wins[i] > 0 else "never won" if wins[i] == 0 and losses > 0 else ""
        rows.append(Rating(
            model=m, rating=round(float(point[i]), 2), lower=round(float(lower[i]), 2),
            upper=round(float(upper[i]), 2), rank=1 + int(np.sum(lower[same] > upper[i])),
            battles=int(battles[i]), wins=int(wins[i]), losses=losses, ties=int(ties[i]),
            group=int(label[i]) + 1, note=note,
        ))
    with np.errstate(invalid="ignore", divide="ignore"):
        rate_m = np.where(n > 0, w / np.where(n > 0, n, 1), np.nan)
    win_rate = [[None if math.isnan(x) else round(float(x), 4) for x in row] for row in rate_m]
    order = sorted(rows, key=lambda r: (r.group, -r.rating, r.model))
    return RatingReport(order, models, win_rate, n.astype(int).tolist(), warnings)


def leaderboard(model_a, model_b, winner, rounds=100, ci=0.95, seed=0, scale=400.0, base=10.0, init=1000.0,
                **kw) -> list[Rating]:
    """Just the rows of ``rate``."""
    return rate(model_a, model_b, winner, rounds, ci, seed, scale, base, init, **kw).ratings
