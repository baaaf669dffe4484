"""The Hanabi referee: duplicate team battles, replayed from their records by the rules.

A battle's prompt is the deal (``hanabi 2p5c5r5h8i3l r1g3...``: the size, then the shuffled
deck), never shown to a player. Both teams play that same deck, as duplicate bridge does, so a
battle compares teams, not luck. A team is an arena name: players joined by ``+`` (one per seat,
seat 0 first: ``student@2+cautious``), or one name, which plays every seat (its self-play team).
Each team's record (``response_a`` / ``response_b``) is its moves in turn order, written as in the
other games (flywheel/games/referee.py): rejected answers then the move code, joined by ``|``
(``x|p2``), ``!`` for a forfeit. The referee replays each record against the rules, never
trusting a player: a forfeit or an illegal move loses the battle (both: a tie), else the higher
score wins and equal scores tie; a record that stops before its game is over, or runs past it,
is not a game (an invalid judgment).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flywheel.games.hanabi import Setup, State, shuffled_deck
from flywheel.games.referee import FORFEIT
from flywheel.ground.records import team_members

_DEAL = re.compile(r"\bhanabi (\S+) ((?:[rygbw]\d)+)")


def deal_text(setup: Setup, deck: tuple[str, ...]) -> str:
    return f"hanabi {setup.code} {''.join(deck)}"


def new_deal(setup: Setup, rng) -> str:
    """A seeded deal's prompt text."""
    return deal_text(setup, shuffled_deck(setup, rng))


def is_deal(text: str) -> bool:
    return _DEAL.search(text) is not None


def parse_deal(text: str) -> State:
    """The start of the game a deal's text describes."""
    m = _DEAL.search(text)
    if m is None:
        raise ValueError(f"no hanabi deal in {text[:60]!r}")
    setup = Setup.from_code(m.group(1))
    cards = m.group(2)
    deck = tuple(cards[i:i + 2] for i in range(0, len(cards), 2))
    if len(deck) != setup.deck_size:
        raise ValueError(f"a {setup.code} deck has {setup.deck_size} cards, not {len(deck)}")
    return State.deal(setup, deck)


def seats(team: str, players: int) -> list[str]:
    """The player in each seat of ``team`` (a name alone plays every seat)."""
    names = team_members(team)
    if len(names) == 1:
        return names * players
    if len(names) != players:
        raise ValueError(f"team {team!r} has {len(names)} players for a {players}-player game")
    return names


@dataclass(frozen=True)
class HanabiPly:
    """One move of a replayed game: the state it was made in (``state.to_move`` is the seat)."""

    state: State
    move: str
    rejected: int


@dataclass(frozen=True)
class TeamGame:
    """One team's replayed game: its score (None: the record is not a game, ``reason`` says why),
    whether it lost by a forfeit or an illegal move, and its moves."""

    score: int | None
    lost: bool
    reason: str
    plies: tuple[HanabiPly, ...]
    illegal: int


def replay_team(deal: str, record: str) -> TeamGame:
    """Replay one team's ``record`` from ``deal``."""
    st = parse_deal(deal)
    tokens = record.split()
    plies: list[HanabiPly] = []
    illegal = 0
    for used, tok in enumerate(tokens):
        if st.over():
            return TeamGame(None, False, f"the record goes on after the game ended ({len(plies)} moves)", tuple(plies),
                            illegal)
        parts = tok.split("|")
        illegal += len(parts) - 1
        last = parts[-1]
        if last == FORFEIT or last not in st.legal_moves():
            rest = len(tokens) - used - 1
            why = (f"seat {st.to_move} forfeits after {len(parts) - 1} illegal answers" if last == FORFEIT
                   else f"seat {st.to_move} made the illegal move {last!r}")
            if rest:
                return TeamGame(None, False, f"the record goes on after the game ended ({why})", tuple(plies), illegal)
            return TeamGame(st.score, True, why, tuple(plies), illegal)
        plies.append(HanabiPly(st, last, len(parts) - 1))
        st = st.play(last)
    if not st.over():
        return TeamGame(None, False, "the record ends before the game does", tuple(plies), illegal)
    return TeamGame(st.score, False, f"score {st.score} in {len(plies)} moves", tuple(plies), illegal)


@dataclass(frozen=True)
class Duplicate:
    """A duplicate battle decided: ``winner`` ``a``, ``b``, ``draw``, or None when a record is not a
    game."""

    winner: str | None
    reason: str
    a: TeamGame
    b: TeamGame


def replay_duplicate(deal: str, record_a: str, record_b: str) -> Duplicate:
    """Decide the duplicate battle of two teams' records on one deal."""
    a, b = replay_team(deal, record_a), replay_team(deal, record_b)
    for seat, g in (("A", a), ("B", b)):
        if g.score is None:
            return Duplicate(None, f"team {seat}: {g.reason}", a, b)
    reason = f"A: {a.reason}; B: {b.reason}"
    if a.lost or b.lost:
        return Duplicate("draw" if a.lost and b.lost else "b" if a.lost else "a", reason, a, b)
    assert a.score is not None and b.score is not None
    return Duplicate("a" if a.score > b.score else "b" if b.score > a.score else "draw", reason, a, b)
