"""Hanabi: the rules engine (legal moves, hidden information, scoring, end of game), duplicate team
battles on one deck decided by the referee and rated by Bradley-Terry, the curation rules, and the
bad sizes and partners the config refuses."""

import random
import subprocess
import sys
from dataclasses import replace

import pytest

from flywheel.games.hanabi import PROVEN, Setup, State, parse_move, parse_view, proves_playable
from flywheel.games.hanabi_policy import cautious_move
from flywheel.games.hanabi_referee import new_deal, parse_deal, replay_duplicate, replay_team
from flywheel.ground.records import Battle, BattleSpec, JudgedBattle
from judges.game import GameJudge

SMALL = Setup(players=2, colours=2, ranks=3, hand=3, hints=2, lives=2)  # red and yellow: 1 1 1 2 2 3 each
FULL = ["r1", "r1", "r1", "r2", "r2", "r3", "y1", "y1", "y1", "y2", "y2", "y3"]


def small_deal(*cards: str) -> State:
    """A game of SMALL whose deck starts with ``cards`` (seat 0's hand, then seat 1's), the rest
    of the deck after them in FULL's order."""
    rest = list(FULL)
    for c in cards:
        rest.remove(c)
    return State.deal(SMALL, tuple(cards) + tuple(rest))


def test_legal_moves_plays_discards_and_hints_the_next_seat_holds():
    st = small_deal("r1", "y2", "r3", "y1", "y1", "r2")  # seat 0: r1 y2 r3; seat 1: y1 y1 r2
    assert st.legal_moves() == ["p1", "p2", "p3", "d1", "d2", "d3", "hr", "hy", "h1", "h2"]  # no 3 in seat 1's hand
    st = st.play("h1").play("hr")  # a hint token each
    assert st.hints == 0 and not any(m[0] == "h" for m in st.legal_moves())
    with pytest.raises(ValueError, match="illegal move"):
        st.play("hy")
    assert st.knowledge[1] == ("-1", "-1", "--") and st.knowledge[0] == ("r-", "--", "r-")


def test_a_seat_never_sees_its_own_cards_in_either_style():
    """Two games that differ only in seat 0's (unhinted) cards read the same to seat 0, before and
    after a round of moves that show none of them; seat 1's view shows them."""
    one = small_deal("r1", "y2", "r3", "y1", "y1", "r2")
    two = replace(one, hands=(("y3", "r2", "y1"),) + one.hands[1:])
    for style in ("terse", "verbose"):
        assert one.text(style) == two.text(style)
        after = [s.play("hy").play("d1") for s in (one, two)]  # seat 0 hints, seat 1 discards: seat 0 again
        assert after[0].text(style) == after[1].text(style)
    assert "y1+y1+r2-" in one.text() and "r1+y2-r3-" in one.play("hy").text()  # a playable card's mark: +
    assert len(one.text()) < 50  # fits the tiny models' 64 characters with the answer
    view = parse_view(one.text("verbose"))
    assert view.others == (("y1", "y1", "r2"),) and view.knowledge == ("--",) * 3


def test_a_view_reads_back_as_the_state_it_shows_whatever_the_size():
    """Every seat's view, at every move of random games of several sizes, parses back to the hands
    it shows, what each seat was told, the fireworks, tokens and deck, and the same legal moves;
    none is longer than the size's ``longest_view``, which the first view of a deal is."""
    rng = random.Random(0)
    for setup in (Setup(2, 3, 4, 4), Setup(), Setup(players=3), Setup(players=5, hand=4)):
        for _ in range(20):
            st = parse_deal(new_deal(setup, rng))
            assert len(st.text()) == setup.longest_view
            while not st.over():
                assert len(st.text()) <= setup.longest_view
                view, n = parse_view(st.text()), setup.players
                assert view == parse_view(st.text("verbose"))
                others = [(st.to_move + i) % n for i in range(1, n)]
                assert view.others == tuple(st.hands[o] for o in others)
                assert view.others_told == tuple(st.knowledge[o] for o in others)
                proven = tuple(PROVEN if proves_playable(k, st.fireworks) else k for k in st.knowledge[st.to_move])
                assert (view.knowledge, view.fireworks) == (proven, st.fireworks)
                marks = st.key().split()[2][2::3]  # the next seat's cards' marks: playable ones are + o u (or k)
                assert [m in "+ou" for m in marks] == [st.playable(c) and "-" in k for c, k in
                                                        zip(st.hands[others[0]], st.knowledge[others[0]])]
                assert (view.hints, view.lives, view.deck) == (st.hints, st.lives, len(st.deck))
                assert view.legal_moves() == st.legal_moves()
                st = st.play(rng.choice(st.legal_moves()))


