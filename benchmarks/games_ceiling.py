"""How high a version's win-or-draw rates can go on a games recipe's eval positions.

The eval games start after a few random opening moves, and some of those positions are already
lost against a player that does not blunder. This plays the reference players' own kinds, and
perfect play (minimax to the end of the game), from every eval start position in both seats
against each reference player of the recipe, with the random choices drawn per seed:

    python -m benchmarks.games_ceiling                       # flows/recipes/tictactoe.yaml, seeds 0-4
    python -m benchmarks.games_ceiling --config flows/recipes/tictactoe.yaml --seeds 5,6,7

Prints each player's win-or-draw rate against each reference: the mean over the seeds +- its 95%
CI. (A reference table for the games section of the README, not a side-by-side speed comparison:
it has no ``ratio``.)
"""

from __future__ import annotations

import argparse
import random

from benchmarks.stats import mean_ci, parse_seeds
from flywheel.config.loading import ConfigError, load_config
from flywheel.games.rules import Position, other, parse_position
from flywheel.players.reference import MinimaxPlayer, RandomMover, _GamePlayer
from flywheel.worlds.game_pools import game_splits


def play_out(first: _GamePlayer, second: _GamePlayer, pos: Position, rng: random.Random) -> str | None:
    """The winning side of a game from ``pos`` (``first`` to move), or None for a draw."""
    players = (first, second)
    turn = 0
    while not pos.over():
        pos = pos.play(players[turn].move(pos, rng))
        turn ^= 1
    return pos.winner()


def win_or_draw(me: _GamePlayer, opponent: _GamePlayer, starts: list[Position], seed: int) -> float:
    """``me``'s win-or-draw rate over ``starts``, each played once in each seat."""
    rng = random.Random(seed)
    good = 0
    for pos in starts:
        good += play_out(me, opponent, pos, rng) != other(pos.to_move)  # me to move
        good += play_out(opponent, me, pos, rng) != pos.to_move  # me second
    return good / (2 * len(starts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="flows/recipes/tictactoe.yaml", help="a games recipe")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="a config override, dotted.key=value")
    ap.add_argument("--seeds", nargs="+", default=["0,1,2,3,4"], help="e.g. 5,6,7 (default 0-4)")
    args = ap.parse_args()
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None
    if cfg.world.kind != "games":
        raise SystemExit(f"{args.config}: world.kind is {cfg.world.kind}, not games")
    seeds = parse_seeds(args.seeds)
    _, evals, _ = game_splits(cfg.world.games)
    starts = [parse_position(p.text) for p in evals]
    refs: dict[str, _GamePlayer] = {}
    for pc in cfg.opponents:
        if pc.kind == "random":
            refs[pc.name] = RandomMover(pc.name)
        elif pc.kind == "minimax":
            refs[pc.name] = MinimaxPlayer(pc.name, depth=pc.depth)
    if not refs:
        raise SystemExit(f"{args.config}: no reference players (kind random or minimax) among the opponents")
    board = max(p.game.cells for p in starts)
    if board > 9:  # a plain alpha-beta search to the end is for tic-tac-toe, not Connect Four's 42 cells
        raise SystemExit(f"{args.config}: perfect play is searched to the end only for tic-tac-toe")
    players = {"perfect play": MinimaxPlayer("perfect", depth=board), **refs}
    print(f"{len(starts)} eval start positions of {args.config}, each in both seats; seeds {seeds}")
    print(f"{'player':<14}" + "".join(f"  vs {name}".ljust(27) for name in refs))
    for name, me in players.items():
        row = []
        for opp in refs.values():
            m, half = mean_ci([win_or_draw(me, opp, starts, s) for s in seeds])
            row.append(f"  {m:.3f} +- {half:.3f}".ljust(27))
        print(f"{name:<14}" + "".join(row))


if __name__ == "__main__":
    main()
