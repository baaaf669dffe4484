"""The games world: the referee (rules, illegal moves, draws), the reference players, playing
games through a roster (re-asks and forfeits recorded), curation of winners' moves, and
self-play opponents."""

import json
import random

import pytest

from flywheel.arena.games import play_games
from flywheel.config.tree import FlywheelConfig
from flywheel.games.referee import move_token, replay
from flywheel.games.rules import CONNECT4, TICTACTOE, Position, parse_move, parse_position
from flywheel.ground.records import Battle, BattleSpec, Generation, JudgedBattle, Judgment, Prompt
from flywheel.learning.game_curation import curate_games
from flywheel.players.player import Player, PlayerSetup, SamplingParams
from flywheel.players.reference import MinimaxPlayer, RandomMover
from judges.game import GameJudge

EMPTY_TTT = "ttt 123456789 x="


def ttt(board: str, to_move: str = "x") -> Position:
    return Position(TICTACTOE, board, to_move)


def battle(start: str, a: str, b: str, model_a: str = "student@0", model_b: str = "random", bid: str = "b1") -> Battle:
    return Battle(bid, 1, "train", "p1", start, "tictactoe", 1, None, model_a, model_b, a, b)


# -- rules and referee ---------------------------------------------------------------------
@pytest.mark.parametrize("board,winner", [
    ("xxx-oo---", "x"), ("o--o--o--", "o"), ("x---x---x", "x"), ("--o-o-o--", "o"), ("xo-xo-x--", "x"),
    ("xoxxoooxx", None), ("---------", None),
])
def test_tic_tac_toe_lines(board, winner):
    assert ttt(board).winner() == winner


def test_connect_four_pieces_fall_and_four_in_a_diagonal_wins():
    pos = CONNECT4.initial()
    for col in (1, 2, 2, 3, 4, 3, 3, 4, 5, 4):  # x builds the rising diagonal 1-2-3-4 from the bottom left
        pos = pos.play(col)
    assert pos.winner() is None and pos.to_move == "x"
    assert pos.board[5 * 7] == "x" and pos.board[4 * 7] == "-"  # pieces at the bottom, not the top
    assert pos.play(4).winner() == "x"
    assert 1 not in Position(CONNECT4, "x" + "-" * 41, "o").legal_moves()  # a full column is not a move


def test_referee_decides_wins_losses_and_draws():
    # x (seat A) takes the top row
    assert replay(EMPTY_TTT, "1 2 3", "4 5").winner == "a"
    # o (seat B) wins down the middle column
    assert replay(EMPTY_TTT, "1 3 7", "2 5 8").winner == "b"
    draw = replay(EMPTY_TTT, "1 2 6 7 9", "5 3 4 8")
    assert draw.winner == "draw" and len(draw.plies) == 9
    # from a start position where o is to move, seat A plays o
    got = replay("ttt xx-oo-x-- o=", "6", "")
    assert got.winner == "a" and "o wins" in got.reason
    assert GameJudge().judge([battle(EMPTY_TTT, "1 2 6 7 9", "5 3 4 8")])[0].winner == "tie"


def test_illegal_moves_lose_and_forfeits_are_recorded():
    taken = replay(EMPTY_TTT, "1 1", "5")  # A plays an occupied cell
    assert taken.winner == "b" and "illegal move" in taken.reason
    forfeit = replay(EMPTY_TTT, "5 " + move_token(["1", "banana"], None), "1")
    assert forfeit.winner == "b" and "forfeits after 2 illegal answers" in forfeit.reason
    assert forfeit.illegal == {"a": 2, "b": 0}
    reasked = replay(EMPTY_TTT, move_token(["0"], 1) + " 2 3", "4 5")
    assert reasked.winner == "a" and reasked.illegal["a"] == 1
    j = GameJudge().judge([battle(EMPTY_TTT, "1 1", "5")])[0]
    assert j.winner == "model_b" and j.margin == 1.0 and json.loads(j.raw)["illegal"] == {"a": 0, "b": 0}


def test_a_record_that_is_not_a_game_is_an_invalid_judgment():
    cut = GameJudge().judge([battle(EMPTY_TTT, "1 2", "4")])[0]  # stops before the game is over
    assert cut.winner is None and "ends before" in cut.error
    extra = GameJudge().judge([battle(EMPTY_TTT, "1 2 3 9", "4 5")])[0]  # goes on after x won
    assert extra.winner is None and "goes on" in extra.error
    garbage = GameJudge().judge([battle("what is 2+2=", "1", "2")])[0]
    assert garbage.winner is None and "no game position" in garbage.error


