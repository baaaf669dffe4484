"""A rule-based Hanabi policy that reads only a seat's view: the cautious partner.

It plays a card only when what it was told proves it playable; else it hints the next seat's
playable card that seat does not yet know (its rank first, then its colour); else it discards its
oldest card it was told nothing of (its oldest card if told of all); with no card to discard it
gives any hint. Pure logic, so that the reference player (flywheel/players/reference.py) and the
curation of cooperative games (flywheel/learning/hanabi_curation.py) share it.
"""

from __future__ import annotations

from flywheel.games.hanabi import COLOURS, UNKNOWN, State, View


def cautious_move(view: View) -> str:
    """The cautious partner's move in ``view``."""
    for slot in range(1, len(view.knowledge) + 1):
        if view.known_playable(slot):
            return f"p{slot}"
    legal = view.legal_moves()
    if view.hints > 0 and view.others:
        held = view.others[0]
        knows = view.others_told[0]
        for card, k in zip(held, knows):
            if view.playable(card):
                if k[1] == UNKNOWN and f"h{card[1]}" in legal:
                    return f"h{card[1]}"
                if k[0] == UNKNOWN and f"h{card[0]}" in legal:
                    return f"h{card[0]}"
    if view.knowledge:
        untold = [i for i, k in enumerate(view.knowledge, 1) if k == UNKNOWN * 2]
        return f"d{untold[0] if untold else 1}"
    return next(m for m in legal if m[0] == "h")


def open_hand_move(state: State) -> str:
    """A greedy move of a seat that sees its own cards (perfect information): play its lowest
    playable card; else discard a card no firework needs any more, else one that is not the last
    of its kind (the highest rank first), else its highest card. What no team that must hint can
    beat by much: the score ceiling reported beside the teams."""
    hand = state.hands[state.to_move]
    slots = sorted(range(len(hand)), key=lambda i: int(hand[i][1]))
    for i in slots:
        if state.playable(hand[i]):
            return f"p{i + 1}"
    dead = [i for i in slots if state.fireworks[COLOURS.index(hand[i][0])] >= int(hand[i][1])]
    spare = [i for i in reversed(slots) if not state.critical(hand[i])]
    return f"d{(dead or spare or list(reversed(slots)))[0] + 1}"


def open_hand_score(state: State) -> int:
    """The score of every seat playing ``open_hand_move`` from ``state``."""
    while not state.over():
        state = state.play(open_hand_move(state))
    return state.score
