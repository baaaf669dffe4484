"""The prompts of a target's GRPO phase, read from its train battles of the iteration.

Each prompt is a state the target was in: a task it was asked (turn 1) or, in a conversation, a
later user turn after its own earlier answers. A later-turn state is the target's side of the
conversation up to that user turn: the earlier user turns, the assistant turns the target itself
gave, and the follow-up that was actually asked, with the reference the battle gave that turn
(the asker's, computed from the target's own earlier answer). The policy then writes the next
assistant turn, asked as the players ask it (``flywheel.ground.chat.prompt_as_read``).

The baseline a judge reward compares with is the opponent's answer to the same turn in a battle
the opponent won (else tied, else any), and in a conversation the opponent's whole conversation up
to that answer: judges judge conversations whole, as in battles.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from flywheel.arena.conversations import turn_prompt
from flywheel.ground.chat import prompt_as_read
from flywheel.ground.conversation import Message, decode, encode, plain
from flywheel.ground.records import SCORE_A, Battle, Prompt, base_name
from flywheel.run.context import Context

log = logging.getLogger("flywheel")

# The dataset columns a conversation adds to every row (each row has them when any row is a
# conversation's): the 1-based user turn, the earlier messages (JSON, each user turn with its
# reference), and the baseline's conversation up to its answer to that turn (JSON; "" at turn 1).
CONVERSATION_COLUMNS = ("turn", "history", "baseline_conversation")


@dataclass(frozen=True)
class TurnState:
    """One user turn of a battle as one side saw it: ``history`` (that side's messages before the
    turn), the turn's text and reference, and the other side's answer to it (``baseline``, with
    its conversation up to that answer in ``baseline_conversation``; empty for turn 1)."""

    prompt_id: str
    turn: int
    text: str
    reference: str | None
    history: list[Message] = field(default_factory=list)
    baseline: str | None = None
    baseline_conversation: list[Message] = field(default_factory=list)


def turn_states(b: Battle, side_a: bool) -> list[TurnState]:
    """Every user turn of battle ``b`` as seat A (``side_a``) or B saw it: the task alone in a
    single-turn battle; in a conversation, each user turn after that side's own earlier turns.
    A later turn's id is the id its seat was asked it under (``turn_prompt``)."""
    other = b.response_b if side_a else b.response_a
    if not b.multi_turn:
        return [TurnState(b.prompt_id, 1, b.prompt, b.reference, baseline=other)]
    mine = decode(b.conversation_a if side_a else b.conversation_b)
    theirs = decode(b.conversation_b if side_a else b.conversation_a)
    task = Prompt(b.prompt_id, b.prompt, b.category, b.level, b.reference, "train")
    out: list[TurnState] = []
    for i, m in enumerate(mine):
        if m["role"] != "user":
            continue
        turn = len(out) + 1
        answer = theirs[i + 1]["content"] if i + 1 < len(theirs) and theirs[i]["content"] == m["content"] else None
        history = mine[:i]
        if turn == 1:
            out.append(TurnState(b.prompt_id, 1, b.prompt, b.reference, baseline=answer))
            continue
        pid = turn_prompt(task, turn - 1, m["content"], m.get("reference"), history).id
        out.append(TurnState(pid, turn, m["content"], m.get("reference"), history=history, baseline=answer,
                             baseline_conversation=theirs[:i + 2] if answer is not None else []))
    return out


def rl_prompts(ctx: Context, k: int, t: str):
    """One row per distinct state of target ``t`` in its train battles of iteration ``k`` (chosen
    by the select stage's bandits): the prompt as the target reads it, its text, reference,
    category and the baseline answer a judge reward compares with: the opponent's answer in a
    battle the opponent won on that state, else in a tie, else any. Eval and validation prompts
    never pass, nor do the categories ``train.rl.leave_out`` names. In a conversation every user
    turn is a state (``turn_states``); with the verifier reward a state without a reference (a later
    turn, a prompt pool's open prompt) is left out: nothing could score it."""
    from datasets import Dataset

    held_out = {p.text for p in ctx.eval_split} | {p.text for p in ctx.validation}
    left_out = set(ctx.cfg.train.rl.leave_out)
    checkable_only = ctx.cfg.train.rl.reward == "verifier"
    rows: dict[str, dict] = {}
    unscorable: set[str] = set()
    talks = False
    for jb in ctx.store.judged(k, "train"):
        b = jb.battle
        if t not in (base_name(b.model_a), base_name(b.model_b)) or b.prompt in held_out or b.category in left_out:
            continue
        talks = talks or b.multi_turn
        mine_a = base_name(b.model_a) == t
        opp = b.model_b if mine_a else b.model_a
        opp_score = 1.0 - SCORE_A[jb.winner] if mine_a else SCORE_A[jb.winner]
        for s in turn_states(b, mine_a):
            if checkable_only and s.reference is None:
                unscorable.add(s.prompt_id)
                continue
            row = rows.setdefault(s.prompt_id, {
                "prompt_text": s.text, "reference": s.reference, "prompt_id": s.prompt_id, "category": b.category,
                "level": b.level,
                "baseline": None, "baseline_model": None, "rank": -1.0, "turn": s.turn, "history": encode(s.history),
                "baseline_conversation": ""})
            if opp_score > row["rank"] and base_name(opp) != t and s.baseline is not None:
                row.update(baseline=s.baseline, baseline_model=opp, rank=opp_score,
                           baseline_conversation=encode(s.baseline_conversation))
    if ctx.cfg.train.rl.prompts == "train" and not talks:  # every train prompt with a reference, not only the battles'
        for p in ctx.train_pool:
            if p.reference is None or p.text in held_out or p.id in rows or p.category in left_out:
                continue
            rows[p.id] = {"prompt_text": p.text, "reference": p.reference, "prompt_id": p.id, "category": p.category,
                          "level": p.level, "baseline": None, "baseline_model": None, "rank": -1.0, "turn": 1,
                          "history": "", "baseline_conversation": ""}
    if unscorable:
        log.info("%s: %d states of iteration %d's battles have no reference answer: the verifier reward cannot "
                 "score them, so its own answers are not sampled there", t, len(unscorable), k)
    chat, system = ctx.roster.is_chat(t), ctx.roster.config(t).system_prompt
    drop = {"rank"} | (set() if talks else set(CONVERSATION_COLUMNS))
    data = [{**{c: v for c, v in r.items() if c not in drop},
             "prompt": prompt_as_read(r["prompt_text"], plain(decode(r["history"])), chat, system)}
            for r in rows.values()]
    if left_out and not data:
        log.warning("%s: no RL prompt in iteration %d outside train.rl.leave_out %s: its phase learns from no "
                    "own answers", t, k, sorted(left_out))
    return Dataset.from_list(data) if data else Dataset.from_dict({"prompt": []})
