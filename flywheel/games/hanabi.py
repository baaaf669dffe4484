"""Hanabi, a cooperative game of hidden information: the rules, a seeded deck, and what a seat sees.

A card is a colour letter and a rank (``r1``: a red 1); colours are ``rygbw`` (the first
``colours`` of them), ranks 1 to ``ranks``; each colour has three 1s, one card of the top rank and
two of every rank between. A team of ``players`` seats takes turns from seat 0; a seat holds
``hand`` cards it cannot see, newest last. A move (``move_code``) is one of:

- ``p<slot>``: play the card in that slot (1 = oldest). It goes on its colour's firework if it is
  the next rank there (a completed firework of the top rank also earns back a hint token), else
  it is discarded and costs a life;
- ``d<slot>``: discard it and earn back a hint token (never above the maximum);
- ``h<colour>`` / ``h<rank>``: spend a hint token to tell the next seat which of its cards have
  that colour or rank (legal only where it holds at least one). A seat remembers what it was told
  of each card (``knowledge``: ``r3``, ``r-``, ``-3`` or ``--``); what it was told a card is not is
  forgotten (a simplification).

Every play or discard draws a card while the deck lasts. The game ends when the last life is lost,
when every firework is complete, or once every seat has moved once after the deck ran out. The
score is the fireworks total (cards played), kept when the lives run out.

What a seat reads (``State.text``) holds the other seats' hands, what it was told about its own
cards, the fireworks, the tokens, the deck size and (verbose style) the discards, but never its own
cards. The terse style fits the project's character-level models (a 64-character context):
``hb r1y1g1b1 g1ur2-y1+b3- r-++---- 83 12=`` reads "the fireworks need r1 y1 g1 b1 next (none
started); the next seat holds g1 r2 y1 b3, was told the rank of its first card, and its first and
third cards are playable now (each card is followed by what its seat was told of it: ``-``,
``c``olour, ra``n``k or ``k`` both; ``+``, ``o``, ``u`` or ``k`` where the card is playable); of
my four cards I know the first is red, and what I was told of the second (a 1) proves it playable
(``++``); 8 hint tokens, 3 lives; 12 cards in the deck". The marks spare a reader matching each
card against the fireworks, which a 2-layer character model learns late or never: with them the
Hanabi recipe's tiny model names more of the cautious bot's moves, and partners it on runs where it
did not without them (docs/benchmarks/hanabi.md). The fireworks come
first, written as the card each needs next (``r5`` once a 4-rank red is complete), so that a model
reading left to right can tell whether a card is playable as it reads the card: with this order
the Hanabi recipe's tiny model learns to partner the cautious bot, with the fireworks last it did
not (docs/benchmarks/hanabi.md). The verbose style describes it in English
for instruct LLMs and ends with the terse key, which every player parses (``parse_view``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace

COLOURS = "rygbw"
COLOUR_NAMES = {"r": "red", "y": "yellow", "g": "green", "b": "blue", "w": "white"}
UNKNOWN = "-"


@dataclass(frozen=True)
class Setup:
    """The size of a game: seats, colours, ranks, hand size, hint tokens and lives."""

    players: int = 2
    colours: int = 5
    ranks: int = 5
    hand: int = 5
    hints: int = 8
    lives: int = 3

    def copies(self, rank: int) -> int:
        """Cards of one colour and ``rank`` in the deck: three 1s, one top card, two of the rest."""
        if rank == 1:
            return 3
        return 1 if rank == self.ranks else 2

    @property
    def deck_size(self) -> int:
        return self.colours * sum(self.copies(r) for r in range(1, self.ranks + 1))

    @property
    def max_score(self) -> int:
        return self.colours * self.ranks

    @property
    def longest_view(self) -> int:
        """Characters in the longest terse view (``State.text``), ``=`` included: the deal's first,
        with the deck at its fullest and every card's knowledge written out."""
        others = (self.players - 1) * 3 * self.hand + self.players - 2  # card + mark per card, spaces between
        tokens = len(str(self.hints)) + len(str(self.lives))
        deck = len(str(self.deck_size - self.hand * self.players))
        return len("hb ") + 2 * self.colours + 1 + others + 1 + 2 * self.hand + 1 + tokens + 1 + deck + len("=")

    def problem(self) -> str | None:
        """Why this size cannot be played (None: it can)."""
        if not 2 <= self.players <= 5:
            return f"players {self.players}: between 2 and 5"
        if not 1 <= self.colours <= len(COLOURS):
            return f"colours {self.colours}: between 1 and {len(COLOURS)}"
        if not 1 <= self.ranks <= 5:
            return f"ranks {self.ranks}: between 1 and 5"
        if self.hand < 1 or self.hand * self.players > self.deck_size:
            return (f"hand {self.hand} x players {self.players} = {self.hand * self.players} cards, but the deck "
                    f"of {self.colours} colours x ranks 1-{self.ranks} holds {self.deck_size}")
        if not 1 <= self.hints <= 9 or not 1 <= self.lives <= 9:
            return f"hints {self.hints} and lives {self.lives}: each between 1 and 9"
        return None

    @property
    def code(self) -> str:
        """The size as text: ``2p5c5r5h8i3l`` (players, colours, ranks, hand, hints, lives)."""
        return (f"{self.players}p{self.colours}c{self.ranks}r{self.hand}h{self.hints}i{self.lives}l")

    @classmethod
    def from_code(cls, code: str) -> Setup:
        m = re.fullmatch(r"(\d)p(\d)c(\d)r(\d+)h(\d)i(\d)l", code)
        if m is None:
            raise ValueError(f"not a hanabi size: {code!r}")
        return cls(*map(int, m.groups()))


