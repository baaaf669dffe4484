"""Multi-turn battles: each side answers every user turn in turn, with its own earlier answers.

A conversation's user turns are its prompt's (the first, then those it gives up front:
``Prompt.turns``), then the asker's (``world.conversation.asker``) until ``world.conversation.turns``.
The asker reads the conversation of the battle's seat A (seats are drawn at random, so neither
player is favoured) and its turn goes to both sides: a battle stays one question asked of two
players. Each side's user turns carry the checkable reference of that side (the asker's, computed
from the side's own answer, or the prompt's for turn 1). A failed answer ends the conversation and
fails the battle, which is then never judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from flywheel.arena.generation import generate_cached
from flywheel.ground.conversation import Message, encode, plain, user_turns
from flywheel.ground.records import Battle, BattleSpec, Prompt, stable_id
from flywheel.ground.store import RunStore
from flywheel.players.asker import Asker
from flywheel.worlds.world import Roster


@dataclass
class Talk:
    """One player's side of a conversation as it is played."""

    player: str
    messages: list[Message] = field(default_factory=list)
    error: str | None = None

    def answers(self) -> list[str]:
        return [m["content"] for m in self.messages if m["role"] == "assistant"]


def turn_prompt(p: Prompt, turn: int, text: str, reference: str | None, history: list[Message]) -> Prompt:
    """The prompt a player is asked as user turn ``turn`` (0-based) after ``history``: turn 0 is the
    prompt itself (single-turn answers and their cache are shared)."""
    if turn == 0:
        return p
    hist = encode(plain(history))
    return Prompt(id=stable_id(p.id, turn, hist, text), text=text, category=p.category, level=p.level,
                  reference=reference, split=p.split, turns="", history=hist)


def converse(roster: Roster, store: RunStore, groups: list[tuple[Prompt, list[str]]], iteration: int,
             phase: str, asker_name: str = "") -> list[list[Talk]]:
    """Play every group's conversation: (prompt, players that answer it alike, seat A first), its
    follow-ups written by the asker named ``asker_name`` (by default the first configured).
    Returns each group's talks, in order."""
    asker, turns = roster.asker(asker_name), roster.cfg.world.conversation.turns
    talks = [[Talk(m) for m in members] for _, members in groups]
    given = [user_turns(p.text, p.turns) for p, _ in groups]
    last = max((max(len(g), turns if asker is not None else 1) for g in given), default=0)
    for t in range(last):
        live = [i for i, ts in enumerate(talks) if not any(x.error for x in ts)
                and (t < len(given[i]) or (asker is not None and t < turns))]
        if not live:
            break
        texts, by_asker = _user_turns(asker, t, live, given, talks)
        need: dict[str, list[Prompt]] = {}
        asked: dict[tuple[int, int], Prompt] = {}
        for i in live:
            p = groups[i][0]
            text = texts.get(i)
            if text is None:  # the asker failed to write this turn
                for x in talks[i]:
                    x.error = f"asker: {by_asker.get(i) or 'no turn'}"
                continue
            for j, talk in enumerate(talks[i]):
                ref = p.reference if t == 0 else (asker.reference(talk.messages, text) if i in by_asker and asker
                                                  else None)
                q = turn_prompt(p, t, text, ref, talk.messages)
                talk.messages.append({"role": "user", "content": text, **({"reference": ref} if ref is not None else {})})
                asked[i, j] = q
                need.setdefault(talk.player, []).append(q)
        got = {m: generate_cached(roster, store, m, ps, iteration, phase) for m, ps in need.items()}
        for (i, j), q in asked.items():
            talk = talks[i][j]
            g = got[talk.player][q.id]
            if g.ok:
                talk.messages.append({"role": "assistant", "content": g.text})
            else:
                talk.error = f"{talk.player}: {g.error}"
    return talks


def _user_turns(asker: Asker | None, t: int, live: list[int], given: list[list[str]], talks: list[list[Talk]]
                ) -> tuple[dict[int, str], dict[int, str | None]]:
    """User turn ``t`` of each live group: the prompt's own, else the asker's (written once, from
    seat A's conversation). Returns (group -> text, group -> asker error or None for asker turns)."""
    texts = {i: given[i][t] for i in live if t < len(given[i])}
    todo = [i for i in live if i not in texts]
    by_asker: dict[int, str | None] = {}
    if todo and asker is not None:
        for i, turn in zip(todo, asker.ask([talks[i][0].messages for i in todo])):
            by_asker[i] = turn.error
            if turn.ok:
                texts[i] = turn.text.strip()
                by_asker[i] = None
    return texts, by_asker


def play_conversations(roster: Roster, store: RunStore, todo: list[BattleSpec], prompts: dict[str, Prompt]
                       ) -> list[Battle]:
    """The battles of ``todo`` played as conversations, each with its spec's asker (the selector's
    choice among several; empty: the first configured). A conversation that stays at one turn is
    stored as a single-turn battle (empty conversation columns)."""
    by_asker: dict[str, list[int]] = {}
    for i, s in enumerate(todo):
        by_asker.setdefault(s.asker, []).append(i)
    talks: list[list[Talk]] = [[] for _ in todo]
    for name, idx in by_asker.items():
        got = converse(roster, store, [(prompts[todo[i].prompt_id], [todo[i].model_a, todo[i].model_b]) for i in idx],
                       todo[0].iteration, todo[0].phase, name)
        for i, t in zip(idx, got):
            talks[i] = t
    out = []
    for s, (a, b) in zip(todo, talks):
        p = prompts[s.prompt_id]
        error = "; ".join(x.error for x in (a, b) if x.error) or None
        ra, rb = (x.answers()[-1] if x.answers() else "" for x in (a, b))
        many = max(len(a.messages), len(b.messages)) > 2
        battle = Battle.from_spec(s, p, response_a=ra, response_b=rb, error=error, asker=s.asker)
        out.append(replace(battle, conversation_a=encode(a.messages), conversation_b=encode(b.messages))
                   if many else battle)
    return out
