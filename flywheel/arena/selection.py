"""Choosing battles with bandits: which prompts (category x level cells) and which opponents.

A ``Selector`` holds one prompt bandit per target over the cells of the train pool and, per
target and cell, an opponent bandit over the opponents (the best opponent depends on the
category: specialists are strong in some and weak in others). With ``opponents: pfsp`` the
opponent is drawn by prioritized fictitious self-play weights instead.

What each battle earns the bandits (``select.reward``) is flywheel/arena/bandit_rewards.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flywheel.config.tree import SelectConfig
from flywheel.ground.records import (
    BattleSpec,
    PlayerVersion,
    Prompt,
    stable_id,
    team_name,
    versioned,
)
from flywheel.maths.bandits import Bandit, gini, pfsp_weights

# The opponent arm of self-play (select.self_play): an earlier version of the target itself.
SELF = "self"


EVOLVED = "evolved/"  # the arm prefix of evolved prompts (select.evolve)


def arm_of(p: Prompt) -> str:
    """The selection arm a prompt belongs to: its category x difficulty cell."""
    return f"{p.category}/L{p.level}"


def evolved_arm(p: Prompt) -> str:
    """The arm of an evolved prompt: its cell under ``evolved/``, apart from the pool's prompts."""
    return EVOLVED + arm_of(p)


def seat(battle_key: str, target: str, opponent: str) -> tuple[str, str]:
    """Randomised but reproducible A/B positions for a battle."""
    return (target, opponent) if int(stable_id(battle_key, "seat"), 16) % 2 == 0 else (opponent, target)


def prompt_floor(cfg: SelectConfig, prompt: Bandit) -> float:
    """The share of a round's battles spread evenly over the cells: ``select.prompt_floor``, or
    with ``auto`` 1 - the Gini coefficient of the prompt bandit's value estimates (1, all even,
    before any reward; near 0 where a few cells hold all the value)."""
    if cfg.prompt_floor != "auto":
        return float(cfg.prompt_floor)
    return 1.0 - gini(prompt.means())


def opponent_arms(cfg: SelectConfig, opponents: list[str]) -> list[str]:
    """The opponent arms of a selector: the opponents, and ``self`` with self-play."""
    return list(opponents) + ([SELF] if cfg.self_play else [])


def past_self(version: str, rng: np.random.Generator) -> str:
    """The opponent the ``self`` arm stands for: a uniformly drawn earlier version of
    ``version`` (in the first iteration, when there is none, the version itself)."""
    base, k = PlayerVersion.parse(version)
    return versioned(base, int(rng.integers(0, k))) if k else version


def asker_bandit(cfg: SelectConfig, askers: list[str]) -> Bandit | None:
    """The bandit over askers (one per target, beside its prompt bandit: an asker's worth is
    the target's, whatever the cell), discounted like the prompt bandit; None for fewer than two."""
    return Bandit(list(askers), cfg.policy, cfg.discount, cfg.window, cfg.exploration) if len(askers) > 1 else None