def full_deck(setup: Setup) -> list[str]:
    return [f"{c}{r}" for c in COLOURS[:setup.colours] for r in range(1, setup.ranks + 1)
            for _ in range(setup.copies(r))]


def shuffled_deck(setup: Setup, rng: random.Random) -> tuple[str, ...]:
    deck = full_deck(setup)
    rng.shuffle(deck)
    return tuple(deck)


@dataclass(frozen=True)
class State:
    """A game in progress. ``deck``: the cards still to draw, next first; ``hands`` and
    ``knowledge``: per seat, its cards and what it was told of each (oldest first)."""

    setup: Setup
    deck: tuple[str, ...]
    hands: tuple[tuple[str, ...], ...]
    knowledge: tuple[tuple[str, ...], ...]
    fireworks: tuple[int, ...]
    discards: tuple[str, ...]
    hints: int
    lives: int
    to_move: int = 0
    final_turns: int | None = None  # moves left once the deck ran out

    @classmethod
    def deal(cls, setup: Setup, deck: tuple[str, ...]) -> State:
        """The start of a game from a shuffled ``deck`` (seat 0 is dealt first)."""
        n, h = setup.players, setup.hand
        return cls(setup=setup, deck=tuple(deck[n * h:]), hands=tuple(tuple(deck[s * h:(s + 1) * h]) for s in range(n)),
                   knowledge=tuple((UNKNOWN * 2,) * h for _ in range(n)), fireworks=(0,) * setup.colours, discards=(),
                   hints=setup.hints, lives=setup.lives)

    # -- rules -----------------------------------------------------------------------------
    @property
    def score(self) -> int:
        return sum(self.fireworks)

    def over(self) -> bool:
        return self.lives <= 0 or self.score == self.setup.max_score or self.final_turns == 0

    @property
    def receiver(self) -> int:
        """The seat a hint goes to: the next one."""
        return (self.to_move + 1) % self.setup.players

    def legal_moves(self) -> list[str]:
        """Move codes the seat to move may make; none once the game is over."""
        if self.over():
            return []
        slots = range(1, len(self.hands[self.to_move]) + 1)
        moves = [f"p{i}" for i in slots] + [f"d{i}" for i in slots]
        if self.hints > 0:
            held = self.hands[self.receiver]
            moves += [f"h{c}" for c in COLOURS[:self.setup.colours] if any(card[0] == c for card in held)]
            moves += [f"h{r}" for r in range(1, self.setup.ranks + 1) if any(card[1] == str(r) for card in held)]
        return moves

    def playable(self, card: str) -> bool:
        return self.fireworks[COLOURS.index(card[0])] == int(card[1]) - 1

    def remaining(self, card: str) -> int:
        """Copies of ``card`` not yet discarded (in hands, the deck, or played)."""
        return self.setup.copies(int(card[1])) - self.discards.count(card)

    def critical(self, card: str) -> bool:
        """Whether ``card`` is the last copy of a card its firework still needs."""
        return self.fireworks[COLOURS.index(card[0])] < int(card[1]) and self.remaining(card) == 1

    def play(self, move: str) -> State:
        """The state after the seat to move makes ``move`` (ValueError if it is illegal)."""
        if move not in self.legal_moves():
            raise ValueError(f"illegal move {move!r} for seat {self.to_move}")
        s, kind, arg = self.to_move, move[0], move[1:]
        st = self
        if kind == "h":
            r = self.receiver
            told = tuple(learns(k, card, arg) for k, card in zip(self.knowledge[r], self.hands[r]))
            st = replace(self, hints=self.hints - 1, knowledge=_put(self.knowledge, r, told))
        else:
            i = int(arg) - 1
            card = self.hands[s][i]
            hand = self.hands[s][:i] + self.hands[s][i + 1:]
            know = self.knowledge[s][:i] + self.knowledge[s][i + 1:]
            deck = self.deck
            if deck:
                hand, know, deck = hand + (deck[0],), know + (UNKNOWN * 2,), deck[1:]
            fireworks, discards, hints, lives = self.fireworks, self.discards, self.hints, self.lives
            if kind == "d":
                discards, hints = discards + (card,), min(self.setup.hints, hints + 1)
            elif self.playable(card):
                c = COLOURS.index(card[0])
                fireworks = fireworks[:c] + (fireworks[c] + 1,) + fireworks[c + 1:]
                if int(card[1]) == self.setup.ranks:
                    hints = min(self.setup.hints, hints + 1)
            else:
                discards, lives = discards + (card,), lives - 1
            st = replace(self, deck=deck, hands=_put(self.hands, s, hand), knowledge=_put(self.knowledge, s, know),
                         fireworks=fireworks, discards=discards, hints=hints, lives=lives)
        final = st.final_turns
        if final is not None:
            final -= 1
        elif not st.deck and self.deck:  # this move drew the last card: every seat moves once more
            final = self.setup.players
        return replace(st, to_move=(s + 1) % self.setup.players, final_turns=final)

    def blunder(self, move: str) -> str | None:
        """What the seat's own card, which it cannot see, makes of ``move``: ``misplay`` (a play that
        costs a life), ``critical discard`` (the last copy of a card a firework still needs), else None."""
        if move[0] == "h":
            return None
        card = self.hands[self.to_move][int(move[1:]) - 1]
        if move[0] == "p" and not self.playable(card):
            return "misplay"
        if move[0] == "d" and self.critical(card):
            return "critical discard"
        return None

    def gamble(self, move: str) -> bool:
        """Whether ``move`` plays a card that what its seat was told does not prove playable (a
        play that may succeed by luck, and costs a life where it does not)."""
        return move[0] == "p" and not parse_view(self.key()).known_playable(int(move[1:]))

    def fault(self, move: str) -> str | None:
        """What the rules hold against ``move``, its seat's own card read: a ``blunder``, ``gamble`` (a lucky
        play), ``empty hint`` (nothing new told). What the seat can tell alone: hanabi_knowledge.py."""
        if (wrong := self.blunder(move)) is not None:
            return wrong
        if self.gamble(move):
            return "gamble"
        if move[0] == "h":
            told = self.receiver
            if self.play(move).knowledge[told] == self.knowledge[told]:
                return "empty hint"
        return None

    # -- text ------------------------------------------------------------------------------
    def key(self, seat: int | None = None) -> str:
        """What ``seat`` (default: the one to move) sees, in the terse style, without ``=``."""
        s = self.to_move if seat is None else seat
        n = self.setup.players
        need = "".join(f"{c}{h + 1}" for c, h in zip(COLOURS, self.fireworks))
        others = ["".join(card + mark(k, self.playable(card)) for card, k in zip(self.hands[o], self.knowledge[o]))
                  or "." for o in ((s + i) % n for i in range(1, n))]
        mine = "".join(PROVEN if proves_playable(k, self.fireworks) else k for k in self.knowledge[s]) or "."
        return f"hb {need} {' '.join(others)} {mine} {self.hints}{self.lives} {len(self.deck)}"

    def text(self, style: str = "terse") -> str:
        """What the seat to move reads: the terse key with ``=`` or a verbose description (ending
        with the key). Its own cards are never in it, only what it was told of them."""
        key = self.key()
        if style == "terse":
            return key + "="
        n, s, su = self.setup.players, self.to_move, self.setup
        colours = ", ".join(f"{COLOUR_NAMES[c]} ({c})" for c in COLOURS[:su.colours])
        hands = "\n".join(f"Player +{i} holds: {' '.join(self.hands[(s + i) % n]) or 'nothing'} (it was told: "
                          f"{' '.join(self.knowledge[(s + i) % n]) or 'nothing'})" for i in range(1, n))
        mine = " ".join(self.knowledge[s]) or "nothing"
        fw = " ".join(f"{c}{h}" for c, h in zip(COLOURS, self.fireworks))
        return (f"We are playing Hanabi, cooperatively, with {n} players. Colours: {colours}; ranks 1-{su.ranks}. "
                f"Cards are written colour then rank (r3 is a red 3). You cannot see your own cards.\n{hands}\n"
                f"What you were told of your cards, oldest first (- is unknown): {mine}\n"
                f"Fireworks (highest card played per colour): {fw}\n"
                f"Discarded: {' '.join(self.discards) or 'nothing'}\n"
                f"Hint tokens: {self.hints}, lives: {self.lives}, cards left in the deck: {len(self.deck)}\n"
                f"Answer with one move and nothing else: 'play N' or 'discard N' (N counts your cards from 1, "
                f"oldest first), or 'hint C' / 'hint R' to tell player +1 which of its cards have colour C or "
                f"rank R.\nPosition: {key}")


