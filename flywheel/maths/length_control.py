"""Length-controlled win rates against a baseline, the AlpacaEval 2 way.

Judges prefer longer answers. AlpacaEval 2 fits, per model, a logistic regression of each
battle's outcome against the baseline on the length difference and reads the win rate at zero
length difference. Here, per model m against the baseline b:

    logit P(m beats b) = theta_m + phi_m * tanh(delta / sigma),   delta = len_m - len_b

``sigma`` is the standard deviation of ``delta`` over every battle against the baseline, all
models pooled (so one unit of the feature means the same for every model). AlpacaEval's
instruction-difficulty term is left out: the run's eval prompts are the same for every model.

- ``against``: judged battles -> per battle against the baseline: the other model, its score
  (1 win, 0.5 tie, 0 loss) and the length difference. Length is characters (``len`` of the
  answer text): there is no tokenizer at report time, and characters need none. Battles of other
  pairs, and of the baseline against itself, are ignored; versions (``student@2``) are separate models.
- ``features``: ``tanh(delta / sigma)``; where every battle has the same length difference
  (``sigma`` 0) the feature is 0, nothing to control for, and the fit is the plain win rate's logit.
- ``fit_lc``: (theta, phi) for many weightings of one model's battles at once: Newton on the
  soft-label log-loss (a tie is y = 0.5), with step halving, and an L2 ridge of ``RIDGE`` on
  both theta and phi (a Gaussian prior of variance 1 / RIDGE, i.e. 100). The ridge keeps a model that
  always wins (separable data) finite and is negligible beside a few dozen battles; it also
  picks one answer where a model's length differences never vary (theta and phi collinear).
- ``bootstrap_lc``: the battles of each model resampled with replacement (its count fixed),
  ``sigma`` kept at the point estimate, the rounds fitted together; a seeded generator per model.
- ``length_controlled``: all of the above -> one ``LCRow`` per model, best LC win rate first.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from flywheel.ground.records import SCORE_A, JudgedBattle

RIDGE = 0.01
COLUMNS = ("model", "battles", "win_rate", "lc_win_rate", "lc_lower", "lc_upper", "length_coef", "mean_length_diff")


@dataclass(frozen=True)
class Versus:
    """Battles against one baseline, oriented from the other model's side (arrays of length N)."""

    baseline: str
    models: list[str]  # N: the model that played the baseline
    score: np.ndarray  # float64[N]: its score, 1 win, 0.5 tie, 0 loss
    delta: np.ndarray  # float64[N]: its answer's length minus the baseline's, in characters


@dataclass(frozen=True)
class LCOptions:
    """``rounds`` bootstrap rounds (0: no interval, each bound equals the point) at confidence
    ``ci`` from ``seed``; ``ridge``: the L2 penalty on theta and phi."""

    rounds: int = 100
    ci: float = 0.95
    seed: int = 0
    ridge: float = RIDGE


@dataclass(frozen=True)
class LCRow:
    """One model against the baseline. ``win_rate``: its mean score (ties half); ``lc_win_rate``:
    sigmoid(theta), the fit at zero length difference, within [``lc_lower``, ``lc_upper``];
    ``length_coef``: phi, logits per unit of tanh(delta / sigma); ``mean_length_diff``: its
    answers' mean length minus the baseline's, in characters."""

    model: str
    battles: int
    win_rate: float
    lc_win_rate: float
    lc_lower: float
    lc_upper: float
    length_coef: float
    mean_length_diff: float

    def to_dict(self) -> dict:
        return {k: round(v, 1 if k == "mean_length_diff" else 4) if isinstance(v, float) else v
                for k, v in asdict(self).items()}


# -- preprocess ---------------------------------------------------------------------------------
def against(judged: Iterable[JudgedBattle], baseline: str) -> Versus:
    """Every battle between ``baseline`` and another model, from the other model's side."""
    models, score, delta = [], [], []
    for j in judged:
        b = j.battle
        if (b.model_a == baseline) == (b.model_b == baseline):  # another pair, or the baseline vs itself
            continue
        a_side = b.model_b == baseline
        models.append(b.model_a if a_side else b.model_b)
        score.append(SCORE_A[j.winner] if a_side else 1.0 - SCORE_A[j.winner])
        delta.append(len(b.response_a) - len(b.response_b) if a_side else len(b.response_b) - len(b.response_a))
    return Versus(baseline, models, np.asarray(score, dtype=float), np.asarray(delta, dtype=float))


def features(delta: np.ndarray) -> tuple[np.ndarray, float]:
    """(``tanh(delta / sigma)`` float64[N], sigma): sigma is the pooled standard deviation; 0 where
    ``delta`` never varies (then the feature is 0 everywhere)."""
    sigma = float(np.std(delta)) if len(delta) else 0.0
    if not sigma > 0 or not math.isfinite(sigma):
        return np.zeros(len(delta)), 0.0
    return np.tanh(delta / sigma), sigma