def test_scoring_lives_and_the_end_of_the_game():
    st = small_deal("r1", "y1", "r3", "y2", "r2", "y1")  # the deck then: r1 r1 r2 y1 y2 y3
    st = st.play("p1")  # seat 0: r1 on red
    assert st.score == 1 and st.hands[0] == ("y1", "r3", "r1")  # the newest card last
    st = st.play("p2").play("hy")  # seat 1: r2 on red; seat 0 spends a hint token
    st = st.play("p1")  # seat 1: y2 on an empty yellow firework, a misplay, costs a life
    assert (st.lives, st.discards, st.score, st.hints) == (1, ("y2",), 2, 1)
    st = st.play("p2")  # seat 0: r3 completes red, which earns a hint token back
    assert st.fireworks == (3, 0) and st.hints == 2 and st.score == 3
    assert st.blunder("p1") is None and st.blunder("p2") == "misplay"  # seat 1 holds y1 r1 r2
    lost = st.play("p2")  # misplaying r1 costs the last life: the game is over, the score kept
    assert lost.over() and lost.lives == 0 and lost.score == 3 and lost.legal_moves() == []
    st = State.deal(SMALL, tuple(FULL))  # once the deck runs out every seat moves once more
    for _ in range(6):  # every discard draws: the sixth draws the last card
        st = st.play("d1")
    assert not st.deck and st.final_turns == 2 and not st.over()
    st = st.play("d1").play("d1")
    assert st.over()


def test_critical_discards_and_parsing_answers():
    st = small_deal("r3", "y1", "y1", "r1", "r1", "y2")  # the only r3
    assert st.critical("r3") and st.blunder("d1") == "critical discard" and st.blunder("d2") is None
    assert [parse_move(a) for a in ("play 2", "P3", "discard 1", "hint red", "hint 3", "hr", "say hi")] == [
        "p2", "p3", "d1", "hr", "h3", "hr", None]


def test_impossible_sizes_are_named():
    assert Setup().problem() is None and Setup().deck_size == 50 and Setup().max_score == 25
    assert "hand 9 x players 2" in Setup(colours=2, ranks=2, hand=9).problem()
    assert "colours 6" in Setup(colours=6).problem()


def test_both_teams_play_the_same_deck_and_the_referee_decides_by_score():
    """The duplicate: a record replays on the battle's one deal; the same moves on the same deck
    score the same (a tie); the higher score wins; a forfeit loses; an unfinished record is no game."""
    deal = new_deal(SMALL, random.Random(3))
    st, moves = parse_deal(deal), []
    while not st.over():
        moves.append(cautious_move(parse_view(st.text())))
        st = st.play(moves[-1])
    good = " ".join(moves)
    assert replay_team(deal, good).score == st.score > 0
    assert replay_duplicate(deal, good, good).winner == "draw"
    bad = parse_deal(deal)
    worse = []
    while not bad.over():
        worse.append("p1")
        bad = bad.play("p1")
    assert bad.score < st.score
    assert replay_duplicate(deal, " ".join(worse), good).winner == "b"
    assert replay_duplicate(deal, "x|y|!", good).winner == "b"
    assert replay_duplicate(deal, good, "h9").winner == "a"  # an illegal move loses
    assert replay_duplicate(deal, good, moves[0]).winner is None  # stops before the game is over
    assert replay_duplicate(deal, good + " p1", good).winner is None  # runs past it


