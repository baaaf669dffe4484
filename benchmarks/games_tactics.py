"""Does a tic-tac-toe player take a win and block a threat? Every reachable position, no sampling.

Against the random mover, what a version mostly lacks is tactics: it leaves a line of the other
side's open, or does not finish its own. This asks a player, greedily, for its move in every
reachable tic-tac-toe position (from the empty board, either side to move) where

- the side to move has an immediate win (``win``: it must take one of them), or
- it has none, and the other side threatens exactly one line (``block``: it must play there),

and prints the share it gets right in each, for model folders, or for every version of a run
(its ``@0`` as the run's config names it, then ``models/<target>@k``):

    python -m benchmarks.games_tactics data/runs/<run_id>
    python -m benchmarks.games_tactics data/models/ttt-student data/runs/<run_id>/models/ttt-student@4

Unlike 64 eval games (+-0.1 at 95%), there is nothing random here: a version's figures are
exact for its greedy moves (2,358 win and 976 block positions; the terse prompt the recipe's
tiny models read). A diagnostic table for the README's games section, not a side-by-side
comparison: it has no ``ratio`` and no ``--seeds``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flywheel.games.rules import TICTACTOE, Position, parse_move
from flywheel.ground.records import Prompt
from flywheel.players.player import Player, SamplingParams


def tactic_positions() -> tuple[list[tuple[Position, set[int]]], list[tuple[Position, set[int]]]]:
    """(win, block): every reachable tic-tac-toe position with an immediate win for the side to
    move, with its winning moves; and every other with exactly one threat of the other side's, with
    the blocking move."""
    wins, blocks, seen = [], [], set()
    todo = [TICTACTOE.initial()]
    while todo:
        pos = todo.pop()
        if pos.board in seen or pos.over():
            continue
        seen.add(pos.board)
        if right := set(pos.tactical_moves()):  # its wins; else the only threat's block
            (wins if pos.winning_moves() else blocks).append((pos, right))
        todo += [pos.play(m) for m in pos.legal_moves()]
    return wins, blocks


def right_share(player: Player, cases: list[tuple[Position, set[int]]], style: str = "terse") -> float:
    """The share of ``cases`` where the player's greedy answer names one of the right moves."""
    prompts = [Prompt(str(i), pos.text(style), "tictactoe", 0) for i, (pos, _) in enumerate(cases)]
    gens = player.generate(prompts, SamplingParams(max_new_tokens=2))
    return sum(parse_move(g.text or "") in right for g, (_, right) in zip(gens, cases)) / len(cases)


def model_dirs(path: Path) -> list[Path]:
    """A model folder as it is; a run directory: its targets' ``@0`` (from its config), then its versions."""
    if (path / "config.json").exists():
        return [path]
    from flywheel.config.loading import load_config

    cfg = load_config(path / "config.yaml", [])
    base = [Path(t.path or Path(cfg.world.models_dir) / t.name) for t in cfg.targets]
    versions = sorted((path / "models").glob("*@*"), key=lambda p: (p.name.split("@")[0], int(p.name.split("@")[1])))
    return [p for p in base if (p / "config.json").exists()] + [p for p in versions if (p / "config.json").exists()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="model folders or run directories")
    args = ap.parse_args()
    from flywheel.players.hf import TransformersPlayer

    wins, blocks = tactic_positions()
    print(f"{'model':<60}  win ({len(wins)})  block ({len(blocks)})")
    for path in args.paths:
        for d in model_dirs(path):
            player = TransformersPlayer(d.name, str(d))
            print(f"{str(d):<60}  {right_share(player, wins):>10.3f}  {right_share(player, blocks):>11.3f}", flush=True)


if __name__ == "__main__":
    main()
