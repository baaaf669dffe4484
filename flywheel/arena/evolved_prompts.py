"""Evolving prompts after an iteration's battles (``select.evolve``): the arms that yielded most
give the parents, the procedural evolver or a player rewrites them, and what survives the
decontamination joins the train pool with its lineage (flywheel/worlds/evolution.py says how
prompts are rewritten and what is refused; flywheel/stages/evolve.py stores them).

The yield of a battle is the ``yield`` reward's (flywheel/arena/bandit_rewards.py): 1 where the target
lost on a prompt that had not yielded yet this iteration, a new training example.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flywheel.arena import bandit_rewards
from flywheel.config.tree import PROCEDURAL, EvolveConfig
from flywheel.ground.records import EvolvedPrompt, JudgedBattle, Prompt, stable_id
from flywheel.worlds.evolution import HeldOut, instructions, procedural, rewritten

# A player evolver: instructions in, replies out (None where a call failed), in order.
Ask = Callable[[list[Prompt]], list[str | None]]


@dataclass(frozen=True)
class ArmYield:
    """An arm's battles in one iteration (over every target) and the new examples they made."""

    battles: int
    new: int

    @property
    def rate(self) -> float:
        return self.new / self.battles if self.battles else 0.0


def arm_yields(judged: list[JudgedBattle], targets: Iterable[str]) -> tuple[dict[str, ArmYield], set[str]]:
    """Per arm, the targets' train battles and their yield; and the prompts that yielded."""
    battles: dict[str, int] = {}
    new: dict[str, int] = {}
    yielded: set[str] = set()
    for t in targets:
        mine = [jb for jb in judged if bandit_rewards.plays(jb.battle, t)]
        for jb, (arm, _, reward) in zip(mine, bandit_rewards.feedback("yield", mine, t, {}, set())):
            battles[arm] = battles.get(arm, 0) + 1
            new[arm] = new.get(arm, 0) + int(reward)
            if reward:
                yielded.add(jb.battle.prompt_id)
    return {a: ArmYield(battles[a], new[a]) for a in sorted(battles)}, yielded


def top_arms(yields: dict[str, ArmYield], n: int) -> list[str]:
    """The ``n`` arms that yielded most per battle (an arm that yielded nothing never)."""
    ranked = sorted((a for a, y in yields.items() if y.new), key=lambda a: (-yields[a].rate, a))
    return ranked[:n]


def choose_parents(judged: list[JudgedBattle], arms: list[str], yielded: set[str], prompts: dict[str, Prompt],
                   n: int) -> list[Prompt]:
    """Up to ``n`` prompts played in ``arms`` this iteration, taken from the arms in turn; in each,
    the prompts that yielded first, then the rest, in the order they were played."""
    queues: dict[str, list[str]] = {a: [] for a in arms}
    for jb in judged:
        q = queues.get(jb.battle.arm)
        if q is not None and jb.battle.prompt_id not in q and jb.battle.prompt_id in prompts:
            q.append(jb.battle.prompt_id)
    for a, q in queues.items():
        queues[a] = [p for p in q if p in yielded] + [p for p in q if p not in yielded]
    out: list[Prompt] = []
    while len(out) < n and any(queues.values()):
        for a in arms:
            if queues[a] and len(out) < n:
                out.append(prompts[queues[a].pop(0)])
    return out


@dataclass
class Evolution:
    """What one iteration's evolving made and refused (by why: exact, twin, near-duplicate,
    duplicate of a train prompt, not applicable, no usable rewrite)."""

    prompts: list[EvolvedPrompt] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)

    def refuse(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1


@dataclass(frozen=True)
class EvolveRequest:
    """One iteration's evolving: ``parents`` rewritten under ``cfg`` in iteration ``k`` of a run
    seeded ``seed``; ``lineage`` holds the evolved prompts so far by id (a parent's generation),
    ``train_texts`` the texts already in the train pool, ``held`` the eval and validation splits,
    ``max_level`` the highest level procedural depth may reach."""

    parents: list[Prompt]
    cfg: EvolveConfig
    k: int
    seed: int
    lineage: dict[str, EvolvedPrompt]
    train_texts: frozenset[str]
    held: HeldOut
    max_level: int


def _plan(req: EvolveRequest) -> list[tuple[Prompt, list[str]]]:
    """Per parent, the methods to try in order: the methods in turn (parent i starts at method
    i), less those the parent was evolved by before; a parent with none left is skipped."""
    done = {(e.parent_id, e.method) for e in req.lineage.values()}
    methods = req.cfg.methods
    out = []
    for i, p in enumerate(req.parents):
        order = [m for m in methods[i % len(methods):] + methods[:i % len(methods)] if (p.id, m) not in done]
        if order:
            out.append((p, order))
    return out


def _procedural(req: EvolveRequest, parent: Prompt, order: list[str]) -> tuple[str, Prompt | None]:
    """The first method of ``order`` that applies to the parent, and what it made."""
    for m in order:
        new = procedural(parent, m, random.Random(stable_id(req.seed, req.k, parent.id, m)))
        if new is not None and new.level <= req.max_level:
            return m, new
    return order[0], None


def evolve(req: EvolveRequest, ask: Ask | None = None) -> Evolution:
    """Rewrite every parent once (``ask``: the player evolver; None: procedural) and keep what
    is new and clean."""
    evolver = req.cfg.evolver
    if ask is None or evolver == PROCEDURAL:
        tried = [(p, *_procedural(req, p, order)) for p, order in _plan(req)]
    else:
        plan = [(p, order[0]) for p, order in _plan(req)]
        asks = [Prompt(stable_id("evolve", p.id, m), instructions(m, p.text, req.cfg.depth_template,
                                                                  req.cfg.breadth_template), p.category, p.level)
                for p, m in plan]
        replies = ask(asks)
        tried = [(p, m, None if r is None or (t := rewritten(r, p.text, req.cfg.max_chars)) is None else
                  Prompt("", t, p.category, p.level + (m == "depth"), None, "train"))
                 for (p, m), r in zip(plan, replies)]
    out = Evolution()
    seen = set(req.train_texts)
    for parent, method, new in tried:
        if new is None:
            out.refuse("no rewrite")
            continue
        key = " ".join(new.text.split())
        why = req.held.clash(new.category, new.text) or ("duplicate" if key in seen else None)
        if why is None and len(new.text) > req.cfg.max_chars:
            why = "too long"
        if why:
            out.refuse(why)
            continue
        seen.add(key)
        before = req.lineage.get(parent.id)
        out.prompts.append(EvolvedPrompt(
            id=stable_id("evolved", parent.id, method, evolver, new.text), text=new.text, category=new.category,
            level=new.level, reference=new.reference, parent_id=parent.id, method=method, evolver=evolver,
            generation=(before.generation if before else 0) + 1, iteration=req.k))
    return out
