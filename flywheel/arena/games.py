"""Playing games between players, move by move and many games at once.

All games of a batch advance together: at each step, every player whose turn it is in some
games gets one ``generate`` call with those positions (so a local model answers them in
batches). An answer that names no legal move is re-asked up to ``max_illegal`` times, sampling
with a fresh seed (at temperature 1 or the player's own, if higher); after that the move is a
forfeit, recorded as such (the referee counts it as a loss). A failed call (an API error)
makes the battle failed: recorded with its error, never judged.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace

from flywheel.games.referee import move_token
from flywheel.games.rules import Position, parse_move, parse_position
from flywheel.ground.records import Battle, BattleSpec, Prompt, stable_id
from flywheel.players.player import SamplingParams


@dataclass
class _Game:
    spec: BattleSpec
    start: Prompt
    pos: Position
    seat: str = "a"
    records: dict[str, list[str]] = field(default_factory=lambda: {"a": [], "b": []})
    error: str | None = None
    done: bool = False

    @property
    def player(self) -> str:
        return self.spec.model_a if self.seat == "a" else self.spec.model_b

    def move(self, token: str, pos: Position | None) -> None:
        self.records[self.seat].append(token)
        if pos is None or pos.over():
            self.done = True
        else:
            self.pos, self.seat = pos, "b" if self.seat == "a" else "a"

    def battle(self) -> Battle:
        return Battle.from_spec(self.spec, self.start, response_a=" ".join(self.records["a"]),
                                response_b=" ".join(self.records["b"]), error=self.error)


def retry_params(params: SamplingParams, attempt: int) -> SamplingParams:
    """How a re-ask samples: a fresh seed, at temperature 1 or the player's own if higher."""
    return replace(params, temperature=max(params.temperature or 0.0, 1.0), seed=params.seed + 7919 * attempt)


def play_games(roster, todo: list[BattleSpec], prompts: dict[str, Prompt], style: str,
               max_illegal: int) -> tuple[list[Battle], list[dict]]:
    """Play ``todo`` (seat A moves first from the prompt's position). Returns the battles, in
    order, and per player a usage row (moves asked, re-asks, forfeits, failures)."""
    games = [_Game(s, prompts[s.prompt_id], parse_position(prompts[s.prompt_id].text)) for s in todo]
    usage: dict[str, dict] = {}
    while True:
        waiting: dict[str, list[_Game]] = {}
        for g in games:
            if not g.done:
                waiting.setdefault(g.player, []).append(g)
        if not waiting:
            break
        for player, gs in waiting.items():
            _turn(roster, player, gs, style=style, max_illegal=max_illegal, usage=usage.setdefault(
                player, {"player": player, "moves": 0, "reasks": 0, "forfeits": 0, "failed": 0}))
    for row in usage.values():
        row["worker"] = f"{socket.gethostname()}:{os.getpid()}"
    return [g.battle() for g in games], list(usage.values())


def _turn(roster, player: str, games: list[_Game], *, style: str, max_illegal: int, usage: dict) -> None:
    """One move in each of ``games`` by ``player`` (whose turn it is in all of them)."""
    obj = roster.player(player)
    params = roster.params(player)
    rejected: dict[int, list[str]] = {id(g): [] for g in games}
    pending = games
    for attempt in range(max_illegal + 1):
        asks = [Prompt(id=stable_id(g.spec.battle_id, len(g.pos.board) - g.pos.board.count("-"), attempt),
                       text=g.pos.text(style), category=g.start.category, level=g.start.level, split=g.spec.phase)
                for g in pending]
        gens = obj.generate(asks, params if attempt == 0 else retry_params(params, attempt))
        if len(gens) != len(asks):
            raise RuntimeError(f"player {player} returned {len(gens)} moves for {len(asks)} positions")
        usage["moves"] += len(asks) if attempt == 0 else 0
        usage["reasks"] += len(asks) if attempt else 0
        again = []
        for g, gen in zip(pending, gens):
            if not gen.ok:
                g.error, g.done = f"{player}: {gen.error}", True
                usage["failed"] += 1
                continue
            move = parse_move(gen.text)
            if move is not None and move in g.pos.legal_moves():
                g.move(move_token(rejected[id(g)], move), g.pos.play(move))
            else:
                rejected[id(g)].append(gen.text)
                again.append(g)
        pending = again
        if not pending:
            return
    for g in pending:
        g.move(move_token(rejected[id(g)], None), None)
        usage["forfeits"] += 1
