"""Style control: Bradley-Terry ratings with the answers' style as covariates, the estimator
Chatbot Arena reports by default (a contextual Bradley-Terry model).

Judges prefer longer, more formatted answers. Style control explains each verdict by the two
models' ratings and by how the two answers differ in style (``flywheel.ground.style.FEATURES``:
tokens, markdown headers, list items, bold spans), so a model's rating no longer holds what its
style alone won:

    logit P(A wins) = ln(base) * (r_a - r_b) + x . beta,   x_f = standardised (A_f - B_f) / (A_f + B_f + 1)

fitted by penalised maximum likelihood (an L2 penalty of ``reg`` = 0.5 on every parameter, as
Chatbot Arena's) with bootstrap intervals; ratings are ``init + scale * r``.

- ``flywheel.maths.style_fit``: the features, the log's layout, the exact fit (batched Newton).
- ``flywheel.maths.style_bootstrap``: the bootstrap (Chatbot Arena's resampling of battles; each
  round's fit found on an expansion of its loss around the point fit, refitted exactly where the
  expansion cannot be trusted).
- ``style_control`` (here): the columns and style counts of a log -> a ``StyleReport``: per model
  its rating with its interval, rank and record; per feature its coefficient with its interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from flywheel.ground.style import FEATURES
from flywheel.maths.bt_fit import one_blas_thread
from flywheel.maths.leaderboard import interval, rating_rows
from flywheel.maths.ratings import Rating, cell_counts, encode, groups, points_matrix, results
from flywheel.maths.style_bootstrap import bootstrap_style
from flywheel.maths.style_fit import REG, design, fit_style, style_features

__all__ = ["COEF_COLUMNS", "MEANINGS", "REG", "Coefficient", "StyleOptions", "StyleReport", "style_control"]

# What a positive coefficient means, per feature (the coefficients' ``meaning`` column).
MEANINGS = {"tokens": "the longer answer (tokens) is favoured", "headers": "more markdown headers are favoured",
            "lists": "more list items are favoured", "bold": "more bold spans are favoured"}
COEF_COLUMNS = ("feature", "coef", "lower", "upper", "meaning")


@dataclass(frozen=True)
class StyleOptions:
    """How a log is rated with style control: ``rounds`` bootstrap rounds (0: no intervals, each
    bound equals the point) at confidence ``ci`` from ``seed``; ratings are ``init + scale * r``
    with ``alpha = ln(base)`` in the fit; ``reg``: the L2 penalty on every parameter; ``anchor``:
    (model, rating) shifts that model's group so it sits there; ``threads``: the bootstrap's
    threads (None: one per usable core; the result does not depend on it)."""

    rounds: int = 100
    ci: float = 0.95
    seed: int = 0
    scale: float = 400.0
    base: float = 10.0
    init: float = 1000.0
    reg: float = REG
    anchor: tuple[str, float] | None = None
    threads: int | None = None


@dataclass(frozen=True)
class Coefficient:
    """One style feature's coefficient: logits added to A's side per standard deviation of the
    feature (A - B) / (A + B + 1), within [``lower``, ``upper``]; positive: the judge favours
    the answer with more of it (``meaning``)."""

    feature: str
    coef: float
    lower: float
    upper: float
    meaning: str

    def to_dict(self) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class StyleReport:
    """The style-controlled leaderboard (best first within each group) and the style coefficients
    (``features`` order)."""

    ratings: list[Rating]
    coefficients: list[Coefficient]
    features: tuple[str, ...] = FEATURES
    warnings: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        return [r.to_dict() for r in self.ratings]

    def coefficient_rows(self) -> list[dict]:
        return [c.to_dict() for c in self.coefficients]


def style_control(
    model_a: Sequence[str], model_b: Sequence[str], winner: Sequence[str], style_a: np.ndarray, style_b: np.ndarray,
    options: StyleOptions = StyleOptions(), *, features: tuple[str, ...] = FEATURES, fold_names: bool = False,
) -> StyleReport:
    """Style-controlled ratings with bootstrap intervals, and the style coefficients.

    ``model_a``, ``model_b``, ``winner``: the battle log's columns (as ``leaderboard.rate`` reads
    them); ``style_a``, ``style_b`` numbers[N, F]: each answer's style counts in ``features``
    order. Rank = 1 + the number of models in the same group whose lower bound is above this
    model's upper bound. Zero battles give an empty report."""
    o = options
    if len(model_a) == 0:
        return StyleReport([], [], features, ["no battles to rate"])
    models, a, b, y = encode(model_a, model_b, winner, fold_names)
    k = len(models)
    if o.anchor is not None and o.anchor[0] not in models:
        raise ValueError(f"anchor model {o.anchor[0]!r} has no battles in this log")
    x = style_features(style_a, style_b)
    if len(x) != len(y) or x.shape[1] != len(features):
        raise ValueError(f"style vectors: expected {len(y)} rows of {len(features)} features, got {x.shape}")
    d = design(k, a, b, y, x)
    alpha = math.log(o.base)
    with one_blas_thread():  # K + F unknowns: more BLAS threads only spin
        theta = fit_style(d, reg=o.reg, alpha=alpha)[0]
    boots = bootstrap_style(d, o.rounds, o.seed, theta, o.reg, alpha, threads=o.threads)
    cells, counts = cell_counts(k, a, b, y)
    n = points_matrix(k, cells, counts)
    n = n + n.T
    label = groups(n)
    elo = o.init + o.scale * np.vstack([theta[None, :k], boots[:, :k]])  # the point, then each round
    if o.anchor is not None:
        i = models.index(o.anchor[0])
        same = label == label[i]
        elo[:, same] += o.anchor[1] - elo[:, [i]]
    point, (lower, upper) = elo[0], interval(elo[0], elo[1:], o.ci)
    wins, losses, ties = results(k, cells, counts)
    rows = rating_rows(models, point, lower=lower, upper=upper, label=label, wins=wins, losses=losses, ties=ties)
    beta = theta[k:]
    b_lower, b_upper = interval(beta, boots[:, k:], o.ci)
    coefs = [Coefficient(f, float(beta[j]), float(b_lower[j]), float(b_upper[j]), MEANINGS.get(f, f"more {f}"))
             for j, f in enumerate(features)]
    warnings = []
    if int(label.max()) > 0:
        warnings.append(f"the comparison graph has {int(label.max()) + 1} disconnected groups of models; ratings "
                        "compare only within a group (column 'group')")
    flat = [f for j, f in enumerate(features) if not np.any(x[:, j])]
    if flat:
        warnings.append(f"style feature(s) {', '.join(flat)} never vary between the answers of this log: "
                        "coefficient 0, nothing to control for")
    order = sorted(rows, key=lambda r: (r.group, -r.rating, r.model))
    return StyleReport(order, coefs, features, warnings)
