"""Hanabi's training labels read only what the seat knows: the faults a seat can tell from its
view (a gamble, the discard of a card it can tell is critical, an empty hint), labels that stay the
same when only the seat's own cards change, and the option that also reads them (``hidden_card``)."""

import random
from dataclasses import replace

from flywheel.config.tree import GamesConfig
from flywheel.games.hanabi import Setup, State
from flywheel.games.hanabi_knowledge import could_be, fault, known_fault, sight
from flywheel.games.hanabi_policy import cautious_move
from flywheel.games.hanabi_referee import deal_text, new_deal, parse_deal
from flywheel.ground.records import Battle
from flywheel.learning.hanabi_curation import better_move, curate_hanabi
from judges.game import GameJudge
from tests.test_hanabi import SMALL, small_deal

RECIPE = Setup(players=2, colours=3, ranks=4, hand=4, hints=8, lives=3)  # flows/recipes/hanabi.yaml's size


def twin(state: State, rng: random.Random) -> State | None:
    """``state`` with one of its mover's own cards swapped for a card of the deck that what the
    mover was told of it allows: the same game to every eye but the cards the mover cannot see."""
    s, hand = state.to_move, state.hands[state.to_move]
    swaps = [(i, j) for i, known in enumerate(state.knowledge[s]) for j, card in enumerate(state.deck)
             if card != hand[i] and all(k in ("-", c) for k, c in zip(known, card))]
    if not swaps:
        return None
    i, j = rng.choice(swaps)
    mine = hand[:i] + (state.deck[j],) + hand[i + 1:]
    deck = state.deck[:j] + (hand[i],) + state.deck[j + 1:]
    return replace(state, deck=deck, hands=state.hands[:s] + (mine,) + state.hands[s + 1:])


def test_what_a_seat_can_tell_from_its_view():
    """A play its hints do not prove is a gamble (the misplay too); a discard is a critical discard
    only where every card the seat's card may be is the last of its kind, counted from what it
    sees; the hidden-card labels read the card itself."""
    st = small_deal("r3", "y2", "r2", "y1", "y1", "r1")  # seat 0 holds r3 (the last red 3), untold
    assert known_fault(sight(st), "p1") == "gamble" and st.fault("p1") == "misplay"
    assert fault(st, "d1") is None and fault(st, "d1", "hidden_card") == "critical discard"
    assert could_be(sight(st), 1) == ["r1", "r2", "r3", "y1", "y2", "y3"]  # any card it does not see
    told = st.play("h1").play("h3")  # seat 1 tells seat 0 its 3: a 3 is always the last of its kind
    assert told.knowledge[0] == ("-3", "--", "--") and could_be(sight(told), 1) == ["r3", "y3"]
    assert fault(told, "d1") == "critical discard" and fault(told, "d2") is None
    red = State(SMALL, ("r1", "r2", "y1", "y2", "y3"), (("r3", "y2", "y1"), ("r1", "r2", "y1")),
                (("r-", "--", "--"), ("--",) * 3), (1, 0), (), 2, 2)  # seat 0 was told its first card is red
    assert could_be(sight(red), 1) == ["r1", "r2", "r3"] and fault(red, "d1") is None
    assert red.fault("d1") == "critical discard"  # it is the r3, which the seat cannot know yet
    red = replace(red, deck=("y1", "y2", "y3"), fireworks=(2, 0), discards=("r1",))  # r2 played, r1 discarded
    assert could_be(sight(red), 1) == ["r3"] and fault(red, "d1") == "critical discard"  # every other red seen


def test_a_label_never_changes_when_only_the_seats_own_cards_change():
    """At every move of games of two sizes (a bot, a gambler and a discarder at the table), the
    same position with one of the mover's unseen cards swapped for another that what it was told
    allows reads the same in either style, and every legal move gets the same fault and the same
    better move; the hidden-card labels change there (so the test can tell a label that reads the
    card)."""
    rng = random.Random(0)
    compared = changed = 0
    for setup in (SMALL, RECIPE):
        for seed in range(16):
            st = parse_deal(new_deal(setup, random.Random(seed)))
            while not st.over():
                other = twin(st, rng)
                if other is not None:
                    assert other.text() == st.text() and other.text("verbose") == st.text("verbose")
                    assert other.hands[st.to_move] != st.hands[st.to_move]
                    for m in st.legal_moves():
                        assert fault(other, m) == fault(st, m), (st, m)
                        changed += (fault(other, m, "hidden_card") is None) != (fault(st, m, "hidden_card") is None)
                    assert better_move(other) == better_move(st)
                    changed += better_move(other, "hidden_card") != better_move(st, "hidden_card")
                    compared += 1
                view = sight(st).view
                st = st.play(rng.choice([cautious_move(view), rng.choice(st.legal_moves()), "p1", "d1"]))
    assert compared > 300 and changed > 100