MARKS = {"--": "-", "c-": "c", "-n": "n", "cn": "k"}
PLAYABLE_MARKS = {"-": "+", "c": "o", "n": "u", "k": "k"}
PROVEN = "++"  # an own card what the seat was told proves playable, in the terse style


def mark(known: str, playable: bool = False) -> str:
    """What a seat was told of one card, as its partners see it in the terse style: ``-`` nothing,
    ``c`` its colour, ``n`` its rank, ``k`` both; a card playable now is marked ``+``, ``o``,
    ``u`` (and ``k``) instead, so that a partner reads at a glance which cards are worth a hint."""
    told = MARKS[("c" if known[0] != UNKNOWN else "-") + ("n" if known[1] != UNKNOWN else "-")]
    return PLAYABLE_MARKS[told] if playable else told


def unmark(card: str, m: str) -> str:
    """The knowledge a mark stands for, given the card."""
    return (card[0] if m in "cok" else UNKNOWN) + (card[1] if m in "nuk" else UNKNOWN)


def proves_playable(known: str, fireworks: tuple[int, ...]) -> bool:
    """Whether ``known`` (what a seat was told of a card, or ``PROVEN``) proves the card playable on
    ``fireworks``: its colour and rank, the next there, or a rank every firework needs next."""
    c, r = known
    if known == PROVEN:
        return True
    if r == UNKNOWN:
        return False
    if c != UNKNOWN:
        return fireworks[COLOURS.index(c)] == int(r) - 1
    return all(h == int(r) - 1 for h in fireworks)


