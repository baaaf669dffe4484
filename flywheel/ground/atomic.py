"""Atomic file I/O: a file or a directory is written to a temporary name and renamed, so it is
either whole or absent; lines are appended in one write, after cutting off a line a kill cut short.
A file that cannot be read anyway was changed outside the flywheel: ``DamagedFileError`` says so in
one line."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


class DamagedFileError(ValueError):
    """A file that cannot be read: a run's JSON or Parquet file, a checkpoint's weights. The flywheel writes
    every file atomically, so it was cut short or changed by something else; the CLI says so in one
    line (exit 2)."""


DAMAGED_HINT = "the flywheel writes its files atomically: this one was cut short or changed by something else; " \
               "restore it from a copy"


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append_bytes(path: Path, text: str, only_if_empty: bool = False) -> bool:
    """Append ``text`` (whole lines) in one O_APPEND write, then fsync, under an exclusive
    ``flock``: lines that several processes append at once (mapped tasks on other workers) land
    whole, never interleaved. A last line without its newline is a write a kill cut short
    (``row_files.parse_jsonl`` drops it): it is cut off first, so the file holds whole lines
    only. ``only_if_empty``: append only to an empty file; returns whether it appended."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = _whole_lines(fd)
        if only_if_empty and size:
            return False
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
        return True
    finally:
        os.close(fd)  # releases the lock


def _whole_lines(fd: int) -> int:
    """Cut a torn last line (one without its newline) off the open file; its size after."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end:
        chunk = os.pread(fd, min(end, 1 << 16), end - min(end, 1 << 16))
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            end -= len(chunk) - cut - 1
            break
        end -= len(chunk)
    os.ftruncate(fd, end)
    return end


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def atomic_write_dir(out: Path, fill: Callable[[Path], None]) -> None:
    """Build the directory ``out`` with ``fill(tmp)`` in a temporary sibling, then swap it in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    fill(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


def read_json(path: Path, default: Any = None) -> Any:
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DamagedFileError(f"{path}: not valid JSON ({e}; {DAMAGED_HINT})") from e
