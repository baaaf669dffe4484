"""Playing Hanabi's duplicate team battles, move by move and many games at once.

A battle is two games on the same deal (the prompt), one per team (flywheel/games/hanabi_referee.py).
All games of a batch advance together: at each step every player whose seat is to move in some
games gets one ``generate`` call with those views, as in flywheel/arena/games.py (re-asks with a
fresh seed, then a forfeit that ends the team's game; a failed call fails the battle).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from flywheel.arena.games import retry_params
from flywheel.games.hanabi import State, parse_move
from flywheel.games.hanabi_referee import parse_deal, seats
from flywheel.games.referee import move_token
from flywheel.ground.records import Battle, BattleSpec, Prompt, stable_id


@dataclass
class _TeamGame:
    spec: BattleSpec
    side: str  # "a" or "b"
    seats: list[str]
    state: State
    record: list[str] = field(default_factory=list)
    done: bool = False

    @property
    def player(self) -> str:
        return self.seats[self.state.to_move]


def play_hanabi(roster, todo: list[BattleSpec], prompts: dict[str, Prompt], style: str,
                max_illegal: int) -> tuple[list[Battle], list[dict]]:
    """Play ``todo`` (each: team A's and team B's games on the prompt's deal). Returns the battles,
    in order, and per player a usage row (moves asked, re-asks, forfeits, failures)."""
    games: list[_TeamGame] = []
    for s in todo:
        start = parse_deal(prompts[s.prompt_id].text)
        games += [_TeamGame(s, side, seats(team, start.setup.players), start)
                  for side, team in (("a", s.model_a), ("b", s.model_b))]
    errors: dict[str, str] = {}
    usage: dict[str, dict] = {}
    while True:
        waiting: dict[str, list[_TeamGame]] = {}
        for g in games:
            if g.done or g.spec.battle_id in errors:
                continue
            waiting.setdefault(g.player, []).append(g)
        if not waiting:
            break
        for player, gs in waiting.items():
            _turn(roster, player, gs, style=style, max_illegal=max_illegal, errors=errors, usage=usage.setdefault(
                player, {"player": player, "moves": 0, "reasks": 0, "forfeits": 0, "failed": 0}))
    for row in usage.values():
        row["worker"] = f"{socket.gethostname()}:{os.getpid()}"
    records = {(g.spec.battle_id, g.side): " ".join(g.record) for g in games}
    battles = [Battle.from_spec(s, prompts[s.prompt_id], response_a=records[s.battle_id, "a"],
                                response_b=records[s.battle_id, "b"], error=errors.get(s.battle_id)) for s in todo]
    return battles, list(usage.values())


def _turn(roster, player: str, games: list[_TeamGame], *, style: str, max_illegal: int, errors: dict[str, str],
          usage: dict) -> None:
    """One move in each of ``games`` by ``player`` (whose seat is to move in all of them)."""
    obj = roster.player(player)
    params = roster.params(player)
    rejected: dict[int, list[str]] = {id(g): [] for g in games}
    pending = games
    for attempt in range(max_illegal + 1):
        asks = [Prompt(id=stable_id(g.spec.battle_id, g.side, len(g.record), attempt), text=g.state.text(style),
                       category=g.spec.arm.split("/")[0], level=0, split=g.spec.phase) for g in pending]
        gens = obj.generate(asks, params if attempt == 0 else retry_params(params, attempt))
        if len(gens) != len(asks):
            raise RuntimeError(f"player {player} returned {len(gens)} moves for {len(asks)} positions")
        usage["moves" if attempt == 0 else "reasks"] += len(asks)
        again = []
        for g, gen in zip(pending, gens):
            if not gen.ok:
                errors[g.spec.battle_id] = f"{player}: {gen.error}"
                usage["failed"] += 1
                continue
            move = parse_move(gen.text)
            if move is not None and move in g.state.legal_moves():
                g.record.append(move_token(rejected[id(g)], move))
                g.state = g.state.play(move)
                g.done = g.state.over()
            else:
                rejected[id(g)].append(gen.text)
                again.append(g)
        pending = again
        if not pending:
            return
    for g in pending:
        g.record.append(move_token(rejected[id(g)], None))
        g.done = True
        usage["forfeits"] += 1
