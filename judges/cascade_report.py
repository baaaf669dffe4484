"""What a cascade did, per tier, read from its judgments (``Judgment.cascade``); the tiers' guard;
and the choice of thresholds on battles every tier judged.

Per tier: ``asked`` (battles it judged, audits included for the last tier), ``decided``,
``escalated`` and its share of ``asked``, ``cost_usd`` (``asked`` x the tier's price, each battle
counted at the share of it the tier spent: half where it judged one order),
``per_decisive_usd`` (its cost over the decisive verdicts it gave: a win, not a tie), and its
agreement with the last tier on its audited battles (``audited``, ``agreement`` and a Wilson 95%
interval; a tie and "both bad" agree). Verdicts agree where they give model A the same score.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from flywheel.ground.records import SCORE_A, Battle, Judgment
from judges.cascade import Tier, cascade_of, unsure

DECISIVE = ("model_a", "model_b")


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval of a share ``hits / n`` (None for n = 0)."""
    if n == 0:
        return None
    p = hits / n
    mid, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return round(max(0.0, (mid - half) / (1 + z * z / n)), 4), round(min(1.0, (mid + half) / (1 + z * z / n)), 4)


def agree(a: str | None, b: str | None) -> bool:
    """Whether two verdicts give model A the same score (invalid agrees with nothing)."""
    return a is not None and b is not None and SCORE_A[a] == SCORE_A[b]


def tier_figures(judgments: Iterable[Judgment], prices: Sequence[float]) -> list[dict[str, Any]]:
    """One row per tier (see the module's docstring) over the cascade judgments among ``judgments``."""
    n = len(prices)
    rows = [{"tier": i, "asked": 0, "decided": 0, "escalated": 0, "decisive": 0, "audited": 0, "agree": 0}
            for i in range(n)]
    spent = [0.0] * n
    for j in judgments:
        rec = cascade_of(j)
        if rec is None:
            continue
        for step in rec["trail"]:
            row = rows[step["tier"]]
            row["asked"] += 1
            spent[step["tier"]] += step.get("spent", 1.0)
            row["escalated"] += step["unsure"] is not None
        mine = rows[rec["tier"]]
        mine["decided"] += 1
        mine["decisive"] += j.winner in DECISIVE
        if rec["audit"] is not None:
            rows[-1]["asked"] += 1
            spent[-1] += rec["audit"].get("spent", 1.0)
            if rec["audit"]["winner"] is not None:
                mine["audited"] += 1
                mine["agree"] += agree(j.winner, rec["audit"]["winner"])
    for row, price, share in zip(rows, prices, spent):
        row["escalated_share"] = round(row["escalated"] / row["asked"], 4) if row["asked"] else None
        row["cost_usd"] = round(share * price, 6)
        row["per_decisive_usd"] = round(row["cost_usd"] / row["decisive"], 6) if row["decisive"] else None
        row["agreement"] = round(row["agree"] / row["audited"], 4) if row["audited"] else None
        row["agreement_ci"] = wilson(row["agree"], row["audited"])
    rows[-1]["agreement"], rows[-1]["agreement_ci"] = 1.0, None  # the last tier is the yardstick
    return rows


def cascade_section(judgments: Iterable[Judgment], names: Sequence[str], prices: Sequence[float],
                    metered: Sequence[float | None] = ()) -> dict[str, Any]:
    """The summary's ``judge.cascade``: per tier (by its index) ``tier_figures`` with its judge's
    name, and the whole cascade's verdicts, cost and cost per decisive verdict. ``metered``: per
    tier, what its API calls cost (None or 0: not metered); where given, it is the tier's cost
    (``cost_source: metered``), else its price x the battles it judged (``price``)."""
    js = [j for j in judgments if j.cascade]
    rows = tier_figures(js, prices)
    for row, name in zip(rows, names):
        usd = metered[row["tier"]] if row["tier"] < len(metered) else None
        row["judge"] = name
        row["cost_source"] = "metered" if usd else "price"
        if usd:
            row["cost_usd"] = round(usd, 6)
            row["per_decisive_usd"] = round(usd / row["decisive"], 6) if row["decisive"] else None
    decisive = sum(1 for j in js if j.winner in DECISIVE)
    cost = round(sum(r["cost_usd"] for r in rows), 6)
    total = {"judged": len(js), "decisive": decisive, "invalid": sum(1 for j in js if not j.valid),
             "cost_usd": cost, "per_decisive_usd": round(cost / decisive, 6) if decisive else None}
    return {"tiers": {str(r["tier"]): r for r in rows}, "total": total}


def low_agreement(rows: list[dict[str, Any]], floor: float, least: int, off: Iterable[int] = ()) -> list[int]:
    """The tiers (not the last, not already ``off``) whose agreement over at least ``least`` audits
    is under ``floor``."""
    skip = set(off)
    return [r["tier"] for r in rows[:-1]
            if r["tier"] not in skip and r["audited"] >= least and r["agreement"] < floor]


@dataclass(frozen=True)
class Choice:
    """Thresholds (None: not read) and tie rules of the tiers, and what they gave on the battles:
    agreement with the last tier, the mean cost per battle, and the share each tier decided."""

    thresholds: tuple[float | None, ...]
    escalate_ties: tuple[bool, ...]
    agreement: float
    cost_per_battle: float
    decided: tuple[float, ...] = ()


