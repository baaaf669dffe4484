"""The games world's datasets: the winner's moves (SFT) and, in positions where a winner and a
loser moved differently, (winning move, losing move) pairs (DPO).

Every decisive game of the iteration with a target in it is replayed by the referee. Where a
target (any version of it, in self-play) lost, each move of the winner becomes an SFT example
for it (the position as the player read it, the move): Arena Learning's rule, what beat the
target is learnt; with ``curate.include_target_wins`` the target's own winning moves too.
With ``dedup`` a position is kept once per target, with the move the winners played there most
often over the iteration's games (a move a lucky winner made once is outvoted). For DPO, the moves played in a position
by eventual winners and by eventual losers are counted over all the iteration's games; where
the target lost after a move that a winner did not play there, the pair is (the winners' most
frequent move, the target's move), one per (target, position). Draws teach nothing here (but
with ``tactics``, below).

The ``world.games`` settings that shape the data: ``prompt`` (how a position is written), and
``missed_moves``, ``tactics`` and ``symmetries``, below.

With ``missed_moves``, where a target lost, its last move is also learnt as it should have been,
as the rules show it: the win it had there, else the cell the winner won on next (a block; in
Connect Four only where the target's own move was in another column, so that the cell is where
its piece would land). These rows' source is ``rules``. In a position where the rules name the
move, no winner's move is learnt for that target: a winner may have won after a blunder there;
the rules' win or block is certain (``train.replay`` keeps to this across iterations:
flywheel/stages/train_data.py). Winners' moves alone teach a target to finish its own lines; a loss's
last move is where it failed to stop the other.

With ``tactics``, every move a target made in any game it played (won, drawn or lost) is checked
the same way: where it left a win untaken, or the other side's only threat unblocked
(``Position.tactical_moves``), the rules' move is learnt there (source ``rules``, first win where
it had several). A game against a random mover rarely punishes a missed block, so without this
most of them teach nothing.

With ``symmetries``, every SFT example and DPO pair is also learnt in each rotation and reflection
of its board (``rules.symmetries``), once per (target, position): the rules are the same there,
so the images are as true as the original. An image that is a held-out (eval or validation)
position is dropped and counted as ``contaminated``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from flywheel.config.tree import CurateConfig, GamesConfig
from flywheel.games.referee import Ply, replay
from flywheel.games.rules import parse_position, symmetries
from flywheel.ground.records import Battle, DPOPair, Judgment, SFTExample, base_name, stable_id
from flywheel.learning.curation import Curated, decisive, dpo_pair, sft_example

SEAT = {"model_a": "a", "model_b": "b"}
RULES = {"sft": "every move of the winner of a decisive game a target lost (the position, the move); the "
                "winners' most frequent move per position with dedup",
         "dpo": "(the winners' most frequent move, the target's move) in positions where the target moved and lost"}
MISSED = {"sft": "; where a target lost, its last move corrected by the rules (the win it missed, else the block), "
                  "which no winner's move in that position displaces",
          "dpo": "; where a target lost, (the win it missed or the block, its last move)"}
TACTICS = {"sft": "; every move of a target that left a win untaken or the other side's only threat unblocked, "
                   "in any game, corrected by the rules",
           "dpo": "; (the win or the block, the target's move) wherever it left a win untaken or the only threat "
                  "unblocked"}


def curate_games(battles: list[Battle], judgments: dict[str, Judgment], targets: list[str], held_out: set[str],
                 cfg: CurateConfig, games: GamesConfig) -> Curated:
    """The SFT examples and DPO pairs of an iteration's games (see the module docstring); positions
    in ``held_out`` (eval and validation start positions) never pass."""
    style, missed, tactics = games.prompt, games.missed_moves, games.tactics
    dropped = {"invalid": 0, "failed": 0, "undecided": 0, "contaminated": 0, "duplicate": 0}
    winning: dict[str, Counter] = {}  # position text -> winners' moves there
    won: list[tuple[str, str, int, Battle, str]] = []  # (target, position, move, battle, winner) in log order
    losing: dict[tuple[str, str], list[tuple[int, Battle, str]]] = {}  # (target, position) -> its losing moves
    target_set = set(targets)
    # (target, position, the right move, its move, battle, its version): missed and tactical moves, in log order
    corrected: list[tuple[str, str, int, int, Battle, str]] = []
    for b in battles:
        plies = None
        if tactics and b.ok and (v := judgments.get(b.battle_id)) is not None and v.valid:  # draws too
            plies = replay(b.prompt, b.response_a, b.response_b).plies
            corrected += _tactic_misses(b, plies, target_set, held_out, style)
        j = decisive(b, judgments.get(b.battle_id), dropped)
        if j is None:
            continue
        win_seat = SEAT[j.winner]
        players = {"a": b.model_a, "b": b.model_b}
        lose_seat = "b" if win_seat == "a" else "a"
        loser = base_name(players[lose_seat])
        target_lost = loser in target_set
        if target_lost:  # Arena Learning: what beat a target is learnt
            learners = [loser]
        else:
            learners = [base_name(players[win_seat])] if cfg.include_target_wins else []
        if plies is None:
            plies = replay(b.prompt, b.response_a, b.response_b).plies
        last = _missed_move(plies, win_seat) if missed and target_lost else None
        if last is not None and (lost_at := last[0].position.text(style)) not in held_out:
            corrected.append((loser, lost_at, last[1], last[0].move, b, players[lose_seat]))
        for ply in plies:
            text = ply.position.text(style)
            if text in held_out:
                dropped["contaminated"] += 1
                continue
            if ply.seat == win_seat:
                winning.setdefault(text, Counter())[ply.move] += 1
                won += [(t, text, ply.move, b, players[win_seat]) for t in learners]
            elif base_name(players[ply.seat]) in target_set:
                losing.setdefault((base_name(players[ply.seat]), text), []).append((ply.move, b, players[ply.seat]))
    sft: list[SFTExample] = []
    rule_pairs: dict[tuple[str, str], DPOPair] = {}
    for t, text, right, move, b, version in corrected:  # first: where the rules name the move, no winner's overrides it
        if (t, text) not in rule_pairs:
            sft.append(sft_example(b, prompt=text, completion=str(right), prompt_id=_pid(text), source_model="rules",
                                   target=t))
        rule_pairs.setdefault((t, text), dpo_pair(b, prompt=text, chosen=str(right), rejected=str(move),
                                                  prompt_id=_pid(text), chosen_model="rules", rejected_model=version,
                                                  target=t))
    kept: set[tuple[str, str]] = set(rule_pairs)
    for t, text, move, b, winner in won:
        if (t, text) in rule_pairs or (cfg.dedup and ((t, text) in kept or move != _best(winning[text]))):
            dropped["duplicate"] += 1
            continue
        kept.add((t, text))
        sft.append(sft_example(b, prompt=text, completion=str(move), prompt_id=_pid(text), source_model=winner,
                               target=t))
    dpo = []
    for (t, text), moves in losing.items():
        if text not in winning:
            continue
        chosen = _best(winning[text])
        for move, b, player in moves:
            if move != chosen:
                dpo.append(dpo_pair(b, prompt=text, chosen=str(chosen), rejected=str(move), prompt_id=_pid(text),
                                    chosen_model="winners", rejected_model=player, target=t))
                break
    paired = {(p.target, p.prompt) for p in dpo}
    dpo += [p for key, p in rule_pairs.items() if key not in paired]
    if games.symmetries:
        sft = _with_images(sft, ("completion",), held_out, dropped, style)
        dpo = _with_images(dpo, ("chosen", "rejected"), held_out, dropped, style)
    return Curated(sft, dpo, dropped)


def _with_images(rows: list, moves: tuple[str, ...], held_out: set[str], dropped: dict[str, int], style: str) -> list:
    """``rows`` (SFT examples or DPO pairs, whose ``moves`` fields hold moves), each followed by its
    images under the board's symmetries; a (target, position) is kept once, the original first."""
    seen = {(r.target, r.prompt) for r in rows}
    out = []
    for r in rows:
        out.append(r)
        pos = parse_position(r.prompt)
        for perm in symmetries(pos.game)[1:]:
            images = [pos.image(perm, int(getattr(r, m))) for m in moves]
            text = images[0][0].text(style)
            if text in held_out:
                dropped["contaminated"] += 1
                continue
            if (r.target, text) in seen:
                continue
            seen.add((r.target, text))
            out.append(replace(r, prompt=text, prompt_id=_pid(text), **{m: str(img[1]) for m, img in zip(moves, images)}))
    return out


