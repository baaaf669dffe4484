"""Hanabi's datasets, from cooperative play in duplicate team battles.

Every battle of the iteration with a target in it is replayed by the referee
(flywheel/games/hanabi_referee.py), both teams on the same deal. Per (target, view), the first
example of the highest of these three kinds is learnt:

1. Rules: wherever a target's seat made a move the rules hold against (``fault``: a gamble, that
   is a play of a card what the seat was told does not prove playable, even one that succeeded;
   the discard of a card it can tell is the last copy of a card a firework still needs; a hint
   that told the next seat nothing new), in any game it played, won, tied or lost, the better move
   is learnt there (source ``rules``): the cautious partner's move in that view
   (flywheel/games/hanabi_policy.py) where the rules hold nothing against it, else the first move
   they do not (where there is none, nothing is learnt there). Its DPO pair is (the better move,
   the target's move).
2. The winner's answer (``references``: the players whose move in any view is the cautious
   policy, ``kind: cautious``): where the target's team did not win a battle against a team
   holding such a player, every view the target's seat read gets that player's move there (source:
   its name), as Arena Learning gives a losing prompt the winner's response: the target learns what
   the partner that beat it would have done in its own positions, not only in the winner's.
3. SFT: the moves of the team that won a decisive battle (it scored more on the very deck the
   other team played), by every seat, for each target in the battle: the view the seat read, the
   move it made, but no move the rules hold something against (a lucky gamble learnt as it was
   made teaches the gambling that costs the lives later).

What the rules hold against a move is judged from what its seat knows (``world.games.hanabi.labels:
knowledge``, flywheel/games/hanabi_knowledge.py: what it was told of its own cards, the other
hands, the fireworks, the discards, the tokens), so that no label reads a card the view it is
paired with does not show; ``labels: hidden_card`` also reads the seat's own card (a play that in
fact misplays, the discard of a card that is in fact critical: ``State.fault``). Deals in
``held_out`` (eval and validation) are never learnt (counted as ``contaminated``).
"""

from __future__ import annotations

from flywheel.config.tree import GamesConfig
from flywheel.games.hanabi import State, move_words, parse_view
from flywheel.games.hanabi_knowledge import fault
from flywheel.games.hanabi_policy import cautious_move
from flywheel.games.hanabi_referee import replay_duplicate, seats
from flywheel.ground.records import Battle, DPOPair, Judgment, SFTExample, base_name, stable_id
from flywheel.learning.curation import Curated, dpo_pair, sft_example

RULES = {"sft": "every move of a target that the rules hold against (a gamble, the discard of a last copy, an "
                "empty hint), corrected; where its team lost to a team with a rule-based partner, that partner's "
                "move in each of its views; every other move of the team that won a decisive duplicate battle with "
                "a target in it (the view, the move)",
         "dpo": "(the rules' better move, the target's move) wherever a target made a move the rules hold against"}
LABELS = {"knowledge": "; the rules judge a move by what its seat knows, never by its own cards",
          "hidden_card": "; the rules judge a move also by its seat's own cards, which its view does not show"}
WINNER = {"model_a": "a", "model_b": "b"}


def better_move(state: State, labels: str = "knowledge") -> str | None:
    """The move the rules (as ``labels`` draws them) put in place of a wrong one: the cautious
    partner's, where the rules hold nothing against it, else the first legal move they do not; None
    where there is none (no hint token, and every card unplayable and the last of its kind)."""
    legal = state.legal_moves()
    first = cautious_move(parse_view(state.key()))
    return next((m for m in [first] + legal if m in legal and fault(state, m, labels) is None), None)


def curate_hanabi(battles: list[Battle], judgments: dict[str, Judgment], targets: list[str], held_out: set[str],
                  games: GamesConfig, references: frozenset[str] = frozenset()) -> Curated:
    """The SFT examples and DPO pairs of an iteration's Hanabi battles (module docstring)."""
    say = move_words if games.prompt == "verbose" else str
    labels = games.hanabi.labels
    dropped = {"invalid": 0, "failed": 0, "undecided": 0, "contaminated": 0, "duplicate": 0}
    ruled: list[tuple[str, str, str, str, str, Battle]] = []  # (target, view, better, move, player, battle)
    answered: list[tuple[str, str, str, str, Battle]] = []  # (target, view, move, source, battle): kinds 2, 3
    won: list[tuple[str, str, str, str, Battle]] = []
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
        for side, team, game, other in (("a", b.model_a, got.a, b.model_b), ("b", b.model_b, got.b, b.model_a)):
            if not game.plies:
                continue
            who = seats(team, game.plies[0].state.setup.players)
            beaten_by = next((m for m in other.split("+") if m in references), None)
            lost = j.winner not in WINNER or WINNER[j.winner] != side
            for ply in game.plies:
                player, state = who[ply.state.to_move], ply.state
                view, mine = state.text(games.prompt), base_name(player) in targets
                wrong = fault(state, ply.move, labels) is not None
                if mine and wrong and (right := better_move(state, labels)) is not None:
                    ruled.append((base_name(player), view, right, ply.move, player, b))
                elif mine and lost and beaten_by is not None:
                    answered.append((base_name(player), view, cautious_move(parse_view(state.key())), beaten_by, b))
                elif not lost and not wrong:
                    won += [(t, view, ply.move, player, b) for t in in_battle]
        if j.winner not in WINNER:
            dropped["undecided"] += 1
    sft: list[SFTExample] = []
    dpo: list[DPOPair] = []
    kept: set[tuple[str, str]] = set()
    for t, view, right, move, player, b in ruled:
        if (t, view) not in kept:
            kept.add((t, view))
            pid = stable_id("position", view)
            sft.append(sft_example(b, prompt=view, completion=say(right), prompt_id=pid, source_model="rules",
                                   target=t))
            dpo.append(dpo_pair(b, prompt=view, chosen=say(right), rejected=say(move), prompt_id=pid,
                                chosen_model="rules", rejected_model=player, target=t))
    for t, view, move, source, b in answered + won:
        if (t, view) in kept:
            dropped["duplicate"] += 1
            continue
        kept.add((t, view))
        sft.append(sft_example(b, prompt=view, completion=say(move), prompt_id=stable_id("position", view),
                               source_model=source, target=t))
    return Curated(sft, dpo, dropped)