@dataclass
class Selector:
    """Bandit state for one target: a prompt bandit, per-cell opponent bandits and, with several
    askers, an asker bandit."""

    cells: list[str]
    opponents: list[str]
    prompt: Bandit
    per_cell: dict[str, Bandit]
    askers: Bandit | None = None

    @classmethod
    def new(cls, cfg: SelectConfig, cells: list[str], opponents: list[str], askers: list[str] | None = None
            ) -> Selector:
        prompt = Bandit(cells, cfg.policy, cfg.discount, cfg.window, cfg.exploration)
        per_cell = {c: Bandit(opponents, cfg.policy, cfg.opponent_discount, 0, cfg.exploration) for c in cells}
        return cls(cells, opponents, prompt, per_cell, asker_bandit(cfg, askers or []))

    def state(self) -> dict[str, Any]:
        return {"cells": self.cells, "opponents": self.opponents, "prompt": self.prompt.state(),
                "per_cell": {c: b.state() for c, b in self.per_cell.items()},
                **({"askers": self.askers.state()} if self.askers is not None else {})}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Selector:
        return cls(d["cells"], d["opponents"], Bandit.from_state(d["prompt"]),
                   {c: Bandit.from_state(b) for c, b in d["per_cell"].items()},
                   Bandit.from_state(d["askers"]) if d.get("askers") else None)

    def add_askers(self, cfg: SelectConfig, askers: list[str]) -> None:
        """The configured askers, to a restored state: askers configured since join its asker
        bandit unpulled; a state without one (saved with one asker or none) gains one where there
        are several now, and one whose arms are no longer all configured starts afresh."""
        if self.askers is not None and len(askers) > 1 and set(self.askers.arms) <= set(askers):
            self.askers.add_arms(askers)
        else:
            self.askers = asker_bandit(cfg, askers)

    def add_cells(self, cfg: SelectConfig, cells: list[str]) -> None:
        """New prompt cells (evolved prompts' arms), each with a fresh opponent bandit."""
        new = [c for c in cells if c not in self.per_cell]
        self.prompt.add_arms(new)
        self.cells = list(self.prompt.arms)
        for c in new:
            self.per_cell[c] = Bandit(self.opponents, cfg.policy, cfg.opponent_discount, 0, cfg.exploration)

    def choose(self, cfg: SelectConfig, n: int, rng: np.random.Generator,
               opp_win_rates: dict[str, np.ndarray],
               spread_by: dict[str, float] | None = None) -> list[tuple[str, str]]:
        """``n`` (cell, opponent) choices for one round; ``spread_by``: per category, the weight of
        its cells in the share spread over the cells (``select.gap_spread``; None: evenly)."""
        even = round(n * prompt_floor(cfg, self.prompt))
        if spread_by is None:
            spread = [self.cells[i] for i in np.resize(rng.permutation(len(self.cells)), even)]
        else:
            spread = weighted_spread(self.cells, even, spread_by, rng)
        cells = spread + [self.cells[i] for i in self.prompt.select(n - even, rng)]
        out = []
        for c in cells:
            if cfg.opponents == "pfsp":
                w = pfsp_weights(opp_win_rates.get(c, np.full(len(self.opponents), 0.5)), cfg.pfsp_mode, cfg.pfsp_power)
                o = int(rng.choice(len(self.opponents), p=w))
            elif cfg.opponents == "uniform":
                o = int(rng.integers(0, len(self.opponents)))
            else:
                o = int(self.per_cell[c].select(1, rng)[0])
            out.append((c, self.opponents[o]))
        return out

    def update(self, feedback: list[tuple[str, str, float]], asked: list[tuple[str, float]] | None = None) -> None:
        """One round of (cell, opponent, reward), and of (asker, reward) for the asker bandit."""
        if asked and self.askers is not None:
            ai = {a: i for i, a in enumerate(self.askers.arms)}
            self.askers.update([ai[a] for a, _ in asked], [r for _, r in asked])
        if not feedback:
            return
        ci = {c: i for i, c in enumerate(self.cells)}
        oi = {o: i for i, o in enumerate(self.opponents)}
        self.prompt.update([ci[c] for c, _, _ in feedback], [r for _, _, r in feedback])
        by_cell: dict[str, list[tuple[int, float]]] = {}
        for c, o, r in feedback:
            by_cell.setdefault(c, []).append((oi[o], r))
        for c, bandit in self.per_cell.items():
            pulls = by_cell.get(c, [])
            bandit.update([p for p, _ in pulls], [r for _, r in pulls])


def pick_prompts(pool_by_cell: dict[str, list[Prompt]], choices: list[tuple[str, str]], used: set[str],
                 rng: np.random.Generator) -> list[Prompt]:
    """A prompt for each (cell, opponent) choice, unused in this iteration while the cell lasts."""
    out = []
    for cell, _ in choices:
        pool = pool_by_cell[cell]
        fresh = [p for p in pool if p.id not in used] or pool
        p = fresh[int(rng.integers(0, len(fresh)))]
        used.add(p.id)
        out.append(p)
    return out


