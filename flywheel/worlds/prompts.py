"""User prompt pools: read prompts from JSONL, JSON, CSV or Parquet in the common layouts.

Layouts (``auto`` tells them apart per row by their fields):

- ``alpaca``: ``instruction`` (+ ``input``, appended after a blank line); ``output`` is a sample
  answer, not a checkable reference, and is not used;
- ``sharegpt``: ``conversations`` (or ``messages``): the first human/user turn;
- ``arena-hard``: ``question.jsonl`` rows with ``turns: [{"content": ...}]``, ``question_id``,
  ``category`` (or ``cluster``);
- ``plain``: ``prompt`` (or ``text``), optional ``category``, ``level``, ``reference``.

Every prompt gets a category (its row's, else the pool's default) and a level (1 unless the row
says), which make its selection arm. Prompts are deduplicated by whitespace-normalised text.
A row that cannot be read is reported with its line (JSONL, CSV) or row number (Parquet, JSON).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flywheel.ground.records import Prompt, stable_id

LAYOUTS = ("auto", "alpaca", "sharegpt", "arena-hard", "plain")
HUMAN = {"human", "user"}


@dataclass
class Ingested:
    prompts: list[Prompt] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)  # (where, why)
    duplicates: int = 0


def _rows(path: Path) -> list[tuple[str, Any]]:
    """(where, row) pairs; where is ``file:line`` or ``file:row N``. Unreadable lines come back
    as (where, ValueError)."""
    name = path.name
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return [(f"{name}:row {i + 1}", r) for i, r in enumerate(pq.read_table(path).to_pylist())]
    if path.suffix == ".csv":
        return _csv_rows(path)
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        if not isinstance(data, list):
            raise ValueError(f"{name}: expected a JSON array of rows")
        return [(f"{name}:row {i + 1}", r) for i, r in enumerate(data)]
    out: list[tuple[str, Any]] = []
    with path.open(encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append((f"{name}:{n}", json.loads(line)))
            except json.JSONDecodeError as e:
                out.append((f"{name}:{n}", ValueError(f"not JSON ({e.msg.removesuffix(' at')} at column {e.colno})")))
    return out


def _csv_rows(path: Path) -> list[tuple[str, Any]]:
    """A CSV file's rows, each named by its line. A row with more fields than the header (an unquoted
    comma in a prompt) comes back as a ValueError; so does a quote left open, which would otherwise
    swallow the rest of the file into one prompt: the file is read no further."""
    out: list[tuple[str, Any]] = []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh, strict=True)
        while True:
            after = reader.line_num
            try:
                row = next(reader)
            except StopIteration:
                return out
            except csv.Error as e:
                out.append((f"{path.name}:{after + 1}", ValueError(f"not CSV ({e}); the file is read no further")))
                return out
            where = f"{path.name}:{reader.line_num}"
            if None in row:
                fields = len(row) - 1 + len(row[None])
                out.append((where, ValueError(f"{fields} fields, the header has {len(reader.fieldnames or [])}")))
            else:
                out.append((where, row))


def detect(row: dict[str, Any]) -> str:
    if "instruction" in row:
        return "alpaca"
    if "conversations" in row or "messages" in row:
        return "sharegpt"
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


def _text(row: dict[str, Any], layout: str) -> str:
    if layout == "alpaca":
        text, extra = _field(row, "instruction"), row.get("input") or ""
        if not isinstance(extra, str):
            raise ValueError(f"'input' is {type(extra).__name__}, not text")
        return f"{text}\n\n{extra}" if extra else text
    if layout == "sharegpt":
        turns = row.get("conversations", row.get("messages"))
        if isinstance(turns, str):
            turns = json.loads(turns)
        if not isinstance(turns, list):
            raise ValueError("'conversations' is not a list of turns")
        for t in turns:
            if isinstance(t, dict) and str(t.get("from", t.get("role", ""))).lower() in HUMAN:
                value = t.get("value", t.get("content"))
                if isinstance(value, str):
                    return value
        raise ValueError("no human or user turn")
    if layout == "arena-hard":
        turns = row.get("turns")
        if isinstance(turns, str):
            turns = json.loads(turns)
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], dict) or "content" not in turns[0]:
            raise ValueError("'turns' has no first turn with 'content'")
        return str(turns[0]["content"])
    return _field(row, "prompt", "text")


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
           seen: set[str] | None = None) -> Ingested:
    """Prompts of one file. ``seen`` (normalised texts) dedups across files and against a
    held-out set: prompts in it are dropped and counted as duplicates."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} ({', '.join(LAYOUTS)})")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    seen = set() if seen is None else seen
    out = Ingested()
    try:
        rows = _rows(path)
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as e:  # pyarrow's errors are ValueErrors/OSErrors
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(f"{path}: cannot be read as {path.suffix.lstrip('.') or 'a prompt file'}: {first}") from None
    if not rows:
        raise ValueError(f"{path}: empty: no prompts")
    for where, row in rows:
        if isinstance(row, Exception):
            out.bad.append((where, str(row)))
            continue
        if not isinstance(row, dict):
            out.bad.append((where, "not an object"))
            continue
        try:
            kind = detect(row) if layout == "auto" else layout
            text = _text(row, kind).strip()
            if not text:
                raise ValueError("empty prompt")
            level = _level(row.get("level"))
        except (ValueError, TypeError, json.JSONDecodeError) as e:
            out.bad.append((where, str(e)))
            continue
        key = " ".join(text.split())
        if dedup and key in seen:
            out.duplicates += 1
            continue
        seen.add(key)
        cat = str(row.get("category") or row.get("cluster") or category)
        ref = row.get("reference", row.get("answer"))
        pid = str(row.get("question_id") or row.get("id") or stable_id("pool", key))
        out.prompts.append(Prompt(stable_id("user", pid, key), text, cat, level,
                                  None if ref in (None, "") else str(ref), "train"))
    return out


def bad_rows_message(bad: list[tuple[str, str]], limit: int = 10) -> str:
    lines = [f"  {where}: {why}" for where, why in bad[:limit]]
    more = f"\n  ... and {len(bad) - limit} more" if len(bad) > limit else ""
    return f"{len(bad)} bad row(s):\n" + "\n".join(lines) + more
