"""Human votes in Chatbot Arena's layout: who fought (``model_a``, ``model_b``), what the human
said (``winner``: ``model_a``, ``model_b``, ``tie`` or ``tie (bothbad)``), and what they saw
(``conversation_a`` and ``conversation_b``: OpenAI-style turns, or their JSON text, each ending with
its side's answer; both ask the same user turns), with ``question_id`` and ``category`` where the row
has them.

``vote_of`` reads one row (``flywheel data ingest`` keeps the votes of a log beside its prompts);
``read_votes`` reads a whole log (``flywheel judge-agreement``), its bad rows named ``file:line``
(``file:row N`` in Parquet) by ``flywheel.ground.row_files``. A vote becomes a ``Battle`` to judge:
single-turn, its prompt and both answers; multi-turn, both whole conversations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.ground.conversation import check_roles, decode, encode, normalized
from flywheel.ground.records import Battle, stable_id
from flywheel.ground.row_files import BadRow, RowFileError, read_row_file

WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")
LAYOUT = "model_a, model_b, winner, conversation_a and conversation_b (Chatbot Arena's layout)"


class VoteLogError(ValueError):
    """The file cannot be read as a log of human votes at all; the message names it."""


@dataclass(frozen=True)
class Vote:
    """One human vote. ``conversation_a`` / ``_b``: each side's messages as JSON (``encode``)."""

    where: str  # file:line (file:row N in Parquet) of the row it was read from
    question_id: str
    model_a: str
    model_b: str
    winner: str
    category: str | None
    conversation_a: str
    conversation_b: str

    def to_row(self) -> dict[str, Any]:
        """The vote as a row of a Chatbot Arena-layout log (what ingest writes, and reads again)."""
        return {"question_id": self.question_id, "model_a": self.model_a, "model_b": self.model_b,
                "winner": self.winner, "category": self.category, "conversation_a": decode(self.conversation_a),
                "conversation_b": decode(self.conversation_b), "source": self.where}

    def battle(self) -> Battle:
        """The battle a judge decides: one user turn, its prompt and both answers; several, both
        conversations. Its id is a hash of where the vote was read and who fought."""
        a, b = decode(self.conversation_a), decode(self.conversation_b)
        users = [m["content"] for m in a if m["role"] == "user"]
        bid = stable_id("vote", self.where, self.question_id, self.model_a, self.model_b)
        many = len(users) > 1
        return Battle(battle_id=bid, iteration=0, phase="eval", prompt_id=self.question_id, prompt=users[0],
                      category=self.category or "", level=1, reference=None, model_a=self.model_a,
                      model_b=self.model_b, response_a=a[-1]["content"], response_b=b[-1]["content"],
                      conversation_a=self.conversation_a if many else "",
                      conversation_b=self.conversation_b if many else "")


def _name(row: dict[str, Any], field: str) -> str:
    value = row.get(field)
    if value in (None, ""):
        raise ValueError(f"no {field}")
    if not isinstance(value, str):
        raise TypeError(f"{field} is {type(value).__name__}, not text")
    return value.strip()


def _conversation(row: dict[str, Any], side: str) -> list[dict[str, str]]:
    """One side's turns, checked: user and assistant in turn (an optional system message first),
    none empty, ending with the side's answer; the system message is dropped."""
    field = f"conversation_{side}"
    turns = row.get(field)
    if turns in (None, ""):
        raise ValueError(f"no {field}")
    if isinstance(turns, str):
        try:
            turns = json.loads(turns)
        except json.JSONDecodeError:
            raise ValueError(f"{field} is neither a list of turns nor their JSON text") from None
    if not isinstance(turns, list):
        raise TypeError(f"{field} is not a list of turns")
    try:
        check_roles(turns)
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from None
    messages = [m for m in normalized(turns) if m["role"] != "system"]
    if messages[-1]["role"] != "assistant":
        raise ValueError(f"{field} ends with a user turn: no answer to judge")
    return messages


def vote_of(row: dict[str, Any], where: str) -> Vote:
    """The vote a row holds; ValueError (TypeError: a field of another type) says what is wrong with it."""
    if row.get("winner") in (None, ""):
        raise ValueError("no winner")
    winner = row["winner"]
    if winner not in WINNERS:
        raise ValueError(f"winner {winner!r} is not one of {', '.join(WINNERS)}")
    model_a, model_b = _name(row, "model_a"), _name(row, "model_b")
    if model_a == model_b:
        raise ValueError(f"a model cannot battle itself ({model_a!r})")
    a, b = _conversation(row, "a"), _conversation(row, "b")
    if [m["content"] for m in a if m["role"] == "user"] != [m["content"] for m in b if m["role"] == "user"]:
        raise ValueError("conversation_a and conversation_b ask different user turns")
    category = row.get("category")
    qid = row.get("question_id")
    return Vote(where=where, question_id=str(qid) if qid not in (None, "") else stable_id("question", encode(a[:1])),
                model_a=model_a, model_b=model_b, winner=winner,
                category=str(category) if category not in (None, "") else None,
                conversation_a=encode(a), conversation_b=encode(b))


def read_votes(path: str | Path) -> tuple[list[Vote], list[BadRow]]:
    """Every vote of a log and its bad rows, in file order. VoteLogError: the file cannot be read,
    or no row has a ``winner`` (a log of prompts, not of votes)."""
    path = Path(path)
    try:
        got = read_row_file(path)
    except RowFileError as e:
        raise VoteLogError(str(e)) from None
    if not got.rows:
        raise VoteLogError(f"{path}: empty: no votes")
    if got.columns is not None and "winner" not in got.columns:
        raise VoteLogError(f"{path}: no winner column: no human votes to agree with (needs {LAYOUT})")
    votes: list[Vote] = []
    bad: list[BadRow] = []
    voted = got.columns is not None
    for row in got.rows:
        if isinstance(row, BadRow):
            if row.last:  # the rest of the log cannot be read: counting what came before would hide it
                raise VoteLogError(str(row))
            bad.append(row)
            continue
        if not isinstance(row.value, dict):
            bad.append(BadRow(row.where, "not an object"))
            continue
        voted = voted or "winner" in row.value
        try:
            votes.append(vote_of(row.value, row.where))
        except (ValueError, TypeError) as e:
            bad.append(BadRow(row.where, str(e)))
    if not voted:
        raise VoteLogError(f"{path}: no row has a winner field: no human votes to agree with (needs {LAYOUT})")
    return votes, bad
