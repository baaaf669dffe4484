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
    """One task prompt. ``reference`` is the checkable answer, when there is one.

    A conversation (``flywheel.ground.conversation``): ``turns`` holds the later user turns given up
    front (MT-Bench), JSON-encoded; ``history`` the messages before ``text`` (JSON, ``[{"role":
    "user" | "assistant", "content": ...}]``) when a player is asked in the middle of a conversation
    or after a teacher's one-shot example (``select.teaching``). Both are empty for a prompt asked
    alone."""

    id: str
    text: str
    category: str
    level: int
    reference: str | None = None
    split: str = "train"
    turns: str = ""
    history: str = ""


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
    asker: str = ""  # the asker that writes its follow-ups, where a bandit chose one of several


@dataclass(frozen=True)
class Generation(_Row):
    """A player's answer to one prompt. A failed call has ``error`` set and must not be judged."""

    player: str
    prompt_id: str
    text: str
    error: str | None = None
    latency_s: float = 0.0
    token_logprobs: tuple[tuple[str, float], ...] = ()  # (token, log-probability) of each token, where asked

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
    conversation_a: str = ""
    conversation_b: str = ""
    asker: str = ""  # the asker the selector chose for it (several askers); empty: the only one, or none

    @classmethod
    def from_spec(cls, spec: BattleSpec, prompt: Prompt, *, response_a: str, response_b: str,
                  error: str | None = None, asker: str = "") -> Battle:
        """The battle ``spec`` planned, as played on ``prompt``: its id, seats and arm from the spec,
        the task from the prompt, and both sides' responses. ``asker``: the asker the battle was
        played with (a conversation's; the spec's choice), else empty."""
        return cls(battle_id=spec.battle_id, iteration=spec.iteration, phase=spec.phase, prompt_id=prompt.id,
                   prompt=prompt.text, category=prompt.category, level=prompt.level, reference=prompt.reference,
                   model_a=spec.model_a, model_b=spec.model_b, response_a=response_a, response_b=response_b,
                   error=error, arm=spec.arm, asker=asker)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def multi_turn(self) -> bool:
        """Whether the battle was a conversation: then ``conversation_a`` / ``_b`` hold each side's
        messages (JSON; user turns may carry their ``reference``) and ``response_a`` / ``_b`` the
        last assistant turn. Empty for a single-turn battle (and in logs from before conversations)."""
        return bool(self.conversation_a)


@dataclass(frozen=True)
class Judgment(_Row):
    """A judge's decision on one battle. ``winner`` is None when the judgment is invalid.

    ``margin`` is the verdict's strength (0 for a tie). ``flip`` says whether the two orders
    disagreed (None when only one order was judged); ``members`` holds a panel's member verdicts
    as JSON; ``turns``, for a conversation judged turn by turn, each user turn's mark per seat as
    JSON (``{"a": [1, 0], "b": [1, 1]}``: 1 right, 0 wrong, null unchecked). ``confidence``: the
    probability the judge gave the verdict it wrote, from the API's log-probabilities (the lower
    of both orders; None where none were returned). ``cascade``: a cascade's record as JSON, the
    tier that decided, what each tier it passed said, and the audit's verdict (judges/cascade.py)."""

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
    turns: str = ""
    confidence: float | None = None
    cascade: str = ""

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
    history: str = ""  # a conversation's earlier messages (JSON), before the user turn ``prompt``


@dataclass(frozen=True)
class DPOPair(_Row):
    """A curated preference pair from a decisive battle (in a conversation: the shared ``history``,
    then two different answers to the user turn ``prompt``)."""

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
    history: str = ""


@dataclass(frozen=True)
class EvolvedPrompt(_Row):
    """A prompt the evolve stage wrote (``select.evolve``), with its lineage: the prompt it was
    rewritten from (``parent_id``), how (``method``: depth or breadth; ``evolver``: procedural or
    a player's name), in which iteration, and its ``generation`` (1 for a rewrite of a pool
    prompt, one more than its parent's for a rewrite of an evolved one)."""

    id: str
    text: str
    category: str
    level: int
    reference: str | None
    parent_id: str
    method: str
    evolver: str
    generation: int
    iteration: int

    def prompt(self) -> Prompt:
        """The train prompt it stands for."""
        return Prompt(self.id, self.text, self.category, self.level, self.reference, "train")


@dataclass(frozen=True)
class Lesson(_Row):
    """One lesson of ``select.teaching``: ``teacher`` answered the ``example`` prompt of a cell
    (``example_answer``; ``example_correct``: it passes the verifier), and the ``target`` (a
    version) answered a sibling prompt of the same cell without the example (``answer_without``)
    and after it (``answer_with``). ``lift`` = correct with - correct without, in {-1, 0, 1}: the
    teacher's reward, mapped to [0, 1]. ``error`` is set where a generation failed (no reward)."""

    lesson_id: str
    iteration: int
    round: int
    target: str
    teacher: str
    cell: str
    example_id: str
    example_text: str
    example_answer: str
    example_correct: bool
    sibling_id: str
    sibling_text: str
    category: str
    reference: str | None
    answer_without: str
    answer_with: str
    correct_without: bool
    correct_with: bool
    lift: float
    error: str | None = None
