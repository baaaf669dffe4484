"""What a seat knows in Hanabi, and the faults a move has by that knowledge alone.

A seat knows what it was told of its own cards, the other seats' hands and what each was told of
them, the fireworks, the discards and the tokens: everything but its own cards (``Sight``).
``known_fault`` judges a move from that alone, so a label drawn from it is one the seat could have
drawn from its own view:

- ``gamble``: a play of a card that what the seat was told does not prove playable (every play
  that would cost a life is one, and so is a play that succeeds by luck);
- ``critical discard``: a discard of a card the seat can tell is critical, that is, every card it
  could be is the last copy of a card its firework still needs (the cards it could be: those its
  hints allow, less the copies it sees played, discarded or in the other hands, and its own cards
  it was told outright);
- ``empty hint``: a hint that tells the next seat nothing it was not told already.

``fault`` draws labels either way (``world.games.hanabi.labels``): ``knowledge`` as above, or
``hidden_card`` (``State.fault``), which also reads the seat's own card: a play that in fact
misplays, the discard of a card that is in fact critical, whether or not the seat could tell.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from flywheel.games.hanabi import COLOURS, UNKNOWN, Setup, State, View, full_deck, learns

LABELS = ("knowledge", "hidden_card")


@dataclass(frozen=True)
class Sight:
    """Everything the seat to move knows: its view (what it was told of its own cards, never the
    cards) and the public discards, with the size of the game."""

    setup: Setup
    view: View
    discards: tuple[str, ...]


def sight(state: State) -> Sight:
    """What the seat to move in ``state`` knows (its own cards left out)."""
    s, n = state.to_move, state.setup.players
    others = [(s + i) % n for i in range(1, n)]
    view = View(others=tuple(state.hands[o] for o in others), others_told=tuple(state.knowledge[o] for o in others),
                knowledge=state.knowledge[s], fireworks=state.fireworks, hints=state.hints, lives=state.lives,
                deck=len(state.deck))
    return Sight(state.setup, view, state.discards)


def unseen(seen: Sight) -> Counter[str]:
    """Copies of each card the seat cannot see: the deck's, less those played, discarded or in the
    other hands, and its own cards it was told outright."""
    left = Counter(full_deck(seen.setup))
    left.subtract(f"{c}{r}" for c, h in zip(COLOURS, seen.view.fireworks) for r in range(1, h + 1))
    left.subtract(seen.discards)
    left.subtract(card for hand in seen.view.others for card in hand)
    left.subtract(k for k in seen.view.knowledge if UNKNOWN not in k)
    return left


def could_be(seen: Sight, slot: int) -> list[str]:
    """The cards the seat's card in ``slot`` (1-based) may be, by what it knows."""
    known = seen.view.knowledge[slot - 1]
    if UNKNOWN not in known:
        return [known]
    return sorted(card for card, n in unseen(seen).items()
                  if n > 0 and known[0] in (UNKNOWN, card[0]) and known[1] in (UNKNOWN, card[1]))


def is_critical(seen: Sight, card: str) -> bool:
    """Whether ``card`` is the last copy of a card its firework still needs."""
    needed = seen.view.fireworks[COLOURS.index(card[0])] < int(card[1])
    return needed and seen.setup.copies(int(card[1])) - seen.discards.count(card) == 1


def known_critical(seen: Sight, slot: int) -> bool:
    """Whether the seat can tell its card in ``slot`` is critical: every card it may be is."""
    cards = could_be(seen, slot)
    return bool(cards) and all(is_critical(seen, c) for c in cards)


def known_fault(seen: Sight, move: str) -> str | None:
    """What the seat can tell is wrong with its legal ``move`` (module docstring), else None."""
    kind, arg = move[0], move[1:]
    if kind == "p":
        return None if seen.view.known_playable(int(arg)) else "gamble"
    if kind == "d":
        return "critical discard" if known_critical(seen, int(arg)) else None
    held, told = seen.view.others[0], seen.view.others_told[0]
    after = tuple(learns(k, card, arg) for k, card in zip(told, held))
    return "empty hint" if after == told else None


def fault(state: State, move: str, labels: str = "knowledge") -> str | None:
    """What the rules hold against ``move`` in ``state``, as ``labels`` draws them: ``knowledge``
    (what its seat knows, ``known_fault``) or ``hidden_card`` (its own card read, ``State.fault``)."""
    if labels == "hidden_card":
        return state.fault(move)
    if labels != "knowledge":
        raise ValueError(f"labels {labels!r}: one of {', '.join(LABELS)}")
    return known_fault(sight(state), move)