def _tactic_misses(b: Battle, plies: tuple[Ply, ...], targets: set[str], held_out: set[str], style: str
                   ) -> list[tuple[str, str, int, int, Battle, str]]:
    """Every move of a target in battle ``b`` (its replayed ``plies``) where the rules name the move
    and it played another (``Position.tactical_moves``): (target, position, the rules' move, its
    move, battle, its version)."""
    players = {"a": b.model_a, "b": b.model_b}
    out = []
    for ply in plies:
        t = base_name(players[ply.seat])
        if t not in targets:
            continue
        right = ply.position.tactical_moves()
        if right and ply.move not in right and (text := ply.position.text(style)) not in held_out:
            out.append((t, text, right[0], ply.move, b, players[ply.seat]))
    return out


def _missed_move(plies: tuple[Ply, ...], win_seat: str) -> tuple[Ply, int] | None:
    """The loser's last move of a game won on the board, and the move the rules say it should have
    played there: a win of its own, else the cell the winner then won on. None where there is no
    such move (a forfeit, a game too short, a Connect Four column where the winner's piece landed on
    the loser's own: the loser's piece already stood where the block would go)."""
    if len(plies) < 2 or plies[-1].seat != win_seat or plies[-2].seat == win_seat:
        return None
    final, before = plies[-1], plies[-2]
    if final.position.play(final.move).winner() is None:
        return None
    pos = before.position
    wins = pos.winning_moves()
    right = wins[0] if wins else final.move
    if right == before.move:
        return None
    return before, right


def _best(moves: Counter) -> int:
    """The winners' most frequent move in a position (the first played, among equals)."""
    return moves.most_common(1)[0][0]


def _pid(text: str) -> str:
    return stable_id("position", text)
