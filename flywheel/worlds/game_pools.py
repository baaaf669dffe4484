"""The games world's prompts: start positions after a few random opening moves.

A cell of the world is (game, opening plies): its prompts are distinct positions reached by
that many uniformly random moves (none already over). Eval positions are drawn first, then the
validation split is taken out of the rest (tasks.take_validation), as in the task suite.
Hanabi has one cell (``hanabi/L0``) whose prompts are seeded deals (flywheel/games/hanabi_referee.py).
"""

from __future__ import annotations

import random

from flywheel.games.hanabi import Setup
from flywheel.games.hanabi_referee import new_deal, parse_deal
from flywheel.games.rules import GAMES, Position, random_opening
from flywheel.ground.records import Prompt, stable_id
from flywheel.worlds.tasks import take_validation


def start_prompt(pos: Position, level: int, split: str, style: str) -> Prompt:
    return Prompt(stable_id(pos.game.name, level, pos.key), pos.text(style), pos.game.name, level, None, split)


def game_splits(gc) -> tuple[list[Prompt], list[Prompt], list[Prompt]]:
    """(train, eval, validation) start positions of a ``GamesConfig``."""
    rng = random.Random(gc.seed)
    train: list[Prompt] = []
    evals: list[Prompt] = []
    for name in gc.games:
        if name == "hanabi":
            want = gc.train_per_cell + gc.eval_per_cell
            deals = list(dict.fromkeys(new_deal(hanabi_setup(gc), rng) for _ in range(want)))
            evals += [Prompt(stable_id("hanabi", d), d, "hanabi", 0, None, "eval") for d in deals[:gc.eval_per_cell]]
            train += [Prompt(stable_id("hanabi", d), d, "hanabi", 0, None, "train") for d in deals[gc.eval_per_cell:]]
            continue
        game = GAMES[name]
        for plies in gc.openings:
            want = gc.train_per_cell + gc.eval_per_cell
            seen: dict[str, Position] = {}
            for _ in range(50 * want):
                if len(seen) >= want:
                    break
                pos = random_opening(game, plies, rng)
                if pos is not None:
                    seen.setdefault(pos.key, pos)
            items = list(seen.values())
            n_eval = min(gc.eval_per_cell, len(items) // 2)
            evals += [start_prompt(p, plies, "eval", gc.prompt) for p in items[:n_eval]]
            train += [start_prompt(p, plies, "train", gc.prompt) for p in items[n_eval:]]
    train, validation = take_validation(train, gc.val_per_cell)
    return train, evals, validation


def pretraining_pool(gc, games: list[str], n: int, seed: int, held_out: set[str]) -> list[Prompt]:
    """``n`` (position, random legal move) examples from random play-outs of ``games``: what a
    tiny game model is pre-trained on, so it answers in the format with legal but unskilled
    moves. Positions whose text is in ``held_out`` (eval and validation) are left out."""
    rng = random.Random(seed)
    out: list[Prompt] = []
    if "hanabi" in games:
        while len(out) < n:
            deal = new_deal(hanabi_setup(gc), rng)
            st = parse_deal(deal)
            while deal not in held_out and not st.over() and len(out) < n:
                out.append(Prompt(stable_id("pretrain", len(out)), st.text(gc.prompt), "hanabi", 0,
                                  rng.choice(st.legal_moves())))
                st = st.play(rng.choice(st.legal_moves()))
    names = [g for g in games if g in GAMES]
    while names and len(out) < n:
        pos = GAMES[rng.choice(names)].initial()
        while not pos.over() and len(out) < n:
            move = rng.choice(pos.legal_moves())
            text = pos.text(gc.prompt)
            if text not in held_out:
                out.append(Prompt(stable_id("pretrain", len(out)), text, pos.game.name, 0, str(rng.choice(pos.legal_moves()))))
            pos = pos.play(move)
    return out


def hanabi_setup(gc) -> Setup:
    """The Hanabi size a ``GamesConfig`` names."""
    h = gc.hanabi
    return Setup(h.players, h.colours, h.ranks, h.hand, h.hints, h.lives)
