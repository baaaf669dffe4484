"""User prompt pools: read prompts from JSONL, JSON, CSV or Parquet in the common layouts.

Layouts (``auto`` tells them apart per row by their fields):

- ``alpaca``: ``instruction`` (+ ``input``, appended after a blank line); ``output`` is a sample
  answer, not a checkable reference, and is not used;
- ``sharegpt``: ``conversations`` (or ``messages``): its user turns (the first is the prompt, the
  later ones its ``turns``; the assistant's answers are samples, not used). The turns must take
  turns, user first (after an optional system message), and none may be empty;
- ``arena``: Chatbot Arena's battle logs (and ``data export --format arena``): ``conversation_a``
  (OpenAI-style turns, or their JSON text): its user turns, as ``sharegpt`` reads them
  (``conversation_b`` asks the same questions), with ``question_id`` and ``category`` where the
  row has them; with ``votes``, a row's human vote (``winner``, both models and both conversations,
  ``flywheel.worlds.votes``) is kept too, one per row, and a row whose vote cannot be read is bad;
- ``arena-hard``: ``question.jsonl`` rows with ``turns: [{"content": ...}]`` (arena-hard) or
  ``turns: ["...", "..."]`` (MT-Bench: a second turn becomes the prompt's ``turns``),
  ``question_id``, ``category`` (or ``cluster``);
- ``plain``: ``prompt`` (or ``text``), optional ``category``, ``level``, ``reference``, and
  ``follow_ups`` (the later user turns of a conversation, a list of texts).

Every prompt gets a category (its row's, else the pool's default) and a level (1 unless the row
says), which make its selection arm. Prompts are deduplicated by whitespace-normalised text.
Files are read by ``flywheel.ground.row_files``; a row that cannot be read is reported where it is
(``file:line``, or ``file:row N`` in Parquet).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flywheel.ground.conversation import check_roles, encode, normalized
from flywheel.ground.records import Prompt, stable_id
from flywheel.ground.row_files import BadRow, read_row_file
from flywheel.worlds.votes import Vote, vote_of

LAYOUTS = ("auto", "alpaca", "sharegpt", "arena", "arena-hard", "plain")
HUMAN = {"human", "user"}


@dataclass
class Ingested:
    prompts: list[Prompt] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)  # (where, why)
    duplicates: int = 0
    votes: list[Vote] = field(default_factory=list)  # arena rows' human votes (``ingest(..., votes=True)``)


def detect(row: dict[str, Any]) -> str:
    if "instruction" in row:
        return "alpaca"
    if "conversations" in row or "messages" in row:
        return "sharegpt"
    if "conversation_a" in row:
        return "arena"
    if "turns" in row:
        return "arena-hard"
    return "plain"


def _field(row: dict[str, Any], *names: str) -> str:
    """The first of ``names`` the row has (null counts as absent), which must be text; the error
    names what is wrong."""
    for name in names:
        value = row.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise ValueError(f"'{name}' is {type(value).__name__}, not text")
            return value
    raise ValueError(f"no '{names[0]}'" + (f" (or '{names[1]}') field" if len(names) > 1 else ""))


def _text(row: dict[str, Any], layout: str) -> str | tuple[str, list[str]]:
    """The row's prompt: its text, or (first user turn, later user turns) of a conversation."""
    if layout == "alpaca":
        text, extra = _field(row, "instruction"), row.get("input") or ""
        if not isinstance(extra, str):
            raise ValueError(f"'input' is {type(extra).__name__}, not text")
        return f"{text}\n\n{extra}" if extra else text
    if layout in ("sharegpt", "arena"):
        name = "conversation_a" if layout == "arena" else "conversations"
        turns = row.get(name) if layout == "arena" else row.get("conversations", row.get("messages"))
        if isinstance(turns, str):
            turns = json.loads(turns)
        if not isinstance(turns, list):
            raise ValueError(f"'{name}' is not a list of turns")
        if not any(isinstance(t, dict) and str(t.get("from", t.get("role", ""))).lower() in HUMAN for t in turns):
            raise ValueError("no human or user turn")
        check_roles(turns)
        users = [m["content"] for m in normalized(turns) if m["role"] == "user"]
        return users[0], users[1:]
    if layout == "arena-hard":
        turns = row.get("turns")
        if isinstance(turns, str):
            turns = json.loads(turns)
        if not isinstance(turns, list) or not turns:
            raise ValueError("'turns' has no first turn with 'content'")
        texts = [t.get("content") if isinstance(t, dict) else t for t in turns]  # arena-hard's dicts, MT-Bench's texts
        for i, t in enumerate(texts, 1):
            if not isinstance(t, str) or not t.strip():
                raise ValueError("'turns' has no first turn with 'content'" if i == 1 else f"turn {i} is empty")
        return texts[0], texts[1:]
    text = _field(row, "prompt", "text")
    later = row.get("follow_ups")
    if later in (None, "", []):
        return text
    later = json.loads(later) if isinstance(later, str) else later
    if not isinstance(later, list) or not all(isinstance(t, str) for t in later):
        raise ValueError("'follow_ups' is not a list of texts")
    for i, t in enumerate(later, 2):
        if not t.strip():
            raise ValueError(f"turn {i} is empty")
    return text, later


