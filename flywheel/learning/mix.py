"""How many times each SFT row appears in an iteration's data: by default once; with
``train.gap_mix``, more often in the categories where the target is furthest below its best
opponent on the validation split, so that more of the iteration's fixed steps go where the target
has most to learn from its teachers.

Plain data: the accuracies come from the evaluate stage's validation figures
(``flywheel.stages.train_weights.mix_weights``), the rows from the datasets on disk."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping


def gap_weights(target: Mapping[str, float], opponents: Iterable[Mapping[str, float]],
                strength: float) -> dict[str, float]:
    """Per category of the target's validation figures, the mean number of times one of its rows
    appears in the data: 1 + ``strength`` x (the best opponent's validation accuracy there - the
    target's), at least 1 (a category where the target leads keeps every row once). A category
    that no opponent was scored on keeps weight 1."""
    best: dict[str, float] = {}
    for accuracies in opponents:
        for c, a in accuracies.items():
            best[c] = max(best.get(c, 0.0), a)
    return {c: round(1.0 + strength * max(0.0, best[c] - a), 4) for c, a in sorted(target.items()) if c in best}


def copies(weight: float, rng: random.Random) -> int:
    """How many times one row appears, for a mean of ``weight``: its whole part, and one more
    with the chance of its fraction. One draw per row, whatever the weight, so that a row's copies
    do not depend on the weights of the rows before it (a weight under 1 keeps the row with that
    chance, ``train.rl.thin_known``)."""
    whole = math.floor(weight)
    return whole + (rng.random() < weight - whole)


def combine(*weights: Mapping[str, float] | None) -> dict[str, float] | None:
    """Per-category weights multiplied (a category one of them lacks: 1 there); None when none is given."""
    given = [w for w in weights if w is not None]
    if not given:
        return None
    cats = {c for w in given for c in w}
    return {c: math.prod(w.get(c, 1.0) for w in given) for c in sorted(cats)}