def test_positions_parse_from_both_text_styles():
    pos = ttt("x-o------", "x")
    assert parse_position(pos.text("verbose")) == pos == parse_position(pos.text())
    assert "Empty cells: 2 4 5 6 7 8 9" in pos.text("verbose")
    assert parse_move("I take cell 7.") == 7 and parse_move("none") is None


# -- reference players ---------------------------------------------------------------------
def ask(player: Player, pos: Position, pid: str = "q") -> int:
    return int(player.generate([Prompt(pid, pos.text(), "tictactoe", 1)], SamplingParams())[0].text)


def test_minimax_takes_a_win_and_blocks_a_loss():
    mm = MinimaxPlayer("minimax", depth=2)
    assert ask(mm, ttt("xx-oo----", "x")) == 3  # wins at once
    assert ask(mm, ttt("xx--o----", "o")) == 3  # blocks x's row
    c4 = Position(CONNECT4, "-" * 35 + "ooo-xx-", "x")
    assert int(mm.generate([Prompt("q", c4.text(), "connect4", 1)], SamplingParams())[0].text) == 4


def test_random_mover_plays_legal_moves_reproducibly():
    rm = RandomMover("random", seed=3)
    pos = ttt("xo-xo-o-x", "x")
    moves = [ask(rm, pos, f"game{i}") for i in range(30)]
    assert set(moves) <= {3, 6, 8} and len(set(moves)) > 1
    assert moves == [ask(rm, pos, f"game{i}") for i in range(30)]


def test_minimax_beats_random_and_never_loses_at_tic_tac_toe():
    mm, rm = MinimaxPlayer("minimax", depth=4), RandomMover("random")
    lost = 0
    for g in range(40):
        pos, players = TICTACTOE.initial(), (mm, rm) if g % 2 else (rm, mm)
        turn = 0
        while not pos.over():
            pos = pos.play(players[turn % 2].move(pos, random.Random(g * 10 + turn)))
            turn += 1
        lost += pos.winner() is not None and pos.winner() != ("x" if g % 2 else "o")
    assert lost == 0


def test_the_ceiling_counts_both_seats_and_a_lost_start_stays_lost():
    from benchmarks.games_ceiling import win_or_draw

    perfect, mm, rm = MinimaxPlayer("perfect", depth=9), MinimaxPlayer("minimax", depth=3), RandomMover("random")
    drawn = ttt("x---o----", "x")  # x in a corner, o in the centre: a draw with best play
    assert win_or_draw(perfect, rm, [drawn], seed=0) == 1.0
    # x threatens cells 3 and 7 at once and o has no line to win on: o to move is lost, x wins,
    # so whoever plays, one of the two seats is lost against a player that does not blunder
    lost_for_o = ttt("xx-xo---o", "o")
    assert win_or_draw(perfect, mm, [lost_for_o], seed=0) == 0.5
    assert win_or_draw(mm, perfect, [lost_for_o], seed=0) == 0.5


def test_the_tactics_probe_asks_every_win_and_single_block_and_scores_the_named_move():
    from benchmarks.games_tactics import right_share, tactic_positions

    wins, blocks = tactic_positions()
    assert (len(wins), len(blocks)) == (2358, 976)  # of tic-tac-toe's 5,478 legal positions
    blk = dict((p.text(), right) for p, right in blocks)
    assert blk["ttt xx34o6789 o="] == {3}  # o to move, no win, x threatens 1-2-3
    assert "ttt xx34o6789 o=" not in {p.text() for p, _ in wins}
    assert dict((p.text(), right) for p, right in wins)["ttt xx3oo6789 x="] == {3}
    assert right_share(MinimaxPlayer("minimax", depth=2), wins) == 1.0
    assert right_share(MinimaxPlayer("minimax", depth=2), blocks) == 1.0
    assert right_share(Stubborn("one"), blocks) == sum(right == {1} for _, right in blocks) / len(blocks) < 0.2


