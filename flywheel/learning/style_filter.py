"""``curate.style_control``: wins that the judge's taste for style explains do not become data.

A judge that prefers longer, more formatted answers makes the flywheel learn verbosity: the
winners' answers become SFT rows, the target imitates them, its answers grow, and so on. This
rule fits the judge's style preference on the iteration's judged train battles with the
contextual Bradley-Terry model Chatbot Arena's style control uses (``flywheel.maths.style_fit``:
each battle's log-odds are the two models' rating difference plus the style features' term),
then refuses every decisive win whose style term alone raises its winner's log-odds by more than
``curate.style_tolerance``. Only coefficients whose 95% bootstrap interval excludes zero enter the
style term: a judge with no measurable taste for a feature is not second-guessed on it.

Why this rule: a win that style alone predicts says little about which answer is better, and it
is exactly the kind of win that carries the bias into the data. Removing only the wins a weaker
model owed to style (the other reading of "explained by style alone") is not enough: under a
judge that prefers the longer answer whatever it says, the wins left are still the longer
answers, and the drift goes on at half the pace. What the rule keeps are wins in which the
winner's style was no better than the loser's (or the judge showed no taste for it), so the kept
answers are not longer than the ones they beat. The price is data: where the better answer is
also the longer one, its win is not learnt from (counted as ``dropped["style"]``). Where the
judge has no style preference, the fitted coefficients are near zero and almost nothing is
dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flywheel.ground.records import Battle, Judgment
from flywheel.ground.style import FEATURES, style_of
from flywheel.maths.ratings import encode
from flywheel.maths.style_bootstrap import bootstrap_style
from flywheel.maths.style_fit import design, fit_style, style_features

ROUNDS = 100  # bootstrap rounds that decide which coefficients are credibly non-zero


@dataclass(frozen=True)
class StyleVerdicts:
    """The style fit of one iteration: the coefficients (``FEATURES`` order, per standard
    deviation of each feature), those credibly non-zero (their 95% bootstrap interval excludes
    zero), and the battle ids whose wins style explains."""

    coefficients: dict[str, float]
    credible: tuple[str, ...]
    explained: frozenset[str]


def style_explained(battles: list[Battle], judgments: dict[str, Judgment], tolerance: float) -> StyleVerdicts:
    """Fit the contextual Bradley-Terry model on the played battles with a valid verdict (wins and
    ties) and name the decisive wins whose style term favours the winner by more than
    ``tolerance`` log-odds (through the credible coefficients only)."""
    rated = [(b, j) for b in battles if b.ok and (j := judgments.get(b.battle_id)) is not None and j.valid
             and j.winner is not None]
    if not rated:
        return StyleVerdicts({f: 0.0 for f in FEATURES}, (), frozenset())
    models, a, b, y = encode([r[0].model_a for r in rated], [r[0].model_b for r in rated],
                             [r[1].winner for r in rated])
    x = style_features(np.array([style_of(r[0].response_a).vector() for r in rated]),
                       np.array([style_of(r[0].response_b).vector() for r in rated]))
    d = design(len(models), a, b, y, x)
    theta = fit_style(d)[0]
    beta = theta[len(models):]
    lower, upper = np.quantile(bootstrap_style(d, ROUNDS, 0, theta)[:, len(models):], [0.025, 0.975], axis=0)
    credible = (lower > 0) | (upper < 0)
    towards_a = x @ np.where(credible, beta, 0.0)  # the style term of A's log-odds, battle by battle
    explained = frozenset(
        r[0].battle_id for r, s in zip(rated, towards_a)
        if r[1].winner in ("model_a", "model_b") and (s if r[1].winner == "model_a" else -s) > tolerance)
    return StyleVerdicts({f: round(float(c), 4) for f, c in zip(FEATURES, beta)},
                         tuple(f for f, c in zip(FEATURES, credible) if c), explained)
