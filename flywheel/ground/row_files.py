"""The one reader of a user's row files: JSONL (``.jsonl``, ``.ndjson``), JSON (one top-level array
of records), CSV and TSV (a header line, then one record per row), Parquet (``.parquet``, ``.pq``).

Every row has one way to name where it is: ``<file name>:<line>`` in a text format (the line a
record starts on: a JSON array's record, a CSV row with a quoted newline) and ``<file name>:row <n>``
in Parquet. A row that cannot be read is a ``BadRow`` with that location and the reason; a syntax
error that leaves the rest of the file unreadable (a CSV quote left open, a broken JSON array) is the
last row, marked ``last``. A file that cannot be read as rows at all (no such file, an unknown extension, not UTF-8,
not a JSON array, not Parquet) raises ``RowFileError``: one line that names the file. Text is
UTF-8, with or without a byte order mark. In JSONL a last line without its newline that is not
JSON was cut short by a kill: it is dropped (``parse_jsonl``, the one reader of JSON lines, the
run's own files too: ``read_jsonl``).

Callers add what their rows mean on top: battle logs (``flywheel rate``) check the columns, prompt
pools tell layouts apart, ``flywheel data show`` also reads dataset folders.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.ground.atomic import DAMAGED_HINT, DamagedFileError

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
           ".parquet": "parquet", ".pq": "parquet"}
STOPS = "the file is read no further"
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


class RowFileError(ValueError):
    """The file cannot be read as rows at all; the message names it."""


@dataclass(frozen=True, slots=True)
class Row:
    where: str  # file:line, or file:row N (Parquet)
    value: Any  # a dict for CSV and Parquet rows; any JSON value for JSON and JSONL records


@dataclass(frozen=True, slots=True)
class BadRow:
    where: str
    reason: str
    last: bool = False  # a break the rest of the file cannot be read past (it is the last row)

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass(frozen=True)
class RowFile:
    path: Path
    format: str  # jsonl, json, csv, tsv or parquet
    columns: tuple[str, ...] | None  # a CSV/TSV file's header, a Parquet file's schema; None for JSON and JSONL
    rows: list[Row | BadRow]


def row_format(path: Path) -> str:
    """The format a file is read as, by its extension (any case)."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise RowFileError(f"{path}: unknown format {path.suffix!r}; use {', '.join(FORMATS)}")
    return fmt


def read_row_file(path: str | Path, limit: int | None = None) -> RowFile:
    """Every row of a file (the first ``limit`` only, bad ones counted, if given), in file order."""
    path = Path(path)
    fmt = row_format(path)
    if not path.is_file():
        raise RowFileError(f"{path}: no such file")
    try:
        if fmt == "parquet":
            return _parquet(path, limit)
        if fmt == "json":
            rows = _json_array(path.read_bytes().decode("utf-8-sig"), path, limit)
            return RowFile(path, fmt, None, rows[:limit])  # a break found just past the limit is left out
        if fmt == "jsonl":
            return RowFile(path, fmt, None, _jsonl(path, limit))
        return _csv(path, fmt, limit)
    except UnicodeDecodeError:  # perhaps found while streaming: the bytes are read again to say where
        raise _not_utf8(path, fmt, path.read_bytes()) from None
    except OSError as e:
        raise RowFileError(f"{path}: cannot be read: {e.strerror or e}") from None


def _not_utf8(path: Path, fmt: str, data: bytes) -> RowFileError:
    """The one error for a file that is not UTF-8 text: the first bad byte and its line."""
    body = data.removeprefix(b"\xef\xbb\xbf")
    try:
        body.decode("utf-8")
        where = ""
    except UnicodeDecodeError as e:
        line = body.count(b"\n", 0, e.start) + 1
        where = f" (byte 0x{body[e.start]:02x} on line {line})"
    return RowFileError(f"{path}: cannot be read as {fmt}: not UTF-8 text{where}; save it as UTF-8")


def _not_json(e: json.JSONDecodeError) -> str:
    return f"not JSON ({e.msg.removesuffix(' at')} at column {e.colno})"


def _jsonl(path: Path, limit: int | None) -> list[Row | BadRow]:
    with path.open(encoding="utf-8-sig") as fh:
        return parse_jsonl(fh, path.name, limit=limit)


def parse_jsonl(lines: Iterable[str], name: str, first_line: int = 1, limit: int | None = None,
                own: bool = False) -> list[Row | BadRow]:
    """The records of JSON lines (each with its newline, as a file yields them), named
    ``<name>:<line>``; blank lines are passed over. The one policy for a line that is not JSON: in a
    file the flywheel writes (``own``), the last line without its newline is a write a kill cut
    short (or one not yet finished) and is dropped; any other, and any in a user's file, is a
    ``BadRow`` naming its file and line."""
    rows: list[Row | BadRow] = []
    for n, line in enumerate(lines, first_line):
        if limit is not None and len(rows) >= limit:
            break
        if not line.strip():
            continue
        try:
            rows.append(Row(f"{name}:{n}", json.loads(line)))
        except json.JSONDecodeError as e:
            if line.endswith("\n") or not own:
                rows.append(BadRow(f"{name}:{n}", _not_json(e)))
    return rows