# -- playing through a roster --------------------------------------------------------------
class Stubborn(Player):
    """Answers cell 1 until it is taken, then keeps answering it (an illegal move)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[SamplingParams] = []

    @classmethod
    def from_config(cls, pc, name: str, setup: PlayerSetup) -> Player:
        return cls(name)

    def generate(self, prompts, params):
        self.asked.append(params)
        return [Generation(self.name, p.id, "1") for p in prompts]


class Broken(Stubborn):
    def generate(self, prompts, params):
        return [Generation(self.name, p.id, "", "HTTP 500 after 4 retries") for p in prompts]


def games_roster(tmp_path, target_kind: str):
    from flywheel.ground.store import RunStore
    from flywheel.worlds.world import Roster

    cfg = FlywheelConfig.model_validate({
        "world": {"kind": "games", "models": [{"name": "x", "categories": ["tictactoe"]}],
                  "games": {"max_illegal": 2}},
        "judge": {"kind": "game"},
        "targets": [{"name": "stubborn", "kind": target_kind}],
        "opponents": [{"name": "minimax", "kind": "minimax", "depth": 2}]})
    return Roster(cfg, RunStore(tmp_path / "run"))


def test_an_illegal_move_is_reasked_then_forfeited_and_recorded(tmp_path):
    roster = games_roster(tmp_path, "tests.test_games:Stubborn")
    start = Prompt("s", EMPTY_TTT, "tictactoe", 0)
    specs = [BattleSpec("g1", 1, "train", "s", "stubborn", "minimax")]
    battles, usage = play_games(roster, specs, {"s": start}, "terse", 2)
    b = battles[0]
    assert b.ok and b.response_a.split() == ["1", "1|1|1|!"]  # second move: asked, re-asked twice, forfeit
    j = GameJudge().judge(battles)[0]
    assert j.winner == "model_b" and "forfeits" in json.loads(j.raw)["result"]
    mine = next(u for u in usage if u["player"] == "stubborn")
    assert (mine["moves"], mine["reasks"], mine["forfeits"]) == (2, 2, 1)
    re_asks = roster.player("stubborn").asked[-2:]
    assert all(p.temperature == 1.0 for p in re_asks) and re_asks[0].seed != re_asks[1].seed


def test_a_failed_call_makes_the_battle_failed_never_a_loss(tmp_path):
    roster = games_roster(tmp_path, "tests.test_games:Broken")
    start = Prompt("s", EMPTY_TTT, "tictactoe", 0)
    battles, usage = play_games(roster, [BattleSpec("g1", 1, "train", "s", "stubborn", "minimax")], {"s": start},
                                "terse", 2)
    assert not battles[0].ok and "HTTP 500" in battles[0].error
    assert next(u for u in usage if u["player"] == "stubborn")["failed"] == 1


# -- curation ------------------------------------------------------------------------------
def test_winners_moves_become_sft_and_differing_moves_dpo_pairs():
    from flywheel.config.tree import CurateConfig, GamesConfig

    won = battle(EMPTY_TTT, "1 2 3", "4 5", "student@0", "random", "w")  # the target (A) wins
    lost = battle(EMPTY_TTT, "4 7 9", "1 2 3", "random", "student@0", "l")  # the target (B, o) wins
    lost2 = battle(EMPTY_TTT, "1 3 2", "5 9", "minimax", "student@0", "m")  # minimax wins; the target lost
    draw = battle(EMPTY_TTT, "1 2 6 7 9", "5 3 4 8", "student@0", "random", "d")
    js = {j.battle_id: j for j in GameJudge().judge([won, lost, lost2, draw])}
    cur = curate_games([won, lost, lost2, draw], js, ["student"], set(), CurateConfig(include_target_wins=False),
                       GamesConfig())
    assert cur.dropped["undecided"] == 1
    # Arena Learning's rule: the winner's moves where the target lost (minimax's, here)
    assert [(r.completion, r.source_model, r.target) for r in cur.sft] == [("1", "minimax", "student"),
                                                                           ("3", "minimax", "student"),
                                                                           ("2", "minimax", "student")]
    assert cur.dpo == []  # no position saw both a winner's move and a different losing move of the target
    every = curate_games([won, lost, lost2, draw], js, ["student"], set(), CurateConfig(include_target_wins=True),
                         GamesConfig())
    by_battle: dict[str, list[str]] = {}
    for r in every.sft:
        by_battle.setdefault(r.battle_id, []).append(r.completion)
    # the target's own wins too; the empty board is kept once (both winners played 1 there)
    assert by_battle == {"w": ["1", "2", "3"], "l": ["1", "2", "3"], "m": ["3", "2"]}
    assert every.dropped["duplicate"] == 1
    pair_battle = battle("ttt ----x---- o=", "5", "", "student@0", "random", "x")  # not a game: invalid
    assert curate_games([pair_battle], {}, ["student"], set(), CurateConfig(), GamesConfig()).dropped["invalid"] == 1


def test_symmetric_images_of_sft_examples_and_dpo_pairs_skip_held_out_positions():
    from flywheel.config.tree import CurateConfig, GamesConfig
    from flywheel.games.rules import CONNECT4, parse_position, symmetries

    start = "ttt x23456789 o="  # o to move, x in a corner: 4 distinct images (one mirror maps it onto itself)
    good = battle(start, "5 3 7", "2 4", "minimax", "random", "g")
    bad = battle(start, "9 2 4", "5 3 7", "student@0", "minimax", "b")
    js = {j.battle_id: j for j in GameJudge().judge([good, bad])}
    plain = curate_games([good, bad], js, ["student"], set(), CurateConfig(), GamesConfig())
    held = "ttt 12x456789 o="  # the start turned a quarter: an eval position, say
    sym = curate_games([good, bad], js, ["student"], {held}, CurateConfig(), GamesConfig(symmetries=True))
    assert [(p.prompt, p.chosen, p.rejected) for p in plain.dpo] == [(start, "5", "9")]
    assert [(p.prompt, p.chosen, p.rejected) for p in sym.dpo] == [
        (start, "5", "9"), ("ttt 12345678x o=", "5", "1"), ("ttt 123456x89 o=", "5", "3")]
    assert held not in {r.prompt for r in sym.sft + sym.dpo}
    assert sym.dropped["contaminated"] > plain.dropped["contaminated"]
    assert {r.prompt for r in plain.sft} < {r.prompt for r in sym.sft}
    assert len({(r.target, r.prompt) for r in sym.sft}) == len(sym.sft)  # once per (target, position)
    for r in sym.sft:  # an image of a winning move is a legal move of the image
        assert int(r.completion) in parse_position(r.prompt).legal_moves()
    mirror = symmetries(CONNECT4)
    assert len(mirror) == 2 and CONNECT4.initial().play(1).image(mirror[1], 2)[1] == 6


def test_dpo_pairs_put_a_winners_move_against_the_targets_losing_move_in_one_position():
    from flywheel.config.tree import CurateConfig, GamesConfig

    start = "ttt x23456789 o="  # o to move
    good = battle(start, "5 3 7", "2 4", "minimax", "random", "g")  # o (A) takes 5 and wins 3-5-7
    bad = battle(start, "9 2 4", "5 3 7", "student@0", "minimax", "b")  # the target (o, A) took 9 and lost
    js = {j.battle_id: j for j in GameJudge().judge([good, bad])}
    assert js["g"].winner == "model_a" and js["b"].winner == "model_b"
    cur = curate_games([good, bad], js, ["student"], set(), CurateConfig(), GamesConfig())
    assert [(p.prompt, p.chosen, p.rejected, p.target) for p in cur.dpo] == [(start, "5", "9", "student")]
    held = curate_games([good, bad], js, ["student"], {start}, CurateConfig(), GamesConfig())
    assert held.dpo == [] and held.dropped["contaminated"] >= 2  # a held-out position never reaches training


def test_a_lost_games_last_move_is_learnt_as_the_rules_correct_it():
    from flywheel.config.tree import CurateConfig, GamesConfig
    from flywheel.games.rules import CONNECT4

    blocked = battle(EMPTY_TTT, "1 2 3", "5 9", "minimax", "student@1", "blk")  # o took 9, x won on 3: block 3
    won = battle(EMPTY_TTT, "1 3 9 6", "2 5 4", "minimax", "student@1", "win")  # o had 2-5-8 and took 4
    # o played on top of x's 3 and x won in column 4: the block is 4
    c4 = battle(CONNECT4.initial().text(), "1 2 3 4", "1 2 3", "minimax", "student@1", "c4")
    forfeit = battle(EMPTY_TTT, "1 2", "5 5|5|5|!", "minimax", "student@1", "ff")  # no move of the board to correct
    games = [blocked, won, c4, forfeit]
    js = {j.battle_id: j for j in GameJudge().judge(games)}
    assert all(j.winner == "model_a" for j in js.values())
    off = curate_games(games, js, ["student"], set(), CurateConfig(), GamesConfig())
    assert "rules" not in {r.source_model for r in off.sft} | {p.chosen_model for p in off.dpo}
    on = curate_games(games, js, ["student"], set(), CurateConfig(), GamesConfig(missed_moves=True))
    rules = [(r.battle_id, r.prompt, r.completion) for r in on.sft if r.source_model == "rules"]
    assert rules == [("blk", "ttt xx34o6789 o=", "3"), ("win", "ttt xox4o678x o=", "8"),
                     ("c4", "c4 " + "-" * 21 + "12-----oo3----xxx4567 o=", "4")]
    pairs = [(p.battle_id, p.chosen, p.rejected, p.rejected_model) for p in on.dpo if p.chosen_model == "rules"]
    assert pairs == [("blk", "3", "9", "student@1"), ("win", "8", "4", "student@1"), ("c4", "4", "3", "student@1")]
    assert [r for r in on.sft if r.source_model != "rules"] == off.sft  # the winners' moves are as before
    held = curate_games(games, js, ["student"], {"ttt xx34o6789 o="}, CurateConfig(), GamesConfig(missed_moves=True))
    assert "ttt xx34o6789 o=" not in {r.prompt for r in held.sft + held.dpo}  # a held-out position stays out


def test_where_the_rules_name_the_move_no_winners_blunder_is_learnt_there():
    from datasets import Dataset

    from flywheel.config.tree import CurateConfig, GamesConfig
    from flywheel.stages.train_data import rules_first

    lost_at = "ttt xx34o6789 o="  # x threatens 1-2-3: o must block 3
    blocked = battle(EMPTY_TTT, "1 2 3", "5 9", "minimax", "student@1", "blk")  # the target took 9 there and lost
    # self-play: o (student@1) took 7 there instead, x (student@0) missed its win, and o won on 3-5-7
    lucky = battle(EMPTY_TTT, "1 2 9", "5 7 3", "student@0", "student@1", "lucky")
    js = {j.battle_id: j for j in GameJudge().judge([blocked, lucky])}
    assert js["blk"].winner == "model_a" and js["lucky"].winner == "model_b"
    alone = curate_games([lucky], js, ["student"], set(), CurateConfig(), GamesConfig(missed_moves=True))
    assert {r.prompt: r.completion for r in alone.sft}[lost_at] == "7"  # a winner's move, where nothing corrects it
    cur = curate_games([blocked, lucky], js, ["student"], set(), CurateConfig(), GamesConfig(missed_moves=True))
    there = [(r.completion, r.source_model) for r in cur.sft if r.prompt == lost_at]
    assert there == [("3", "rules")]  # the block, once; the lucky winner's 7 is not learnt
    assert cur.dropped["duplicate"] == alone.dropped["duplicate"] + 1

    # train.replay: a later iteration's winner's row does not undo an earlier iteration's rule
    def rows(*r):
        return Dataset.from_list([{"prompt": p, "completion": c, "source_model": m, "target": "student"} for p, c, m in r])

    it1 = rows((lost_at, "3", "rules"), ("ttt 123456789 x=", "5", "minimax"))
    it2 = rows((lost_at, "7", "student@1"), (lost_at, "3", "minimax"), ("ttt 123456789 x=", "1", "random"))
    kept = [list(zip(p["prompt"], p["completion"], p["source_model"])) for p in rules_first([it1, it2])]
    assert kept == [[(lost_at, "3", "rules"), ("ttt 123456789 x=", "5", "minimax")],
                    [(lost_at, "3", "minimax"), ("ttt 123456789 x=", "1", "random")]]  # other sources all stay
    assert len(rules_first([it2])[0]) == 3  # no rule: nothing dropped


def test_with_tactics_every_untaken_win_and_open_single_threat_of_a_target_is_corrected_in_any_game():
    from flywheel.config.tree import CurateConfig, GamesConfig

    assert ttt("xx-o---o-").tactical_moves() == [3]  # its own win first
    assert ttt("xx--o----", "o").tactical_moves() == [3]  # no win: the block of the only threat
    assert ttt("xx-oo----").tactical_moves() == [3] and ttt("x-x-o-o--", "x").tactical_moves() == [2]
    assert ttt("xx-x-o-o-", "o").threats() == [3, 7] and ttt("xx-x-o-o-", "o").tactical_moves() == []  # two threats
    # the target (x) won, but first played 5 where 3 won at once: its winning move is not learnt there
    won = battle(EMPTY_TTT, "1 2 5 9", "4 8 6", "student@1", "random", "won")
    # a draw the target (o) played: 9 left x's 1-2-3 open; later 4 where 3-6-9 won at once
    drawn = battle(EMPTY_TTT, "1 2 8 7 6", "5 9 3 4", "random", "student@1", "drawn")
    js = {j.battle_id: j for j in GameJudge().judge([won, drawn])}
    assert js["won"].winner == "model_a" and js["drawn"].winner == "tie"
    missed_win, open_threat, untaken = ttt("xx-o---o-").text(), ttt("xx--o----", "o").text(), ttt("xxo-o-xxo", "o").text()
    plain = curate_games([won, drawn], js, ["student"], set(), CurateConfig(), GamesConfig(missed_moves=True))
    assert {r.prompt: r.completion for r in plain.sft}[missed_win] == "5"  # its own winning game's move
    assert not [r for r in plain.sft if r.source_model == "rules"] and not plain.dpo  # a draw teaches nothing
    cur = curate_games([won, drawn], js, ["student"], set(), CurateConfig(),
                       GamesConfig(missed_moves=True, tactics=True))
    rules = {r.prompt: r.completion for r in cur.sft if r.source_model == "rules"}
    assert rules == {missed_win: "3", open_threat: "3", untaken: "6"}
    assert [r.completion for r in cur.sft if r.prompt == missed_win] == ["3"]
    assert {(p.prompt, p.chosen, p.rejected) for p in cur.dpo} == {
        (missed_win, "3", "5"), (open_threat, "3", "9"), (untaken, "6", "4")}
    # held-out positions are never learnt
    held = curate_games([won, drawn], js, ["student"], {open_threat}, CurateConfig(), GamesConfig(tactics=True))
    assert open_threat not in {r.prompt for r in held.sft}


# -- self-play -----------------------------------------------------------------------------
def test_the_self_arm_plays_earlier_versions_and_is_rewarded_as_self():
    from flywheel.arena.bandit_rewards import feedback
    from flywheel.arena.selection import SELF, SelectionRound, Selector, opponent_arms, plan_round
    from flywheel.config.tree import SelectConfig

    cfg = SelectConfig(self_play=True, opponents="uniform", prompt_floor=1.0)
    pool = {"tictactoe/L1": [Prompt(f"p{i}", EMPTY_TTT, "tictactoe", 1) for i in range(5)]}
    sel = Selector.new(cfg, list(pool), opponent_arms(cfg, ["random"]))
    assert sel.opponents == ["random", SELF]
    first = plan_round(sel, cfg, pool, SelectionRound("student@0", 40, 1, 1, 0), set())
    assert {s.model_a for s in first} | {s.model_b for s in first} == {"student@0", "random"}
    later = plan_round(sel, cfg, pool, SelectionRound("student@3", 200, 4, 1, 0), set())
    players = {m for s in later for m in (s.model_a, s.model_b)}
    assert players == {"student@3", "random", "student@0", "student@1", "student@2"}
    self_game = next(s for s in later if "random" not in (s.model_a, s.model_b))
    b = Battle(self_game.battle_id, 4, "train", "p0", EMPTY_TTT, "tictactoe", 1, None, self_game.model_a,
               self_game.model_b, "", "", None, self_game.arm)
    current_wins = "model_a" if self_game.model_a == "student@3" else "model_b"
    won = [JudgedBattle(b, Judgment(b.battle_id, "game", current_wins))]
    assert feedback("uncertainty", won, "student@3", {})[0][1] == SELF
    assert feedback("yield", won, "student@3", {})[0][2] == 0.0  # the current version won: no yield


def test_games_config_is_checked_together():
    from flywheel.config.loading import ConfigError, load_config

    with pytest.raises(ConfigError, match="world.kind games and judge.kind game"):
        load_config(None, ["world.kind=games"])
    with pytest.raises(ConfigError, match="not games"):
        load_config(None, ["world.kind=games", "judge.kind=game"])
    with pytest.raises(ConfigError, match="depth"):
        load_config(None, ["opponents.0.depth=0"])
    with pytest.raises(ConfigError, match="evaluate.sampling: active is for prompt worlds"):
        load_config("flows/recipes/tictactoe.yaml", ["evaluate.sampling=active"])
    load_config("flows/recipes/tictactoe.yaml", [])