def learns(known: str, card: str, hint: str) -> str:
    """What a seat knows of ``card`` after ``hint``, having known ``known``."""
    if hint.isdigit():
        return known[0] + hint if card[1] == hint else known
    return hint + known[1] if card[0] == hint else known


def _put(rows: tuple[tuple[str, ...], ...], i: int, row: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    return rows[:i] + (row,) + rows[i + 1:]


# -- a seat's view, as any player reads it back ----------------------------------------------
@dataclass(frozen=True)
class View:
    """What a seat knows, parsed from its prompt: the other seats' hands (the next seat first) and
    what each was told of them, its own cards' knowledge, fireworks, tokens and deck size."""

    others: tuple[tuple[str, ...], ...]
    others_told: tuple[tuple[str, ...], ...]
    knowledge: tuple[str, ...]
    fireworks: tuple[int, ...]
    hints: int
    lives: int
    deck: int

    def legal_moves(self) -> list[str]:
        slots = range(1, len(self.knowledge) + 1)
        moves = [f"p{i}" for i in slots] + [f"d{i}" for i in slots]
        if self.hints > 0 and self.others:
            held = self.others[0]
            moves += [f"h{c}" for c in COLOURS if any(card[0] == c for card in held)]
            moves += [f"h{r}" for r in "12345" if any(card[1] == r for card in held)]
        return moves

    def playable(self, card: str) -> bool:
        return self.fireworks[COLOURS.index(card[0])] == int(card[1]) - 1

    def known_playable(self, slot: int) -> bool:
        """Whether what the seat was told of card ``slot`` (1-based) proves it playable now."""
        return proves_playable(self.knowledge[slot - 1], self.fireworks)


_VIEW = re.compile(r"\bhb (?:[rygbw]\d)+ (?:(?:(?:[rygbw]\d[-cnk+ou])+|\.) )+(?:(?:[rygbw-][\d-]|\+\+)+|\.) \d\d \d+\b")


def parse_view(text: str) -> View:
    """The view a seat's prompt describes (its terse key, in either style)."""
    m = _VIEW.search(text)
    if m is None:
        raise ValueError(f"no hanabi position in {text[:60]!r}")
    parts = m.group(0).split()
    others = [() if h == "." else tuple(h[i:i + 3] for i in range(0, len(h), 3)) for h in parts[2:-3]]
    return View(others=tuple(tuple(c[:2] for c in h) for h in others),
                others_told=tuple(tuple(unmark(c[:2], c[2]) for c in h) for h in others), knowledge=_pairs(parts[-3]),
                fireworks=tuple(int(parts[1][i + 1]) - 1 for i in range(0, len(parts[1]), 2)),
                hints=int(parts[-2][0]), lives=int(parts[-2][1]), deck=int(parts[-1]))


def is_view(text: str) -> bool:
    return _VIEW.search(text) is not None


def _pairs(s: str) -> tuple[str, ...]:
    return () if s == "." else tuple(s[i:i + 2] for i in range(0, len(s), 2))


_MOVE = re.compile(r"\b(play|p|discard|d|hint|h) ?([1-9]|red|yellow|green|blue|white|[rygbw])\b")


def parse_move(answer: str) -> str | None:
    """The move code an answer names (``play 2`` or ``p2`` -> ``p2``, ``hint red`` -> ``hr``); None
    if it names none."""
    m = _MOVE.search(answer.lower())
    if m is None:
        return None
    arg = m.group(2)
    return m.group(1)[0] + (arg if len(arg) == 1 else arg[0])


def move_words(code: str) -> str:
    """A move code as words: ``p2`` -> ``play 2``, ``hr`` -> ``hint red``."""
    arg = code[1:]
    if code[0] == "h":
        return "hint " + COLOUR_NAMES.get(arg, arg)
    return ("play " if code[0] == "p" else "discard ") + arg