def test_two_cautious_bots_outrank_two_random_movers_on_20_decks(tmp_path):
    """The issue's team test: one team of two cautious bots and one of two random movers (and a
    mixed team) play 20 decks in duplicate through the arena and the rules judge; Bradley-Terry
    rates the strong team above, with intervals that do not overlap, and orders the teams as their
    mean scores on the same decks do."""
    from flywheel.arena.game_scores import team_scores
    from flywheel.arena.hanabi_play import play_hanabi
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.store import RunStore
    from flywheel.maths.leaderboard import board
    from flywheel.worlds.game_pools import game_splits
    from flywheel.worlds.world import Roster

    cfg = FlywheelConfig.model_validate({
        "world": {"kind": "games", "games": {"games": ["hanabi"], "train_per_cell": 4, "eval_per_cell": 20,
                                             "val_per_cell": 1, "hanabi": {"colours": 3, "hand": 4}},
                  "models": [{"name": "student", "categories": ["hanabi"]}]},
        "judge": {"kind": "game"}, "targets": [{"name": "student"}], "rating": {"bootstrap_rounds": 50},
        "opponents": [{"name": "cautious", "kind": "cautious"}, {"name": "random", "kind": "random"}]})
    _, decks, _ = game_splits(cfg.world.games)
    assert len({p.text for p in decks}) == 20
    teams = [("cautious+cautious", "random+random"), ("random+cautious", "cautious+cautious"),
             ("random+random", "random+cautious")]
    specs = [BattleSpec(f"b{i}-{j}", 0, "eval", p.id, a, b, "hanabi/L0")
             for i, p in enumerate(decks) for j, (a, b) in enumerate(teams)]
    battles, _ = play_hanabi(Roster(cfg, RunStore(tmp_path / "run")), specs, {p.id: p for p in decks}, "terse", 2)
    assert all(b.prompt == next(p.text for p in decks if p.id == b.prompt_id) for b in battles)  # one deal, both teams
    judged = [JudgedBattle(b, j) for b, j in zip(battles, GameJudge().judge(battles))]
    rows = {r.model: r for r in board(judged, cfg.rating, 0)}
    strong, weak = rows["cautious+cautious"], rows["random+random"]
    assert strong.rating > weak.rating and strong.lower > weak.upper
    means = {t: sum(s) / len(s) for t, s in team_scores(judged).items()}
    assert sorted(means, key=means.get) == sorted(rows, key=lambda t: rows[t].rating)


def _battle(deal: str, a: str, b: str, ra: str, rb: str, bid: str = "x") -> Battle:
    return Battle(bid, 1, "train", "p", deal, "hanabi", 0, None, a, b, ra, rb, None, "hanabi/L0")


def test_curation_learns_the_winning_teams_moves_and_corrects_misplays():
    from flywheel.config.tree import GamesConfig
    from flywheel.games.hanabi_knowledge import fault
    from flywheel.learning.hanabi_curation import better_move, curate_hanabi

    deal = new_deal(SMALL, random.Random(5))
    st, moves, views = parse_deal(deal), [], set()
    while not st.over():
        moves.append(cautious_move(parse_view(st.text())))
        if fault(st, moves[-1]) is None:  # a winner's wrong move is not learnt either
            views.add(st.text())
        st = st.play(moves[-1])
    blunders = parse_deal(deal)
    rec = []
    while not blunders.over():
        rec.append(next((m for m in blunders.legal_moves() if blunders.blunder(m) == "misplay"), "d1"))
        blunders = blunders.play(rec[-1])
    battle = _battle(deal, "student@1+cautious", "cautious", " ".join(rec), " ".join(moves))
    [verdict] = GameJudge().judge([battle])
    assert verdict.winner == "model_b"
    cur = curate_hanabi([battle], {"x": verdict}, ["student"], set(), GamesConfig(games=["hanabi"]))
    rules = [r for r in cur.sft if r.source_model == "rules"]
    won = [r for r in cur.sft if r.source_model == "cautious"]
    assert rules and won and all(r.target == "student" for r in cur.sft)
    # the winners' moves, one per view, but where the rules corrected the target (the same first view, on one deck)
    assert {r.prompt for r in won} == views - {r.prompt for r in rules} and len(won) < len(views)
    first = parse_deal(deal)  # student@1 sits in seat 0 and moved first
    assert rules[0].prompt == first.text() and rules[0].completion == better_move(first) != rec[0]
    assert fault(first, better_move(first)) is None and first.blunder(rec[0]) == "misplay"
    assert [(p.chosen, p.rejected, p.rejected_model) for p in cur.dpo][0] == (better_move(first), rec[0], "student@1")
    assert len(cur.dpo) == len(rules)
    cornered = replace(first, hints=0, hands=(("r3", "y3", "r2"),) + first.hands[1:], discards=("r2",),
                       knowledge=(("r3", "y3", "r2"),) + first.knowledge[1:], fireworks=(0, 0))
    # every card unplayable and the last of its kind, and the seat was told so; no hint token
    assert all(fault(cornered, m) for m in cornered.legal_moves()) and better_move(cornered) is None
    held = curate_hanabi([battle], {"x": verdict}, ["student"], {deal}, GamesConfig(games=["hanabi"]))
    assert not held.sft and not held.dpo and held.dropped["contaminated"] == 1  # held-out deals are never learnt


