"""A judge cascade: tiers of judges, cheapest first; a battle goes to the next tier only where the
current one is unsure, and the last tier (the strongest) decides whatever reaches it.

A tier is unsure of a battle when:

- it cannot check it (a verifier, where there is no reference answer);
- its verdict is invalid (a failed call, unparseable output: the failure is recorded);
- the two orders disagree (``Judgment.flip``);
- it is a tie (unless the tier's ``ties`` is ``decide``);
- its confidence, where the API returned log-probabilities, is under the tier's ``threshold``.

The audit: of the battles an earlier tier decided, a share drawn by seed (each battle by a hash of
the seed and its id alone, so the draw is the same however the battles are batched) also goes to
the last tier. Its verdict is recorded beside the decision and measures the tier's agreement with
the last tier; the decision stands, and the battle counts once. A battle that reached the last tier
anyway is never audited.

Each judgment is the deciding tier's, with ``Judgment.cascade`` (JSON): the tier that decided, what
every tier it passed said (``trail``: judge, winner, flip, confidence, error, why it was unsure) and
the audit's verdict, if any; each step and the audit record ``spent``, the share of the tier's
price it cost (0.5 where a tier judging the second order only when unsure was sure of one order).
The last tier, with ``second_order`` ``when_unsure``, judges one order, and the other only where
that verdict's confidence is under its ``threshold`` (judges/llm.py); its steps say so, and the
flips it shows are left out of position-bias rates (``flip_sampled``). Tiers the
guard turned off (``bypass``: a callable, asked at each batch, giving (tier, judge name) pairs; a
pair whose name is no longer that tier's is ignored) are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from flywheel.config.parts import CascadeConfig, CascadeTier
from flywheel.ground.records import Battle, Judgment, stable_id
from judges.pairwise import PairwiseJudge

TIES = ("tie", "tie (bothbad)")


@dataclass(frozen=True)
class Tier:
    """One judge of the cascade. ``price``: USD per battle it judges; ``threshold``: the least
    confidence a verdict needs to stand (None: not read); ``escalate_ties``: a tie goes on;
    ``exact``: a verifier, unsure only where it cannot check. (A tier's judge carries how it judges
    the orders: ``LLMJudge(second_order=...)``.)"""

    judge: PairwiseJudge
    price: float
    threshold: float | None = None
    escalate_ties: bool = True
    exact: bool = False

    @classmethod
    def from_config(cls, judge: PairwiseJudge, tc: CascadeTier) -> Tier:
        """The tier ``tc`` (one of ``judge.cascade.tiers``) judging with ``judge``, built from it."""
        return cls(judge=judge, price=tc.cost, threshold=tc.threshold, escalate_ties=tc.ties == "escalate",
                   exact=tc.kind == "verifier")


def unsure(b: Battle, j: Judgment, tier: Tier) -> str | None:
    """Why ``tier`` is unsure of its verdict ``j`` on ``b`` (None: it is sure)."""
    if not j.valid:
        return "no reference" if tier.exact and "reference" in (j.error or "") else "failed"
    if j.flip:
        return "orders disagree"
    if tier.escalate_ties and j.winner in TIES:
        return "tie"
    if tier.threshold is not None and j.confidence is not None and j.confidence < tier.threshold:
        return "low confidence"
    return None


def audited(battle_id: str, seed: int, share: float) -> bool:
    """Whether the audit draws this battle: a hash of (seed, battle id) under ``share``."""
    return share > 0 and int(stable_id("audit", seed, battle_id), 16) < share * 16**16


def _said(j: Judgment, spent: float = 1.0) -> dict[str, Any]:
    return {"judge": j.judge, "winner": j.winner, "flip": j.flip, "confidence": j.confidence, "error": j.error,
            "spent": spent}


class CascadeJudge(PairwiseJudge):
    def __init__(self, tiers: Sequence[Tier], audit_share: float = 0.05, audit_seed: int = 0,
                 bypass: Callable[[], Iterable[tuple[int, str]]] | None = None) -> None:
        if len(tiers) < 2:
            raise ValueError("a cascade needs at least two tiers")
        self.tiers = list(tiers)
        self.audit_share = audit_share
        self.audit_seed = audit_seed
        self.bypass = bypass or (lambda: ())
        self.name = "cascade:" + ">".join(t.judge.name for t in self.tiers)
        self.model = self.tiers[-1].judge.model

    @classmethod
    def from_config(cls, tiers: Sequence[Tier], cc: CascadeConfig,
                    bypass: Callable[[], Iterable[tuple[int, str]]] | None = None) -> CascadeJudge:
        """The cascade ``judge.cascade`` (``cc``) describes, over ``tiers`` (built from its tiers):
        its audit share and seed from the config."""
        return cls(tiers, audit_share=cc.audit_share, audit_seed=cc.audit_seed, bypass=bypass)

    def llm_judges(self) -> list:
        return [j for t in self.tiers for j in t.judge.llm_judges()]

    def active(self) -> list[int]:
        """The tiers that judge now: all but those the guard turned off (never the last)."""
        off = set(self.bypass())
        last = len(self.tiers) - 1
        return [i for i, t in enumerate(self.tiers) if (i, t.judge.name) not in off or i == last]

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        last = len(self.tiers) - 1
        trail: dict[str, list[dict[str, Any]]] = {b.battle_id: [] for b in battles}
        decided: dict[str, tuple[int, Judgment]] = {}
        pending = list(battles)
        for i in self.active():
            if not pending:
                break
            tier, passed = self.tiers[i], []
            one_first = getattr(tier.judge, "when_unsure", False)
            for b, (j, spent) in zip(pending, tier.judge.judge_costed(pending)):
                why = unsure(b, j, tier) if i < last else None
                step = {"tier": i, **_said(j, spent), "unsure": why}
                trail[b.battle_id].append({**step, "second_order": "when_unsure"} if one_first else step)
                if why is None:
                    decided[b.battle_id] = (i, j)
                else:
                    passed.append(b)
            pending = passed
        audits = [b for b in battles if decided[b.battle_id][0] < last
                  and audited(b.battle_id, self.audit_seed, self.audit_share)]
        checked = dict(zip((b.battle_id for b in audits),
                           self.tiers[last].judge.judge_costed(audits))) if audits else {}
        return [self._record(b, *decided[b.battle_id], trail[b.battle_id], checked.get(b.battle_id)) for b in battles]

    @staticmethod
    def _record(b: Battle, tier: int, j: Judgment, trail: list[dict[str, Any]],
                audit: tuple[Judgment, float] | None) -> Judgment:
        record = {"tier": tier, "trail": trail, "audit": None if audit is None else _said(*audit)}
        return replace(j, cascade=json.dumps(record))


def flip_sampled(j: Judgment) -> bool:
    """Whether ``j.flip`` (where set) samples the judge's position bias evenly: not where the tier
    that decided asked the second order only when unsure, so only its closest calls show a flip."""
    rec = cascade_of(j)
    return rec is None or rec["trail"][-1].get("second_order") != "when_unsure"


def cascade_of(j: Judgment) -> dict[str, Any] | None:
    """A cascade judgment's record (tier, trail, audit), or None for any other judgment."""
    return json.loads(j.cascade) if j.cascade else None
