"""The reference players of the games world: a random mover, a depth-limited minimax player and
Hanabi's cautious partner.

Each reads the position from the prompt (its key, in either text style) and answers a move number
(a move code in Hanabi: ``p2``, ``hr``; the random mover plays Hanabi too).
Their choices are seeded by the run's seed and the prompt's id (which names the game and the
ply), so a replayed or resumed game gets the same moves, and different games different ones.
"""

from __future__ import annotations

import random
from typing import Any

from flywheel.games.hanabi import View, is_view, parse_view
from flywheel.games.hanabi_policy import cautious_move
from flywheel.games.rules import Position, other, parse_position
from flywheel.ground.records import Generation, Prompt, stable_id
from flywheel.players.player import Player, PlayerSetup, SamplingParams

WIN = 1_000_000


class _GamePlayer(Player):
    def __init__(self, name: str, seed: int = 0) -> None:
        self.name = name
        self.seed = seed

    @classmethod
    def from_config(cls, pc: Any, name: str, setup: PlayerSetup) -> Player:
        return cls(name=name, seed=setup.seed)

    def _rng(self, prompt: Prompt, params: SamplingParams) -> random.Random:
        return random.Random(int(stable_id(self.name, self.seed, params.seed, prompt.id), 16))

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        out = []
        for p in prompts:
            if is_view(p.text):
                out.append(Generation(self.name, p.id, self.hanabi_move(parse_view(p.text), self._rng(p, params))))
                continue
            try:
                pos = parse_position(p.text)
            except ValueError as e:
                out.append(Generation(self.name, p.id, "", f"{self.name}: {e}"))
                continue
            out.append(Generation(self.name, p.id, str(self.move(pos, self._rng(p, params)))))
        return out

    def move(self, pos: Position, rng: random.Random) -> int:
        raise NotImplementedError

    def hanabi_move(self, view: View, rng: random.Random) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not play hanabi")


class RandomMover(_GamePlayer):
    """Plays a uniformly random legal move (``kind: random``), in Hanabi too."""

    def move(self, pos: Position, rng: random.Random) -> int:
        return rng.choice(pos.legal_moves())

    def hanabi_move(self, view: View, rng: random.Random) -> str:
        return rng.choice(view.legal_moves())


class CautiousPartner(_GamePlayer):
    """Hanabi's cautious partner (``kind: cautious``): plays only cards it knows are playable and
    hints playable cards to the next seat (flywheel/games/hanabi_policy.py)."""

    def move(self, pos: Position, rng: random.Random) -> int:
        raise ValueError(f"{self.name}: the cautious kind plays hanabi only")

    def hanabi_move(self, view: View, rng: random.Random) -> str:
        return cautious_move(view)


class MinimaxPlayer(_GamePlayer):
    """Alpha-beta minimax to ``depth`` plies (``kind: minimax``, ``depth``). A won position scores
    high (sooner is better), a lost one low; at the depth limit a position scores the open lines
    of each side, weighted by how full they are. Equal best moves are broken at random."""

    def __init__(self, name: str, seed: int = 0, depth: int = 2) -> None:
        super().__init__(name, seed)
        self.depth = depth

    @classmethod
    def from_config(cls, pc: Any, name: str, setup: PlayerSetup) -> Player:
        return cls(name=name, seed=setup.seed, depth=pc.depth)

    def move(self, pos: Position, rng: random.Random) -> int:
        scored = [(-self._search(pos.play(m), self.depth - 1, -WIN * 2, WIN * 2), m) for m in pos.legal_moves()]
        best = max(s for s, _ in scored)
        return rng.choice([m for s, m in scored if s == best])

    def _search(self, pos: Position, depth: int, alpha: int, beta: int) -> int:
        """The value of ``pos`` for the side to move (negamax with alpha-beta)."""
        won = pos.winner()
        if won is not None:  # the side that just moved won
            return -(WIN + depth)
        if pos.full():
            return 0
        if depth <= 0:
            return heuristic(pos, pos.to_move)
        best = -WIN * 2
        for m in pos.legal_moves():
            best = max(best, -self._search(pos.play(m), depth - 1, -beta, -alpha))
            alpha = max(alpha, best)
            if alpha >= beta:
                break
        return best


def heuristic(pos: Position, side: str) -> int:
    """Open lines of ``side`` minus those of the other side, weighted 10^(pieces in the line)."""
    score = 0
    for line in pos.game.lines():
        cells = [pos.board[i] for i in line]
        mine, theirs = cells.count(side), cells.count(other(side))
        if theirs == 0 and mine:
            score += 10 ** mine
        elif mine == 0 and theirs:
            score -= 10 ** theirs
    return score