@dataclass(frozen=True)
class SelectionRound:
    """One target's selection round to plan: ``battles`` train battles for ``target`` (a versioned
    name, e.g. ``student@1``) in round ``rnd`` (1-based) of iteration ``iteration`` of a run seeded
    ``seed``; together they seed the round's draws and name its battles. ``team_seats`` > 0: a
    team game (Hanabi) of that many seats, where the opponent arm is the target's partner: the
    target and its partner (in a seat drawn per battle) play the partner's self-play team on the
    same deal. ``spread_by``: per category, the weight of its cells in the round's evenly spread
    share (``select.gap_spread``; None: evenly)."""

    target: str
    battles: int
    iteration: int
    rnd: int
    seed: int
    team_seats: int = 0
    spread_by: dict[str, float] | None = None


def category_of_arm(arm: str) -> str:
    """The category of a prompt arm (``add/L2``, ``evolved/add/L2``): ``add``."""
    return arm.removeprefix(EVOLVED).rsplit("/L", 1)[0]


def weighted_spread(cells: list[str], n: int, by_category: dict[str, float],
                    rng: np.random.Generator) -> list[str]:
    """``n`` cells, in a random order, each cell's count its quota of ``n`` by its category's weight
    in ``by_category`` (1 for a category it lacks) rounded down, and one more with the chance of the
    quota's fraction: the battles left after the whole parts are drawn by systematic sampling over
    the fractions, the cells taken in a random order, so that a cell gets its quota on average and
    no cell is favoured by its place in the list."""
    w = np.array([by_category.get(category_of_arm(c), 1.0) for c in cells], dtype=float)
    quota = n * w / w.sum()
    counts = np.floor(quota).astype(int)
    left = n - int(counts.sum())
    if left > 0:
        order = rng.permutation(len(cells))
        edges = np.cumsum((quota - counts)[order])
        at = (rng.random() + np.arange(left)) * edges[-1] / left
        counts[order[np.minimum(np.searchsorted(edges, at, side="right"), len(cells) - 1)]] += 1
    out = [c for c, m in zip(cells, counts) for _ in range(m)]
    return [out[i] for i in rng.permutation(len(out))]


def plan_round(
    selector: Selector, cfg: SelectConfig, pool_by_cell: dict[str, list[Prompt]], this_round: SelectionRound,
    used: set[str], *, opp_win_rates: dict[str, np.ndarray] | None = None,
) -> list[BattleSpec]:
    """The battles of one selection round (``this_round``), on prompts of ``pool_by_cell`` whose ids
    are not in ``used`` while a cell lasts (``used`` gains the ids chosen); ``opp_win_rates``: the
    target's win rate per cell against each opponent arm, which ``select.opponents: pfsp`` weighs
    (0.5 where absent)."""
    target, iteration, rnd, seed = this_round.target, this_round.iteration, this_round.rnd, this_round.seed
    rng = np.random.default_rng(int(stable_id(seed, iteration, rnd, target), 16) % 2**63)
    choices = selector.choose(cfg, this_round.battles, rng, opp_win_rates or {}, this_round.spread_by)
    prompts = pick_prompts(pool_by_cell, choices, used, rng)
    askers = [""] * len(choices)
    if selector.askers is not None:  # its own draws: the prompts and opponents are those of one asker
        asker_rng = np.random.default_rng(int(stable_id(seed, iteration, rnd, target, "asker"), 16) % 2**63)
        askers = [selector.askers.arms[i] for i in selector.askers.select(len(choices), asker_rng)]
    specs = []
    for i, ((cell, opponent), p) in enumerate(zip(choices, prompts)):
        if opponent == SELF:
            opponent = past_self(target, rng)
        key = stable_id(seed, iteration, "train", rnd, target, i, p.id, opponent)
        mine = partner_team(key, target, opponent, this_round.team_seats) if this_round.team_seats else target
        a, b = seat(key, mine, opponent)
        specs.append(BattleSpec(battle_id=key, iteration=iteration, phase="train", prompt_id=p.id, model_a=a,
                                model_b=b, arm=cell, asker=askers[i]))
    return specs


def partner_team(key: str, target: str, partner: str, seats: int) -> str:
    """The team of ``target`` and ``partner`` in a game of ``seats``: the partner in every seat but
    one, the target's, drawn from ``key``."""
    members = [partner] * seats
    members[int(stable_id(key, "team-seat"), 16) % seats] = target
    return team_name(members)
