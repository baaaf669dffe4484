"""Atomic file I/O: a file or a directory is written to a temporary name and renamed, so it is
either whole or absent; lines are appended in one write. A file that cannot be read anyway was
changed outside the flywheel: ``DamagedFileError`` says so in one line."""

from __future__ import annotations

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


def append_bytes(path: Path, text: str) -> None:
    """Append ``text`` in one O_APPEND write (then fsync): lines that several processes append
    at once (mapped tasks on other workers) land whole, never interleaved."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        os.close(fd)


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
