"""Tic-tac-toe and Connect Four: positions, legal moves, outcomes, and a position as text.

A position is a board string (``x``, ``o``, ``-`` for empty; row by row, top row first) and the
side to move. A move is a number: a cell 1-9 in tic-tac-toe, a column 1-7 in Connect Four. The
position's *key* writes each empty cell where a move lands as that move's number and other
empty cells as ``-`` (``ttt x2o456789 o``: the legal moves are the digits on the board, which a
small model can copy); every player can parse it. The text a player reads is the key in the
terse style (``ttt x2o456789 o=``, for the project's character-level models) or a described
board in the verbose style (for instruct LLMs), which ends with the key.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Literal

Side = Literal["x", "o"]
EMPTY = "-"


def other(side: str) -> str:
    return "o" if side == "x" else "x"


@dataclass(frozen=True)
class Game:
    """A connect-``k`` game on a ``rows`` x ``cols`` board; ``gravity``: pieces drop to the lowest
    free cell of a column (Connect Four) instead of taking any cell (tic-tac-toe)."""

    name: str
    short: str
    rows: int
    cols: int
    connect: int
    gravity: bool

    @property
    def cells(self) -> int:
        return self.rows * self.cols

    @property
    def moves(self) -> int:
        """How many move numbers there are (cells, or columns with gravity)."""
        return self.cols if self.gravity else self.cells

    def initial(self) -> Position:
        return Position(self, EMPTY * self.cells, "x")

    def lines(self) -> list[tuple[int, ...]]:
        """Every run of ``connect`` cells in a row, column or diagonal (cell indices)."""
        if self.name not in _LINES:
            _LINES[self.name] = _lines(self.rows, self.cols, self.connect)
        return _LINES[self.name]


def _lines(rows: int, cols: int, k: int) -> list[tuple[int, ...]]:
    out = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                end_r, end_c = r + dr * (k - 1), c + dc * (k - 1)
                if 0 <= end_r < rows and 0 <= end_c < cols:
                    out.append(tuple((r + dr * i) * cols + c + dc * i for i in range(k)))
    return out


def symmetries(game: Game) -> list[tuple[int, ...]]:
    """The cell permutations that map the game onto itself, the identity first: the 8 rotations
    and reflections of a square board without gravity (tic-tac-toe), else the left-right mirror
    (Connect Four). ``perm[i]`` is where cell ``i`` goes."""
    rows, cols = game.rows, game.cols
    maps = [lambda r, c: (r, c), lambda r, c: (r, cols - 1 - c)]
    if not game.gravity and rows == cols:
        n = rows - 1
        maps += [lambda r, c: (c, n - r), lambda r, c: (n - r, n - c), lambda r, c: (n - c, r),
                 lambda r, c: (n - r, c), lambda r, c: (c, r), lambda r, c: (n - c, n - r)]
    perms = []
    for f in maps:
        perm = tuple(f(i // cols, i % cols)[0] * cols + f(i // cols, i % cols)[1] for i in range(game.cells))
        if perm not in perms:
            perms.append(perm)
    return perms


_LINES: dict[str, list[tuple[int, ...]]] = {}
TICTACTOE = Game("tictactoe", "ttt", 3, 3, 3, False)
CONNECT4 = Game("connect4", "c4", 6, 7, 4, True)
GAMES: dict[str, Game] = {g.name: g for g in (TICTACTOE, CONNECT4)}
_BY_SHORT = {g.short: g for g in GAMES.values()}


@dataclass(frozen=True)
class Position:
    game: Game
    board: str
    to_move: str

    # -- rules -----------------------------------------------------------------------------
    def winner(self) -> str | None:
        """The side with ``connect`` in a line, if any."""
        b = self.board
        for line in self.game.lines():
            first = b[line[0]]
            if first != EMPTY and all(b[i] == first for i in line[1:]):
                return first
        return None

    def full(self) -> bool:
        return EMPTY not in self.board

    def over(self) -> bool:
        return self.winner() is not None or self.full()

    def legal_moves(self) -> list[int]:
        """Move numbers (1-based) the side to move may play; none once the game is over."""
        if self.over():
            return []
        g = self.game
        if g.gravity:
            return [c + 1 for c in range(g.cols) if self.board[c] == EMPTY]
        return [i + 1 for i, ch in enumerate(self.board) if ch == EMPTY]

    def winning_moves(self) -> list[int]:
        """The legal moves that win at once for the side to move."""
        return [m for m in self.legal_moves() if self.play(m).winner() is not None]

    def threats(self) -> list[int]:
        """The moves with which the other side would win at once, were it its turn."""
        return Position(self.game, self.board, other(self.to_move)).winning_moves()

    def tactical_moves(self) -> list[int]:
        """The moves one ply of lookahead makes right: the wins of the side to move; else the block
        of the other side's only threat (in Connect Four a column, where both pieces would land);
        else none (no move wins, and with two threats none saves the game)."""
        if wins := self.winning_moves():
            return wins
        threats = self.threats()
        return threats if len(threats) == 1 else []

    def play(self, move: int) -> Position:
        """The position after the side to move plays ``move`` (ValueError if it is illegal)."""
        if move not in self.legal_moves():
            raise ValueError(f"illegal move {move} in {self.key}")
        cell = self._landing(move)
        board = self.board[:cell] + self.to_move + self.board[cell + 1:]
        return Position(self.game, board, other(self.to_move))

    def image(self, perm: tuple[int, ...], move: int) -> tuple[Position, int]:
        """This position and a move in it under a symmetry of the board (``symmetries``)."""
        board = [EMPTY] * len(self.board)
        for i, ch in enumerate(self.board):
            board[perm[i]] = ch
        g = self.game
        moved = perm[move - 1] % g.cols + 1 if g.gravity else perm[move - 1] + 1  # gravity: a top-row cell's column
        return Position(g, "".join(board), self.to_move), moved

    # -- text ------------------------------------------------------------------------------
    @property
    def key(self) -> str:
        cells = list(self.board)
        for m in self.legal_moves():
            cells[self._landing(m)] = str(m)
        return f"{self.game.short} {''.join(cells)} {self.to_move}"

    def _landing(self, move: int) -> int:
        """The cell a legal move fills."""
        g = self.game
        if not g.gravity:
            return move - 1
        return max(r * g.cols + move - 1 for r in range(g.rows) if self.board[r * g.cols + move - 1] == EMPTY)

    def text(self, style: str = "terse") -> str:
        """What a player reads: the terse key with ``=`` (character-level models) or a verbose
        description (instruct LLMs; it ends with the key so any player can parse it)."""
        if style == "terse":
            return self.key + "="
        g = self.game
        board = self.key.split()[1]
        rows = "\n".join(" ".join(board[r * g.cols:(r + 1) * g.cols]) for r in range(g.rows))
        legal = " ".join(map(str, self.legal_moves()))
        if g.gravity:
            how = (f"Drop a piece into a column 1-{g.cols} (left to right); it falls to the lowest empty cell. "
                   f"Four in a row (across, down or diagonal) wins.")
            ask = "Answer with the number of the column you play, and nothing else."
            what = "Open columns"
        else:
            how = "Cells are numbered 1-9, left to right, top to bottom. Three in a row wins."
            ask = "Answer with the number of the cell you take, and nothing else."
            what = "Empty cells"
        return (f"We are playing {'Connect Four' if g.gravity else 'tic-tac-toe'}. You are {self.to_move}. {how}\n"
                f"Board (a number marks where that move plays; - is empty):\n{rows}\n{what}: {legal}\n{ask}\nPosition: {self.key}")


_KEY = re.compile(r"\b(ttt|c4) ([xo1-9-]+) ([xo])\b")


def parse_position(text: str) -> Position:
    """The position a player's prompt describes (its key, in either style)."""
    m = _KEY.search(text)
    if m is None:
        raise ValueError(f"no game position in {text[:60]!r}")
    game = _BY_SHORT[m.group(1)]
    if len(m.group(2)) != game.cells:
        raise ValueError(f"a {game.name} board has {game.cells} cells, not {len(m.group(2))}: {m.group(0)!r}")
    return Position(game, re.sub(r"[1-9]", EMPTY, m.group(2)), m.group(3))


def parse_move(answer: str) -> int | None:
    """The move a player's answer names: its first number (None if there is none)."""
    m = re.search(r"\d+", answer)
    return int(m.group(0)) if m else None


def random_opening(game: Game, plies: int, rng: random.Random) -> Position | None:
    """The position after ``plies`` uniformly random legal moves (None if the game ended)."""
    pos = game.initial()
    for _ in range(plies):
        moves = pos.legal_moves()
        if not moves:
            return None
        pos = pos.play(rng.choice(moves))
    return None if pos.over() else pos