def test_a_lucky_gamble_is_corrected_not_learnt_as_it_was_made():
    """A target's play of a card nobody told it of that happened to be playable (a gamble) is a
    rules correction, even in the winning team; a play its hints prove playable is no gamble."""
    from flywheel.config.tree import GamesConfig
    from flywheel.learning.hanabi_curation import curate_hanabi

    st = small_deal("r1", "y2", "r3", "y1", "y1", "r2")  # seat 0 holds r1 in slot 1, untold
    assert st.gamble("p1") and st.blunder("p1") is None and not st.gamble("d1") and not st.gamble("hy")
    assert st.play("d3").play("hr").gamble("p1")  # told it holds a red there: not yet known to be a 1
    assert not st.play("d3").play("h1").gamble("p1")  # told it is a 1, every firework at 0: proven playable
    deal = new_deal(SMALL, random.Random(5))
    game, moves = parse_deal(deal), []
    while not game.over():  # seat 0 (the student) gambles on slot 1 whenever the card there is playable
        lucky = game.to_move == 0 and game.playable(game.hands[0][0]) and game.gamble("p1")
        moves.append("p1" if lucky else cautious_move(parse_view(game.text())))
        game = game.play(moves[-1])
    rand = parse_deal(deal)
    rec = []
    while not rand.over():
        rec.append(next(m for m in rand.legal_moves() if m[0] == "d"))
        rand = rand.play(rec[-1])
    battle = _battle(deal, "student@1+cautious", "random", " ".join(moves), " ".join(rec))
    [verdict] = GameJudge().judge([battle])
    assert verdict.winner == "model_a" and "p1" in moves[::2]
    cur = curate_hanabi([battle], {"x": verdict}, ["student"], set(), GamesConfig(games=["hanabi"]))
    rules = {r.prompt: r.completion for r in cur.sft if r.source_model == "rules"}
    learnt = {r.prompt: r.completion for r in cur.sft}
    replayed = parse_deal(deal)
    for move in moves:
        if replayed.to_move == 0 and move == "p1" and replayed.gamble("p1"):
            assert replayed.text() in rules and learnt[replayed.text()] != "p1"
        replayed = replayed.play(move)
    assert rules and len(cur.dpo) == len(rules) and all(p.rejected == "p1" for p in cur.dpo)


def test_an_empty_hint_is_a_fault_and_a_beaten_target_learns_the_winners_answer_in_its_own_views():
    """A hint that tells the next seat nothing new is a fault; where the target's team lost to a
    team with a rule-based partner (``references``), each view the target read gets that partner's
    move there (not only the views of the winner's own game)."""
    from flywheel.config.tree import GamesConfig
    from flywheel.learning.hanabi_curation import curate_hanabi

    st = small_deal("r1", "y2", "r3", "y1", "y1", "r2")
    again = st.play("hy").play("d3")  # seat 0 told seat 1 its yellows; seat 1 discards; seat 0 again
    assert again.fault("hy") == "empty hint" and again.fault("h1") is None and st.fault("hy") is None
    deal = new_deal(SMALL, random.Random(5))
    game, mine = parse_deal(deal), []
    while not game.over():  # the student (seat 0) always discards its oldest card: no fault, a poor score
        mine.append("d1" if game.to_move == 0 and game.fault("d1") is None else cautious_move(parse_view(game.text())))
        game = game.play(mine[-1])
    bot, theirs = parse_deal(deal), []
    while not bot.over():
        theirs.append(cautious_move(parse_view(bot.text())))
        bot = bot.play(theirs[-1])
    battle = _battle(deal, "student@1+cautious", "cautious", " ".join(mine), " ".join(theirs))
    [verdict] = GameJudge().judge([battle])
    assert verdict.winner == "model_b"
    plain = curate_hanabi([battle], {"x": verdict}, ["student"], set(), GamesConfig(games=["hanabi"]))
    taught = curate_hanabi([battle], {"x": verdict}, ["student"], set(), GamesConfig(games=["hanabi"]),
                           frozenset({"cautious"}))
    answers, views = {r.prompt: r.completion for r in taught.sft if r.source_model == "cautious"}, {}
    replayed = parse_deal(deal)
    for move in mine:
        if replayed.to_move == 0 and replayed.fault(move) is None:
            views[replayed.text()] = cautious_move(parse_view(replayed.text()))
        replayed = replayed.play(move)
    assert views and all(answers[v] == m for v, m in views.items())  # the winner's answer in the student's views
    assert len(taught.sft) > len(plain.sft) and len(taught.dpo) == len(plain.dpo)
    assert {r.prompt for r in plain.sft} <= {r.prompt for r in taught.sft}  # the winners' own moves stay