def _battle(deal: str, ra: str, rb: str) -> Battle:
    return Battle("x", 1, "train", "p", deal, "hanabi", 0, None, "student@1+cautious", "discarder", ra, rb, None,
                  "hanabi/L0")


def _team_game(deal: str, student) -> str:
    """The record of the student (seat 0, moving by ``student(view)``) beside the cautious bot."""
    st, moves = parse_deal(deal), []
    while not st.over():
        view = sight(st).view
        moves.append(student(view) if st.to_move == 0 else cautious_move(view))
        st = st.play(moves[-1])
    return " ".join(moves)


def _discards(deal: str) -> str:
    st, moves = parse_deal(deal), []
    while not st.over():
        moves.append("d1")
        st = st.play("d1")
    return " ".join(moves)


def test_the_curation_labels_a_view_alike_whatever_the_seats_own_cards():
    """Pairs of deals that differ only where the student's oldest card is a 3 (the last of its kind)
    in one and another card in the other, swapped with the deck: the student discards it first, then
    gambles or discards, the bot beside it, against a team that only discards. Every view the two
    games share (the verbose style shows all a seat sees) gets the same rule correction, the same
    DPO pair and the same winner's move with labels from knowledge; with ``labels: hidden_card`` the
    first view does not (a critical discard in one game only)."""
    first_deck = len(parse_deal(new_deal(SMALL, random.Random(0))).deck)

    def student(view):
        return "d1" if view.deck == first_deck or view.deck % 3 else "p1"

    shared = {"knowledge": 0, "hidden_card": 0}
    differ = {"knowledge": 0, "hidden_card": 0}
    for seed in range(40):
        deal = new_deal(SMALL, random.Random(seed))
        head, cards = deal.rsplit(" ", 1)
        cards = [cards[i:i + 2] for i in range(0, len(cards), 2)]
        top = next((i for i in range(2 * SMALL.hand, len(cards)) if cards[i][1] == "3"), None)
        if cards[0][1] == "3" or top is None:
            continue
        cards[0], cards[top] = cards[top], cards[0]
        battles = [_battle(d, _team_game(d, student), _discards(d)) for d in (deal, f"{head} {''.join(cards)}")]
        verdicts = GameJudge().judge(battles)
        if verdicts[0].winner != verdicts[1].winner:
            continue
        for labels in shared:
            cfg = GamesConfig(games=["hanabi"], prompt="verbose", hanabi={"labels": labels})
            rows = [curate_hanabi([b], {"x": v}, ["student"], set(), cfg) for b, v in zip(battles, verdicts)]
            sft = [{r.prompt: (r.completion, r.source_model) for r in c.sft} for c in rows]
            dpo = [{p.prompt: (p.chosen, p.rejected) for p in c.dpo} for c in rows]
            for view in (sft[0].keys() | dpo[0].keys()) & (sft[1].keys() | dpo[1].keys()):
                shared[labels] += 1
                differ[labels] += sft[0].get(view) != sft[1].get(view) or dpo[0].get(view) != dpo[1].get(view)
    assert shared["knowledge"] >= 15 and differ["knowledge"] == 0
    assert differ["hidden_card"] == shared["hidden_card"] == shared["knowledge"]  # each pair's first view


def test_the_hidden_card_labels_are_an_option_that_still_works():
    """``labels: hidden_card`` corrects a discard of the last red 3 the seat was told nothing of and
    drops it from the winners' moves; from knowledge the discard stands as the winner's move."""
    deal = deal_text(SMALL, ("r3", "y2", "r2", "y1", "y1", "r1", "r1", "r1", "r2", "y1", "y2", "y3"))
    first = parse_deal(deal)
    record = _team_game(deal, lambda view: "d1" if view.deck == len(first.deck) else cautious_move(view))
    battle = _battle(deal, record, _discards(deal))
    [verdict] = GameJudge().judge([battle])
    assert verdict.winner == "model_a" and record.startswith("d1 ")
    hidden = curate_hanabi([battle], {"x": verdict}, ["student"], set(),
                           GamesConfig(games=["hanabi"], hanabi={"labels": "hidden_card"}))
    known = curate_hanabi([battle], {"x": verdict}, ["student"], set(), GamesConfig(games=["hanabi"]))
    view = first.text()
    assert [(p.prompt, p.rejected) for p in hidden.dpo if p.prompt == view] == [(view, "d1")]
    assert {r.prompt: r.completion for r in hidden.sft}[view] == better_move(first, "hidden_card") != "d1"
    assert {r.prompt: (r.completion, r.source_model) for r in known.sft}[view] == ("d1", "student@1")
    assert not [p for p in known.dpo if p.prompt == view]
