"""Hanabi's datasets, from cooperative play in duplicate team battles.

Every battle of the iteration with a target in it is replayed by the referee
(flywheel/games/hanabi_referee.py), both teams on the same deal:

- SFT: the moves of the team that won a decisive battle (it scored more on the very deck the
  other team played), by every seat, for each target in the battle: the view the seat read, the
  move it made. A move the rules show was wrong is never learnt as it was made (below). One
  example per (target, view), the first.
- Rules: wherever a target's seat made a move the rules show was wrong (``State.blunder``: a
  misplay that cost a life, the discard of the last copy of a card a firework still needs), in any
  game it played, won, tied or lost, the better move is learnt there (source ``rules``): the
  cautious partner's move in that view (flywheel/games/hanabi_policy.py) where it is not itself
  wrong, else the first move that is not (where every move is wrong, nothing is learnt there).
  Its DPO pair is (the better move, the target's move); no winner's move displaces it.

Deals in ``held_out`` (eval and validation) are never learnt (counted as ``contaminated``).
"""

from __future__ import annotations

from flywheel.games.hanabi import State, move_words, parse_view
from flywheel.games.hanabi_policy import cautious_move
from flywheel.games.hanabi_referee import replay_duplicate, seats
from flywheel.ground.config import GamesConfig
from flywheel.ground.records import Battle, DPOPair, Judgment, SFTExample, base_name, stable_id
from flywheel.learning.curation import Curated

RULES = {"sft": "every move of the team that won a decisive duplicate battle with a target in it (the view, the "
                "move); and every move of a target that the rules show was wrong (a misplay, the discard of a "
                "last copy), corrected",
         "dpo": "(the rules' better move, the target's move) wherever a target misplayed or discarded a last copy"}
WINNER = {"model_a": "a", "model_b": "b"}


def better_move(state: State) -> str | None:
    """The move the rules put in place of a wrong one: the cautious partner's, where the rules do
    not show it wrong too, else the first legal move they do not; None where every move is wrong
    (no hint token, and every card unplayable and the last of its kind)."""
    legal = state.legal_moves()
    first = cautious_move(parse_view(state.key()))
    return next((m for m in [first] + legal if m in legal and state.blunder(m) is None), None)


def curate_hanabi(battles: list[Battle], judgments: dict[str, Judgment], targets: list[str], held_out: set[str],
                  games: GamesConfig) -> Curated:
    """The SFT examples and DPO pairs of an iteration's Hanabi battles (module docstring)."""
    words = games.prompt == "verbose"
    say = move_words if words else str
    dropped = {"invalid": 0, "failed": 0, "undecided": 0, "contaminated": 0, "duplicate": 0}
    sft: list[SFTExample] = []
    dpo: list[DPOPair] = []
    ruled: set[tuple[str, str]] = set()
    won: list[tuple[str, str, str, str, Battle]] = []  # (target, view, move, who, battle)
    for b in battles:
        j = judgments.get(b.battle_id)
        if not b.ok or j is None or not j.valid:
            dropped["failed" if not b.ok else "invalid"] += 1
            continue
        in_battle = sorted({t for team in (b.model_a, b.model_b) for m in team.split("+")
                            if (t := base_name(m)) in targets})
        if not in_battle:
            continue
        if b.prompt in held_out:
            dropped["contaminated"] += 1
            continue
        got = replay_duplicate(b.prompt, b.response_a, b.response_b)
        for side, team, game in (("a", b.model_a, got.a), ("b", b.model_b, got.b)):
            if not game.plies:
                continue
            who = seats(team, game.plies[0].state.setup.players)
            for ply in game.plies:
                player = who[ply.state.to_move]
                view = ply.state.text(games.prompt)
                if base_name(player) in targets and ply.state.blunder(ply.move) is not None:
                    t, right = base_name(player), better_move(ply.state)
                    if right is not None and (t, view) not in ruled:
                        ruled.add((t, view))
                        pid = stable_id("position", view)
                        sft.append(SFTExample(view, say(right), pid, b.category, "rules", b.battle_id, b.iteration, t))
                        dpo.append(DPOPair(view, say(right), say(ply.move), pid, b.category, "rules", player,
                                           b.battle_id, b.iteration, t))
                elif j.winner in WINNER and WINNER[j.winner] == side and ply.state.blunder(ply.move) is None:
                    won += [(t, view, ply.move, player, b) for t in in_battle]
        if j.winner not in WINNER:
            dropped["undecided"] += 1
    kept = set(ruled)
    for t, view, move, who, b in won:
        if (t, view) in kept:
            dropped["duplicate"] += 1
            continue
        kept.add((t, view))
        pid = stable_id("position", view)
        sft.append(SFTExample(view, say(move), pid, b.category, who, b.battle_id, b.iteration, t))
    return Curated(sft, dpo, dropped)