# -- fit ----------------------------------------------------------------------------------------
def _loss(beta: np.ndarray, x: np.ndarray, y: np.ndarray, w: np.ndarray, ridge: float) -> np.ndarray:
    """Penalised soft-label log-loss per row of ``beta`` float64[R, 2] over weights ``w`` [R, N]."""
    eta = beta[:, :1] + beta[:, 1:] * x
    return (w * (np.logaddexp(0.0, eta) - y * eta)).sum(axis=1) + 0.5 * ridge * (beta**2).sum(axis=1)


def fit_lc(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, ridge: float = RIDGE,
           tol: float = 1e-10, max_iter: int = 100) -> np.ndarray:
    """(theta, phi) float64[R, 2] maximising the penalised likelihood of soft labels ``y``
    float64[N] in [0, 1] given the feature ``x`` float64[N], once per row of the battle weights
    ``w`` float64[R, N] (default: one row of ones). Batched Newton with step halving."""
    w = np.ones((1, len(x))) if w is None else np.atleast_2d(np.asarray(w, dtype=float))
    beta = np.zeros((len(w), 2))
    loss = _loss(beta, x, y, w, ridge)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-(beta[:, :1] + beta[:, 1:] * x)))
        r, v = w * (p - y), w * p * (1.0 - p)
        g0, g1 = r.sum(1) + ridge * beta[:, 0], (r * x).sum(1) + ridge * beta[:, 1]
        h00, h01, h11 = v.sum(1) + ridge, (v * x).sum(1), (v * x * x).sum(1) + ridge
        det = h00 * h11 - h01 * h01  # > 0: ridge > 0
        step = np.stack([(h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det], axis=1)
        scale = np.ones(len(w))
        for _ in range(40):  # halve the step of each row whose loss would rise
            new = beta - scale[:, None] * step
            new_loss = _loss(new, x, y, w, ridge)
            worse = new_loss > loss + 1e-12 * np.abs(loss)
            if not worse.any():
                break
            scale = np.where(worse, scale / 2, scale)
        beta, loss = np.where(worse[:, None], beta, new), np.where(worse, loss, new_loss)
        if np.abs(scale[:, None] * step).max() < tol:
            break
    return beta


def bootstrap_lc(x: np.ndarray, y: np.ndarray, rounds: int, rng: np.random.Generator, ridge: float = RIDGE,
                 chunk_cells: int = 2_000_000) -> np.ndarray:
    """(theta, phi) float64[rounds, 2] of ``rounds`` resamplings of one model's N battles with
    replacement (multinomial weights), fitted in chunks of at most ``chunk_cells`` weights."""
    n = len(x)
    out = []
    per = max(1, chunk_cells // max(n, 1))
    for start in range(0, rounds, per):
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=min(per, rounds - start)).astype(float)
        out.append(fit_lc(x, y, w, ridge))
    return np.concatenate(out) if out else np.zeros((0, 2))


def _sigmoid(t: float) -> float:
    return 1.0 / (1.0 + math.exp(-t))


# -- report -------------------------------------------------------------------------------------
def length_controlled(versus: Versus, options: LCOptions = LCOptions()) -> list[LCRow]:
    """Per model that played the baseline: battles, win rate, LC win rate with its bootstrap
    interval, length coefficient and mean length difference; best LC win rate first.
    Deterministic for ``options.seed`` (each model's generator is seeded by it and the model's name)."""
    x, _ = features(versus.delta)
    names = np.asarray(versus.models, dtype=object)
    rows = []
    for model in sorted(set(versus.models)):
        mask = names == model
        xm, ym = x[mask], versus.score[mask]
        theta, phi = fit_lc(xm, ym, ridge=options.ridge)[0]
        lc = _sigmoid(theta)
        lower = upper = lc
        if options.rounds > 0:
            rng = np.random.default_rng([options.seed, zlib.crc32(model.encode("utf-8"))])
            boot = 1.0 / (1.0 + np.exp(-bootstrap_lc(xm, ym, options.rounds, rng, options.ridge)[:, 0]))
            tail = (1.0 - options.ci) / 2
            lower, upper = (float(q) for q in np.quantile(boot, [tail, 1.0 - tail]))
        rows.append(LCRow(model=model, battles=int(mask.sum()), win_rate=float(ym.mean()), lc_win_rate=lc,
                          lc_lower=lower, lc_upper=upper, length_coef=float(phi),
                          mean_length_diff=float(versus.delta[mask].mean())))
    return sorted(rows, key=lambda r: (-r.lc_win_rate, r.model))


def lc_rows(judged: Sequence[JudgedBattle], baseline: str, options: LCOptions = LCOptions()) -> list[dict]:
    """``length_controlled`` over judged battles, as report rows (``COLUMNS``)."""
    return [r.to_dict() for r in length_controlled(against(judged, baseline), options)]