def _split(got: str | tuple[str, list[str]]) -> tuple[str, list[str]]:
    """(first turn, later turns) of what ``_text`` read, stripped."""
    text, later = (got, []) if isinstance(got, str) else got
    return text.strip(), [t.strip() for t in later]


def _level(value: Any) -> int:
    """A row's level: a whole number (``3``, ``3.0``, ``"3"``), 1 when absent."""
    if value is None or value == "":
        return 1
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError(f"level {value!r} is not a whole number")


def ingest(path: Path, layout: str = "auto", category: str = "user", dedup: bool = True,
           seen: set[str] | None = None, votes: bool = False) -> Ingested:
    """Prompts of one file. ``seen`` (normalised texts) dedups across files and against a
    held-out set: prompts in it are dropped and counted as duplicates. ``votes``: also keep the
    human vote of every arena row with a ``winner`` (a repeated prompt's votes too)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} ({', '.join(LAYOUTS)})")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    seen = set() if seen is None else seen
    out = Ingested()
    rows = read_row_file(path).rows  # a file that cannot be read at all: RowFileError, a ValueError naming it
    if not rows:
        raise ValueError(f"{path}: empty: no prompts")
    for read in rows:
        where = read.where
        if isinstance(read, BadRow):
            out.bad.append((where, read.reason))
            continue
        row = read.value
        if not isinstance(row, dict):
            out.bad.append((where, "not an object"))
            continue
        try:
            kind = detect(row) if layout == "auto" else layout
            text, later = _split(_text(row, kind))
            if not text:
                raise ValueError("empty prompt")
            level = _level(row.get("level"))
            vote = vote_of(row, where) if votes and kind == "arena" and row.get("winner") not in (None, "") else None
        except (ValueError, TypeError, json.JSONDecodeError) as e:
            out.bad.append((where, str(e)))
            continue
        if vote is not None:
            out.votes.append(vote)
        key = " ".join(text.split())
        if dedup and key in seen:
            out.duplicates += 1
            continue
        seen.add(key)
        cat = str(row.get("category") or row.get("cluster") or category)
        ref = row.get("reference", row.get("answer"))
        pid = str(row.get("question_id") or row.get("id") or stable_id("pool", key))
        out.prompts.append(Prompt(id=stable_id("user", pid, key, *later), text=text, category=cat, level=level,
                                  reference=None if ref in (None, "") else str(ref), split="train",
                                  turns=encode(later)))
    return out


def bad_rows_message(bad: list[tuple[str, str]], limit: int = 10) -> str:
    """The bad rows of a pool: one line for one (``file:line: why``), else a count and a line each."""
    if len(bad) == 1:
        return f"{bad[0][0]}: {bad[0][1]}"
    lines = [f"  {where}: {why}" for where, why in bad[:limit]]
    more = f"\n  ... and {len(bad) - limit} more" if len(bad) > limit else ""
    return f"{len(bad)} bad row(s):\n" + "\n".join(lines) + more