def jsonl_values(lines: Iterable[str], path: Path, first_line: int = 1) -> list[Any]:
    """The records of a JSON-lines file the flywheel writes (``parse_jsonl``'s policy); a line that
    is not JSON, other than a torn last one, raises ``DamagedFileError`` naming the file and line."""
    out = []
    for r in parse_jsonl(lines, path.name, first_line, own=True):
        if isinstance(r, BadRow):
            raise DamagedFileError(f"{path.with_name(r.where)}: {r.reason}; {DAMAGED_HINT}")
        out.append(r.value)
    return out


def read_jsonl(path: Path) -> list[Any]:
    """Every record of a JSON-lines file the flywheel writes (a run's logs, plans, lessons...), in
    order; none when there is no such file. See ``jsonl_values``."""
    try:
        with path.open(encoding="utf-8") as fh:
            return jsonl_values(fh, path)
    except FileNotFoundError:
        return []


def _json_array(text: str, path: Path, limit: int | None) -> list[Row | BadRow]:
    """Each record of a top-level JSON array, named by the line it starts on; in time linear in
    the file (newlines are counted once, as the scan moves on)."""
    i = _SPACE.match(text).end()
    if not text.startswith("[", i):
        raise RowFileError(f"{path}: cannot be read as json: the file must hold one JSON array of records")
    rows: list[Row | BadRow] = []
    name = path.name
    line, counted = 1, 0  # the line at ``counted``

    def at(pos: int) -> int:
        nonlocal line, counted
        line, counted = line + text.count("\n", counted, pos), pos
        return line

    def stop(pos: int, why: str) -> list[Row | BadRow]:
        col = pos - text.rfind("\n", 0, pos)
        rows.append(BadRow(f"{name}:{at(pos)}", f"not JSON ({why} at column {col}); {STOPS}", last=True))
        return rows

    dec = json.JSONDecoder()
    i = _SPACE.match(text, i + 1).end()
    closed = text.startswith("]", i)  # an empty array
    while not closed and (limit is None or len(rows) < limit):
        if i == len(text):
            return stop(i, "the array is not closed")
        try:
            value, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            rows.append(BadRow(f"{name}:{e.lineno}", f"{_not_json(e)}; {STOPS}", last=True))
            return rows
        rows.append(Row(f"{name}:{at(i)}", value))
        i = _SPACE.match(text, end).end()
        if text.startswith(",", i):
            i = _SPACE.match(text, i + 1).end()
        elif text.startswith("]", i):
            closed = True
        else:
            return stop(i, "the array is not closed" if i == len(text) else "Expecting ',' delimiter")
    if closed and (i := _SPACE.match(text, i + 1).end()) < len(text):
        return stop(i, "more after the array's end")
    return rows


def _csv(path: Path, fmt: str, limit: int | None) -> RowFile:
    """Strict CSV (TSV): a row with more fields than the header is a bad row, one with fewer has
    None for the rest; a quote left open would swallow the rest of the file, so it is the last row."""
    rows: list[Row | BadRow] = []
    name = path.name
    header: list[str] | None = None
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t" if fmt == "tsv" else ",", strict=True)
        while header is None or limit is None or len(rows) < limit:  # the header is read whatever the limit
            start = reader.line_num + 1
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                rows.append(BadRow(f"{name}:{start}", f"not {fmt.upper()} ({e}); {STOPS}", last=True))
                break
            if not fields:  # a blank line
                continue
            if header is None:
                header = fields
            elif len(fields) > len(header):
                rows.append(BadRow(f"{name}:{start}", f"{len(fields)} fields, the header has {len(header)}"))
            else:
                rows.append(Row(f"{name}:{start}", dict(zip(header, fields + [None] * (len(header) - len(fields))))))
    return RowFile(path, fmt, tuple(header or ()), rows)


def _parquet(path: Path, limit: int | None) -> RowFile:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError, pa.ArrowException) as e:  # ArrowInvalid is a ValueError
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise RowFileError(f"{path}: cannot be read as parquet: {first}") from None
    if limit is not None:
        table = table.slice(0, limit)
    rows: list[Row | BadRow] = [Row(f"{path.name}:row {n}", r) for n, r in enumerate(table.to_pylist(), 1)]
    return RowFile(path, "parquet", tuple(table.column_names), rows)
