"""Typed records that flow between the stages of an iteration.

Every stage takes and returns these, never loose dicts. They are frozen dataclasses so that a
record written to the battle log is exactly the record a later stage reads back; ``to_row`` and
``from_row`` are the (flat, parquet-friendly) on-disk form.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

Winner = Literal["model_a", "model_b", "tie", "tie (bothbad)"]
WINNERS: tuple[str, ...] = ("model_a", "model_b", "tie", "tie (bothbad)")
Phase = Literal["train", "eval"]
# Model A's score for each verdict (B's is one minus it): the only winner-to-score map.
SCORE_A: dict[str, float] = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}

R = TypeVar("R")


def stable_id(*parts: object, length: int = 16) -> str:
    """A short hex digest of ``parts``: the same inputs give the same id on every machine."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return digest[:length]


class PlayerVersion(NamedTuple):
    """An arena name: a player's base name and, for a target, its version (``student@2``)."""

    name: str
    k: int | None = None

    @classmethod
    def parse(cls, arena_name: str) -> PlayerVersion:
        if TEAM in arena_name:  # a team is a name of its own, never a version
            return cls(arena_name, None)
        base, _, k = arena_name.partition("@")
        return cls(base, int(k) if k else None)

    def __str__(self) -> str:
        return self.name if self.k is None else f"{self.name}@{self.k}"


def versioned(name: str, k: int) -> str:
    """The arena name of version ``k`` of player ``name``."""
    return str(PlayerVersion(name, k))


def base_name(arena_name: str) -> str:
    """The player an arena name belongs to (``student@2`` -> ``student``)."""
    return PlayerVersion.parse(arena_name).name


TEAM = "+"


def team_name(members: list[str]) -> str:
    """The arena name of a team (Hanabi's duplicate battles): its players by seat, joined by ``+``."""
    return TEAM.join(members)


def team_members(arena_name: str) -> list[str]:
    """The players of a team by seat (a plain name is a team of itself alone)."""
    return arena_name.split(TEAM)


def in_side_a(model_a: str, model_b: str, player: str) -> bool:
    """Whether ``player`` (a version, or a base name) plays on side A of a battle between
    ``model_a`` and ``model_b`` (players or teams). An exact version decides before a base name;
    where both sides hold the player (self-play), side A, unless only side B is a team of several
    (a duplicate battle of the player and its partner against the partner's self-play team)."""
    a, b = team_members(model_a), team_members(model_b)
    if player not in a and player not in b:
        player = base_name(player)
        a, b = [base_name(m) for m in a], [base_name(m) for m in b]
    if player in a and player in b:
        return TEAM in model_a or TEAM not in model_b
    return player in a


class _Row:
    """Flat-row conversion shared by the records (parquet and JSON friendly). Every field is a
    scalar, so a row is a shallow dict; the field names are looked up once per class (the logs
    hold millions of rows)."""

    def to_row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _field_names(type(self))}

    @classmethod
    def from_row(cls: type[R], row: dict[str, Any]) -> R:
        names = _field_names(cls)
        return cls(**{k: v for k, v in row.items() if k in names})


@functools.cache
def _field_names(cls: type) -> dict[str, None]:
    """The record's field names, in order (a dict: ordered, with fast membership)."""
    return dict.fromkeys(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class Prompt(_Row):
    """One task prompt. ``reference`` is the checkable answer, when there is one."""

    id: str
    text: str
    category: str
    level: int
    reference: str | None = None
    split: str = "train"


@dataclass(frozen=True)
class BattleSpec(_Row):
    """A battle the selector decided to run: who plays whom on which prompt, in which seat."""

    battle_id: str
    iteration: int
    phase: str
    prompt_id: str
    model_a: str
    model_b: str
    arm: str = ""


@dataclass(frozen=True)
class Generation(_Row):
    """A player's answer to one prompt. A failed call has ``error`` set and must not be judged."""

    player: str
    prompt_id: str
    text: str
    error: str | None = None
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Battle(_Row):
    """A battle that was played: both responses, stored in the append-only battle log."""

    battle_id: str
    iteration: int
    phase: str
    prompt_id: str
    prompt: str
    category: str
    level: int
    reference: str | None
    model_a: str
    model_b: str
    response_a: str
    response_b: str
    error: str | None = None
    arm: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Judgment(_Row):
    """A judge's decision on one battle. ``winner`` is None when the judgment is invalid.

    ``margin`` is the verdict's strength (0 for a tie). ``flip`` says whether the two orders
    disagreed (None when only one order was judged); ``members`` holds a panel's member verdicts
    as JSON."""

    battle_id: str
    judge: str
    winner: Winner | None
    margin: float = 1.0
    score_a: float | None = None
    score_b: float | None = None
    raw: str = ""
    error: str | None = None
    flip: bool | None = None
    members: str = ""

    @property
    def valid(self) -> bool:
        return self.winner is not None


@dataclass(frozen=True)
class JudgedBattle:
    """A battle joined with its valid judgment (the store's ``judged``): what ratings, rewards
    and curation read."""

    battle: Battle
    judgment: Judgment

    @property
    def winner(self) -> Winner:
        return self.judgment.winner  # type: ignore[return-value]  # valid: never None

    def score_of(self, player: str) -> float:
        """The score (1 win, 0.5 tie, 0 loss) of the side ``player`` (a base name) plays on (``in_side_a``)."""
        a = SCORE_A[self.winner]
        return a if in_side_a(self.battle.model_a, self.battle.model_b, player) else 1.0 - a


@dataclass(frozen=True)
class SFTExample(_Row):
    """A curated supervised example: the winning response to a prompt the target lost."""

    prompt: str
    completion: str
    prompt_id: str
    category: str
    source_model: str
    battle_id: str
    iteration: int
    target: str


@dataclass(frozen=True)
class DPOPair(_Row):
    """A curated preference pair from a decisive battle."""

    prompt: str
    chosen: str
    rejected: str
    prompt_id: str
    category: str
    chosen_model: str
    rejected_model: str
    battle_id: str
    iteration: int
    target: str
