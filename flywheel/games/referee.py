"""The referee: a played game is recorded as two move lists, and the rules decide it.

Seat A moves first from the start position. Each seat's record (the battle's ``response_a`` /
``response_b``) is its moves in order, separated by spaces. A move that needed re-asks carries
the rejected answers before it, joined by ``|`` (``7|7|3``: two illegal 7s, then 3); a move
whose every try was illegal ends in ``!`` (``5|5|5|!``) and forfeits the game. The referee
replays the record against the rules, so it never trusts the player that wrote it: an illegal
move loses, a forfeit loses, and a record that stops before the game is over (or runs past it)
is not a game (an invalid judgment, never counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flywheel.games.rules import Position, parse_position

FORFEIT = "!"


def clean_attempt(answer: str) -> str:
    """A rejected answer as it is kept in the record: lower-case letters and digits, at most 8."""
    return re.sub(r"[^0-9a-z]", "", answer.lower())[:8] or "_"


def move_token(rejected: list[str], move: int | str | None) -> str:
    """One move of the record: the rejected answers, then the move (or ``!`` for a forfeit)."""
    return "|".join([clean_attempt(r) for r in rejected] + [FORFEIT if move is None else str(move)])


@dataclass(frozen=True)
class Ply:
    """One move of a replayed game: the position it was played in, by which seat, and the move."""

    position: Position
    seat: str  # "a" or "b"
    move: int
    rejected: int  # illegal answers before it


@dataclass(frozen=True)
class Outcome:
    """A replayed game: ``winner`` is ``a``, ``b``, ``draw``, or None when the record is not a
    game (``reason`` says why)."""

    winner: str | None
    reason: str
    plies: tuple[Ply, ...]
    illegal: dict[str, int]  # seat -> rejected answers (re-asks)


def replay(start_text: str, record_a: str, record_b: str) -> Outcome:
    """Decide the game that ``record_a`` (seat A, to move first) and ``record_b`` record from the
    position ``start_text`` describes."""
    pos = parse_position(start_text)
    tokens = {"a": record_a.split(), "b": record_b.split()}
    used = {"a": 0, "b": 0}
    illegal = {"a": 0, "b": 0}
    plies: list[Ply] = []
    seat = "a"
    sides = {"a": pos.to_move, "b": "o" if pos.to_move == "x" else "x"}
    while not pos.over():
        if used[seat] >= len(tokens[seat]):
            return Outcome(None, f"the record of seat {seat.upper()} ends before the game does", tuple(plies), illegal)
        parts = tokens[seat][used[seat]].split("|")
        used[seat] += 1
        illegal[seat] += len(parts) - 1
        last = parts[-1]
        other_seat = "b" if seat == "a" else "a"
        if last == FORFEIT:
            return _done(other_seat, f"{sides[seat]} forfeits after {len(parts) - 1} illegal answers", plies, illegal,
                         tokens, used)
        if not last.isdigit() or int(last) not in pos.legal_moves():
            return _done(other_seat, f"{sides[seat]} played the illegal move {last!r}", plies, illegal, tokens, used)
        plies.append(Ply(pos, seat, int(last), len(parts) - 1))
        pos = pos.play(int(last))
        seat = other_seat
    won = pos.winner()
    if won is None:
        return _done("draw", f"draw after {len(plies)} moves", plies, illegal, tokens, used)
    win_seat = "a" if sides["a"] == won else "b"
    return _done(win_seat, f"{won} wins in {len(plies)} moves", plies, illegal, tokens, used)


def _done(winner: str, reason: str, plies: list[Ply], illegal: dict[str, int], tokens: dict[str, list[str]],
          used: dict[str, int]) -> Outcome:
    extra = [s for s in "ab" if used[s] < len(tokens[s])]
    if extra:
        return Outcome(None, f"the record of seat {extra[0].upper()} goes on after the game ended ({reason})",
                       tuple(plies), illegal)
    return Outcome(winner, reason, tuple(plies), illegal)
