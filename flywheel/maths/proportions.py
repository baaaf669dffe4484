"""A proportion's confidence interval: the Wilson score interval, for an accuracy over prompts.

Plain floats in and out. The Wilson interval stays inside [0, 1] and keeps its coverage near 0
and 1, where the normal approximation (p +- z * sqrt(p (1 - p) / n)) collapses to a point."""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: a two-sided 95% interval


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of ``successes`` out of ``n`` trials, as
    (lower, upper); (0.0, 1.0) for no trials (nothing is known)."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} not in 0..{n}")
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)
