"""Bias diagnostics of a judge over a set of judged battles.

- ``flip_rate``: share of battles judged in both orders whose verdicts disagreed (position bias).
- ``length_bias``: among decisive verdicts between responses of different lengths, how often the
  longer one won (0.5 = no preference; a verifier's figure is the data's own lean).
- ``self_preference``: when the judge's own model is a contestant, its win rate under this judge
  next to its win rate under the other panel members, or against the reference answers.
- ``agreement``: for panels, Fleiss' kappa over battles every member judged (Cohen's for two).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from flywheel.ground.records import Battle, Judgment, base_name
from judges.cascade import flip_sampled
from judges.pairwise import PairwiseJudge
from judges.panel import cohen_kappa, fleiss_kappa, majority, vote
from judges.verifier import VerifierJudge


def _rate(hits: int, n: int) -> float | None:
    return round(hits / n, 4) if n else None


def flip_rate(judgments: list[Judgment]) -> dict[str, Any]:
    both = [j for j in judgments if j.flip is not None and flip_sampled(j)]
    return {"rate": _rate(sum(1 for j in both if j.flip), len(both)), "judged_both_orders": len(both)}


def length_bias(pairs: list[tuple[Battle, str | None]]) -> dict[str, Any]:
    n = longer = 0
    for b, winner in pairs:
        if winner not in ("model_a", "model_b") or len(b.response_a) == len(b.response_b):
            continue
        n += 1
        a_longer = len(b.response_a) > len(b.response_b)
        longer += (winner == "model_a") == a_longer
    return {"longer_wins": _rate(longer, n), "decisive": n}


def _wins_of(model: str, pairs: list[tuple[Battle, str | None]]) -> tuple[int, int]:
    """(wins, decisive battles) of ``model`` among ``pairs``."""
    wins = n = 0
    for b, winner in pairs:
        seat = "model_a" if base_name(b.model_a) == model else "model_b" if base_name(b.model_b) == model else None
        if seat is None or winner not in ("model_a", "model_b"):
            continue
        n += 1
        wins += winner == seat
    return wins, n


def self_preference(model: str, pairs: list[tuple[Battle, str | None]],
                    baseline: list[tuple[Battle, str | None]], baseline_name: str) -> dict[str, Any]:
    w, n = _wins_of(model, pairs)
    bw, bn = _wins_of(model, baseline)
    own, other = _rate(w, n), _rate(bw, bn)
    return {"model": model, "decisive": n, "win_rate": own, f"win_rate_{baseline_name}": other,
            "excess": round(own - other, 4) if own is not None and other is not None else None}


def _reference_verdicts(battles: list[Battle], verifier: PairwiseJudge) -> list[tuple[Battle, str | None]]:
    checkable = [b for b in battles if b.reference is not None]
    return [(b, j.winner) for b, j in zip(checkable, verifier.judge(checkable))]


def diagnose(battles: list[Battle], judgments: dict[str, Judgment], judge_model: str | None = None,
             verifier: PairwiseJudge | None = None, judge_name: str | None = None) -> dict[str, Any]:
    """The report's judge section for these battles (only those with a judgment count).
    ``verifier`` (default: exact match) gives the reference verdicts for self-preference."""
    judged = [(b, judgments[b.battle_id]) for b in battles if b.battle_id in judgments]
    js = [j for _, j in judged]
    pairs = [(b, j.winner) for b, j in judged]
    contestants = {base_name(m) for b, _ in judged for m in (b.model_a, b.model_b)}
    out: dict[str, Any] = {
        "judge": judge_name or (js[0].judge if js else None),
        "judged": len(js),
        "by_judge": dict(sorted(Counter(j.judge for j in js).items())),  # a hybrid's two halves
        "invalid": sum(1 for j in js if not j.valid),
        "flip_rate": flip_rate(js),
        "length_bias": length_bias(pairs),
    }
    if judge_model and judge_model in contestants:
        out["self_preference"] = self_preference(judge_model, pairs, _reference_verdicts([b for b, _ in judged], verifier or VerifierJudge()),
                                                 "by_reference")
    if any(j.members for j in js):
        out["panel"] = _panel(judged)
    return out


def _panel(judged: list[tuple[Battle, Judgment]]) -> dict[str, Any]:
    rows = [(b, json.loads(j.members)) for b, j in judged if j.members]
    names = [m["judge"] for m in rows[0][1]]
    members: dict[str, Any] = {}
    for i, name in enumerate(names):
        mine = [(b, ms[i]["winner"]) for b, ms in rows]
        flips = [ms[i]["flip"] for _, ms in rows if ms[i]["flip"] is not None]
        entry: dict[str, Any] = {
            "invalid": sum(1 for _, w in mine if w is None),
            "flip_rate": _rate(sum(1 for f in flips if f), len(flips)),
            "length_bias": length_bias(mine)["longer_wins"],
        }
        model = rows[0][1][i].get("model")
        contestants = {base_name(m) for b, _ in rows for m in (b.model_a, b.model_b)}
        if model and model in contestants:
            # The other members' verdicts on the same battles: a majority of them, per battle.
            others = [(b, majority([ms[x]["winner"] for x in range(len(names)) if x != i])) for b, ms in rows]
            entry["self_preference"] = self_preference(model, mine, others, "by_others")
        members[name] = entry
    complete = [[vote(m["winner"]) for m in ms] for _, ms in rows if all(m["winner"] for m in ms)]
    kappa = (cohen_kappa([v[0] for v in complete], [v[1] for v in complete]) if len(names) == 2
             else fleiss_kappa(complete))
    return {"members": members, "kappa": None if kappa is None else round(kappa, 4),
            "kappa_kind": "cohen" if len(names) == 2 else "fleiss", "all_members_valid": len(complete)}

