"""Game results from a player's side: wins, draws and losses against each opponent; Hanabi's
team scores per deal."""

from __future__ import annotations

import json
from collections.abc import Iterable

from flywheel.ground.records import SCORE_A, JudgedBattle


def side_score(jb: JudgedBattle, player: str) -> float | None:
    """1 win, 0.5 draw, 0 loss for the seat whose arena name is ``player`` (None: not in it)."""
    a = SCORE_A[jb.winner]
    if jb.battle.model_a == player:
        return a
    if jb.battle.model_b == player:
        return 1.0 - a
    return None


def tally(judged: Iterable[JudgedBattle], player: str) -> dict[str, dict[str, float]]:
    """Per opponent of ``player``: games, win, draw, loss (rates) and win_or_draw."""
    counts: dict[str, list[int]] = {}
    for jb in judged:
        s = side_score(jb, player)
        if s is None:
            continue
        opp = jb.battle.model_b if jb.battle.model_a == player else jb.battle.model_a
        c = counts.setdefault(opp, [0, 0, 0])
        c[0 if s == 1.0 else 1 if s == 0.5 else 2] += 1
    out = {}
    for opp, (w, d, lo) in sorted(counts.items()):
        n = w + d + lo
        out[opp] = {"games": n, "win": round(w / n, 4), "draw": round(d / n, 4), "loss": round(lo / n, 4),
                    "win_or_draw": round((w + d) / n, 4)}
    return out


def win_or_draw(judged: Iterable[JudgedBattle], player: str) -> tuple[float, dict[str, float]]:
    """``player``'s win-or-draw rate over its games, overall and per game (category)."""
    by_cat: dict[str, list[int]] = {}
    for jb in judged:
        s = side_score(jb, player)
        if s is not None:
            by_cat.setdefault(jb.battle.category, []).append(1 if s >= 0.5 else 0)
    every = [x for v in by_cat.values() for x in v]
    if not every:
        return 0.0, {}
    return sum(every) / len(every), {c: sum(v) / len(v) for c, v in sorted(by_cat.items())}


def team_scores(judged: Iterable[JudgedBattle]) -> dict[str, list[int]]:
    """Hanabi: every team's score in each of its games over duplicate battles, from the judge's
    ``raw`` scores (a team that met two teams on one deal played it twice: players that sample
    may score differently)."""
    out: dict[str, list[int]] = {}
    for jb in judged:
        scores = json.loads(jb.judgment.raw or "{}").get("scores") or {}
        for side, team in (("a", jb.battle.model_a), ("b", jb.battle.model_b)):
            if scores.get(side) is not None:
                out.setdefault(team, []).append(scores[side])
    return out


def mean_ci(values: list[float]) -> dict[str, float]:
    """games, mean and its 95% normal interval (``ci_low``, ``ci_high``) of ``values``."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else 0.0
    half = 1.96 * sd / n ** 0.5 if n else 0.0
    return {"games": n, "mean_score": round(mean, 3), "ci_low": round(mean - half, 3), "ci_high": round(mean + half, 3)}