def test_the_partner_is_the_bandit_arm_of_a_team_battle():
    """A train battle's opponent arm is the target's partner: the target with the cautious bot
    against the bot's own team is the ``cautious`` arm, with an earlier version the ``self`` arm;
    the target's side is its team's."""
    from flywheel.arena.bandit_rewards import _opponent, _seat_a, plays
    from flywheel.arena.selection import SELF, partner_team

    team = partner_team("k", "student@2", "cautious", 3)
    assert sorted(team.split("+")) == ["cautious", "cautious", "student@2"]
    b = _battle("d", "cautious", "student@2+cautious", "", "")
    assert not _seat_a(b, "student@2") and not _seat_a(b, "student")
    assert _opponent(b, "student@2") == _opponent(b, "student") == "cautious"
    assert plays(b, "student") and not plays(b, "random")
    b = _battle("d", "student@2+student@1", "student@1", "", "")
    assert _seat_a(b, "student@2") and _seat_a(b, "student")
    assert _opponent(b, "student@2") == _opponent(b, "student") == SELF


def test_bad_hanabi_sizes_partners_and_labels_are_one_error_before_any_run_directory(tmp_path, cli_env):
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    root = tmp_path / "runs"
    base = ["--set", "world.kind=games", "--set", "judge.kind=game", "--set", "world.games.games=[hanabi]",
            "--set", "world.models=[{name: student, categories: [hanabi]}]",
            "--set", "opponents=[{name: cautious, kind: cautious}]", "--set", f"run.root={root}"]
    cases = [(["--set", "world.games.hanabi.colours=6"],
              "world.games.hanabi.colours: Input should be less than or equal to 5"),
             (["--set", "world.games.hanabi.hand=9", "--set", "world.games.hanabi.colours=2", "--set",
               "world.games.hanabi.ranks=2"],
              "hand 9 x players 2 = 18 cards, but a deck of 2 colours x ranks 1-2 holds 8"),
             (["--set", "opponents=[{name: deep, kind: minimax}]"],
              "player deep: kind minimax plays tic-tac-toe and Connect Four, not hanabi"),
             (["--set", "world.games.hanabi.players=4", "--set", "world.games.hanabi.hand=4"],
              "world.games.hanabi: a view of 4 seats with 5 colours and hands of 4 is up to 68 characters, 71 with "
              "a move, but the tiny models (world.models) read 64"),
             (["--set", "world.games.hanabi.labels=hidden"],
              "world.games.hanabi.labels: Input should be 'knowledge' or 'hidden_card'"),
             (["--set", "world.games.prompt=verbose"],
              "world.games.prompt: verbose describes positions in English for instruct LLMs, but the tiny models"),
             (["--set", "world.games.hanabi.teams=[[cautious, nobody]]"],
              "world.games.hanabi.teams: nobody in team ['cautious', 'nobody'] is not a player")]
    for extra, says in cases:
        got = CliRunner().invoke(app, ["check", *base, *extra])
        assert got.exit_code == 2 and got.stderr.startswith("error: ") and says in got.stderr, got.output
        assert "Traceback" not in got.output
    asked = CliRunner().invoke(app, ["check", *base, "--set", "world.games.hanabi.labels=hidden_card"])
    assert asked.exit_code == 0, asked.output  # the labels that read the seat's own cards, when asked for
    proc = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", *base, *cases[-1][0]], capture_output=True,
                          text=True, env=cli_env, timeout=120)
    assert proc.returncode == 2 and cases[-1][1] in proc.stderr and "Traceback" not in proc.stderr
    assert not root.exists()


def test_teams_of_three_see_both_other_hands_and_play_to_the_end():
    from flywheel.games.hanabi_referee import seats

    three = Setup(players=3, colours=3, ranks=4, hand=3)
    deal = new_deal(three, random.Random(1))
    st, moves = parse_deal(deal), []
    view = parse_view(st.text())
    assert view.others == (st.hands[1], st.hands[2]) and len(view.knowledge) == 3
    while not st.over():
        moves.append(cautious_move(parse_view(st.text())))
        st = st.play(moves[-1])
    assert replay_duplicate(deal, " ".join(moves), " ".join(moves)).a.score == st.score > 0
    assert seats("a+b+c", 3) == ["a", "b", "c"] and seats("a", 3) == ["a"] * 3
    with pytest.raises(ValueError, match="2 players for a 3-player game"):
        seats("a+b", 3)