def deciders(battles: Sequence[Battle], verdicts: Sequence[Sequence[Judgment]], tiers: Sequence[Tier]) -> list[int]:
    """The tier that decides each battle: the first one sure of its verdict, else the last."""
    last = len(tiers) - 1
    return [next((i for i, tier in enumerate(tiers[:-1]) if unsure(b, verdicts[i][n], tier) is None), last)
            for n, b in enumerate(battles)]


def simulate(battles: Sequence[Battle], verdicts: Sequence[Sequence[Judgment]],
             tiers: Sequence[Tier]) -> tuple[float, float]:
    """(agreement with the last tier, mean cost per battle) of the cascade ``tiers`` on ``battles``
    whose verdicts by every tier are known (``verdicts[i][n]``: tier i's on battle n). Agreement
    counts the battles the last tier gave a valid verdict."""
    last, hits, valid, cost = len(tiers) - 1, 0, 0, 0.0
    paid = list(itertools.accumulate(t.price for t in tiers))
    for n, i in enumerate(deciders(battles, verdicts, tiers)):
        cost += paid[i]
        valid += verdicts[last][n].valid
        hits += agree(verdicts[i][n].winner, verdicts[last][n].winner)
    return hits / max(valid, 1), cost / max(len(battles), 1)


def outcome(battles: Sequence[Battle], verdicts: Sequence[Sequence[Judgment]], tiers: Sequence[Tier]) -> Choice:
    """What the cascade ``tiers``, as they are set, gives on these battles: its earlier tiers'
    thresholds and tie rules, its agreement with the last tier, cost per battle, and the share of the
    battles each tier decided."""
    agreement, cost = simulate(battles, verdicts, tiers)
    by = deciders(battles, verdicts, tiers)
    return Choice(tuple(t.threshold for t in tiers[:-1]), tuple(t.escalate_ties for t in tiers[:-1]),
                  round(agreement, 4), round(cost, 6),
                  tuple(round(by.count(i) / max(len(by), 1), 4) for i in range(len(tiers))))


def observed_thresholds(js: Sequence[Judgment], most: int) -> tuple[float, ...]:
    """The thresholds worth trying on a tier's verdicts ``js``: midway between each two confidences
    it gave (any threshold between them sends the same verdicts on), at most ``most``, evenly
    spread over them."""
    seen = sorted({j.confidence for j in js if j.confidence is not None})
    mids = [round((lo + hi) / 2, 4) for lo, hi in zip(seen, seen[1:])]
    if len(mids) > most:
        mids = [mids[round(k * (len(mids) - 1) / max(most - 1, 1))] for k in range(most)]
    return tuple(dict.fromkeys(mids))


def _levels_each(with_confidence: int, tiers: int, most: int) -> int:
    """How many thresholds each of ``with_confidence`` tiers (of ``tiers`` earlier tiers) may try so
    that their combinations (threshold or none, ties escalated or decided) stay near ``most``."""
    if with_confidence == 0:
        return 0
    budget = most / 2 ** (tiers - with_confidence)
    return max(1, int(budget ** (1 / with_confidence) / 2) - 1)


def choose_thresholds(battles: Sequence[Battle], verdicts: Sequence[Sequence[Judgment]], tiers: Sequence[Tier],
                      target: float, grid: Sequence[float] | None = None, most: int = 5000) -> Choice:
    """The thresholds and tie rules of the earlier tiers that reach ``target`` agreement with the last
    tier on these battles (a validation split, judged by every tier) at the least cost; where none
    does, the one that agrees most. Thresholds are tried for tiers that gave confidences: those of
    ``grid``, or else midway between the confidences each gave (about ``most`` combinations in all)."""
    gave = [any(j.confidence is not None for j in js) for js in verdicts[:-1]]
    each = _levels_each(sum(gave), len(tiers) - 1, most)
    options = []
    for js, has_conf in zip(verdicts, gave):
        levels = [None, *(grid if grid is not None else observed_thresholds(js, each))] if has_conf else [None]
        options.append([(t, e) for t in levels for e in (True, False)])
    best: Choice | None = None
    for combo in itertools.product(*options):
        trial = [replace(t, threshold=c[0], escalate_ties=c[1]) for t, c in zip(tiers, combo)] + [tiers[-1]]
        agreement, cost = simulate(battles, verdicts, trial)
        choice = Choice(tuple(c[0] for c in combo), tuple(c[1] for c in combo), round(agreement, 4), round(cost, 6))
        if best is None or _better(choice, best, target):
            best = choice
    assert best is not None
    chosen = [replace(t, threshold=th, escalate_ties=e) for t, th, e in zip(tiers, best.thresholds, best.escalate_ties)]
    return outcome(battles, verdicts, [*chosen, tiers[-1]])


def _better(a: Choice, b: Choice, target: float) -> bool:
    reach_a, reach_b = a.agreement >= target, b.agreement >= target
    if reach_a != reach_b:
        return reach_a
    if reach_a:
        return (a.cost_per_battle, -a.agreement) < (b.cost_per_battle, -b.agreement)
    return (a.agreement, -a.cost_per_battle) > (b.agreement, -b.cost_per_battle)
