"""Leaderboards: a battle log's Bradley-Terry ratings with bootstrap CIs (``rate``), the online Elo
shown live, and the boards the stages and queries fit the same way over judged battles.

Pure: columns and records in, typed rows out. How to rate travels as ``RatingOptions``; the
``rating:`` settings come in as any object with the fields ``BoardSettings`` names (the config's
``RatingConfig`` is one), which ``RatingOptions.of`` reads; this module imports no config and no store.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from flywheel.ground.records import JudgedBattle
from flywheel.maths.bootstrap import bootstrap, fit_log
from flywheel.maths.ratings import (
    OUTCOME,
    Rating,
    RatingReport,
    cell_counts,
    center,
    encode_scores,
    points_matrix,
    results,
    to_elo,
)


class BoardSettings(Protocol):
    """The ``rating:`` fields a leaderboard is fitted with."""

    bootstrap_rounds: int
    ci: float
    scale: float
    base: float
    init: float
    prior: float | None


def interval(point: np.ndarray, boots: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap quantiles of ``boots`` [R, K] around ``point`` [K] (each bound at least as wide
    as the point; the point itself where there are no rounds)."""
    if not len(boots):
        return point.copy(), point.copy()
    tail = (1.0 - ci) / 2
    return (np.minimum(np.quantile(boots, tail, axis=0), point),
            np.maximum(np.quantile(boots, 1.0 - tail, axis=0), point))


def rating_rows(models: Sequence[str], point: np.ndarray, *, lower: np.ndarray, upper: np.ndarray, label: np.ndarray,
                wins: np.ndarray, losses: np.ndarray, ties: np.ndarray) -> list[Rating]:
    """One leaderboard row per model (in ``models`` order). Rank = 1 + the number of models in the
    same group whose lower bound is above this model's upper bound."""
    rows = []
    for i, m in enumerate(models):
        same = label == label[i]
        note = ("never lost" if losses[i] == 0 and wins[i] > 0 else
                "never won" if wins[i] == 0 and losses[i] > 0 else "")
        rows.append(Rating(
            model=m, rating=round(float(point[i]), 2), lower=round(float(lower[i]), 2),
            upper=round(float(upper[i]), 2), rank=1 + int(np.sum(lower[same] > upper[i])),
            battles=int(wins[i] + losses[i] + ties[i]), wins=int(wins[i]), losses=int(losses[i]), ties=int(ties[i]),
            group=int(label[i]) + 1, note=note))
    return rows


@dataclass(frozen=True)
class RatingOptions:
    """How a battle log is rated (``rate``): the bootstrap, the Elo scale and the fit.

    ``rounds`` bootstrap rounds (0: no CIs, each bound equals the point) at confidence ``ci``,
    drawn from ``seed``; ratings are ``init + scale x log_base(strength)``; ``prior``: virtual ties
    against a mean-rated reference (None: none where the maximum-likelihood fit exists, else 0.1);
    ``anchor``: (model, rating) pins that model's rating instead of centring its group on ``init``."""

    rounds: int = 100
    ci: float = 0.95
    seed: int = 0
    scale: float = 400.0
    base: float = 10.0
    init: float = 1000.0
    prior: float | None = None
    anchor: tuple[str, float] | None = None

    @classmethod
    def of(cls, rating: BoardSettings, seed: int) -> RatingOptions:
        """The options of the ``rating:`` settings (``bootstrap_rounds`` -> ``rounds``), drawing from ``seed``."""
        return cls(rounds=rating.bootstrap_rounds, ci=rating.ci, seed=seed, scale=rating.scale, base=rating.base,
                   init=rating.init, prior=rating.prior)


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


def rate(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str], options: RatingOptions = RatingOptions(),
    *, fold_names: bool = False,
) -> RatingReport:
    """Ratings with bootstrap CIs (best first), the win-rate and battle-count matrices, warnings.

    ``model_a``, ``model_b``, ``winner``: the battle log's columns, one entry per battle (``fold_names``:
    spellings that differ only by case or spaces merge under the most frequent one; else they are an
    error). Rank = 1 + the number of models in the same group whose lower bound is above this
    model's upper bound. Zero battles give an empty report."""
    o = options
    rounds, ci, scale, base, init, anchor = o.rounds, o.ci, o.scale, o.base, o.init, o.anchor
    if len(model_a) == 0:
        return RatingReport([], [], [], [], ["no battles to rate"])
    models, a, b, y = encode_scores(model_a, model_b, winner, fold_names)
    k = len(models)
    cells, counts = cell_counts(k, a, b, y)
    anchor_ix = None
    if anchor is not None:
        if anchor[0] not in models:
            raise ValueError(f"anchor model {anchor[0]!r} has no battles in this log")
        anchor_ix = (models.index(anchor[0]), (anchor[1] - init) * math.log(base) / scale)
    fit = fit_log(k, cells, counts, o.prior)
    label = fit.label
    point = to_elo(center(fit.theta, label, anchor_ix), scale, base, init)
    if rounds > 0:
        boots = to_elo(center(bootstrap(fit, counts, rounds, o.seed, o.prior), label, anchor_ix), scale, base, init)
    else:
        boots = np.zeros((0, k))
    lower, upper = interval(point, boots, ci)
    wins, losses, ties = results(k, cells, counts)
    n_groups = int(label.max()) + 1
    warnings = []
    if n_groups > 1:
        warnings.append(f"the comparison graph has {n_groups} disconnected groups of models; ratings compare "
                        "only within a group (column 'group')")
    rows = rating_rows(models, point, lower=lower, upper=upper, label=label, wins=wins, losses=losses, ties=ties)
    w = points_matrix(k, cells, counts)
    n = w + w.T
    with np.errstate(invalid="ignore", divide="ignore"):
        rate_m = np.round(w / np.where(n > 0, n, 1), 4).tolist()
    met = (n > 0).tolist()
    win_rate = [[x if m else None for x, m in zip(row, seen)] for row, seen in zip(rate_m, met)]
    order = sorted(rows, key=lambda r: (r.group, -r.rating, r.model))
    return RatingReport(order, models, win_rate, n.astype(int).tolist(), warnings)


def leaderboard(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str], options: RatingOptions = RatingOptions(),
    *, fold_names: bool = False,
) -> list[Rating]:
    """Just the rows of ``rate``."""
    return rate(model_a, model_b, winner, options, fold_names=fold_names).ratings


def columns(rows: Iterable[JudgedBattle]) -> tuple[list[str], list[str], list[str]]:
    """The (model_a, model_b, winner) columns of judged battles; a battle of a version against
    itself (self-play in the first iteration) says nothing about ratings and is left out."""
    rows = [r for r in rows if r.battle.model_a != r.battle.model_b]
    return [r.battle.model_a for r in rows], [r.battle.model_b for r in rows], [r.winner for r in rows]


def board(rows: Iterable[JudgedBattle], rating: BoardSettings, seed: int) -> list[Rating]:
    """The configured Bradley-Terry leaderboard (``rating:``) of judged battles."""
    return leaderboard(*columns(rows), RatingOptions.of(rating, seed))


def category_boards(rows: Iterable[JudgedBattle], rating: BoardSettings, seed: int) -> dict[str, list[dict]]:
    """A leaderboard per task category (as dicts, categories sorted)."""
    by_cat: dict[str, list[JudgedBattle]] = {}
    for r in rows:
        by_cat.setdefault(r.battle.category, []).append(r)
    return {c: [x.to_dict() for x in board(rows, rating, seed)] for c, rows in sorted(by_cat.items())}
