"""The run's spending ledger: what every paid API call of a run cost, one JSONL row per call,
shared by every process of the run (the flow's own, each Dask or Ray worker) so that one
``budget.max_usd`` holds across them.

A row (``{"worker": "host:pid", "usd": 0.0123}``) is appended in one ``write`` under an exclusive
``fcntl.flock``; the total is read under a shared one. Rows, not one counter rewritten in place:
a process killed at any moment leaves its row whole or a last line cut short, which readers pass
over and the next writer cuts off (``atomic.append_bytes``), so nothing is lost that was fully
written and nothing is counted twice. Each reader keeps its place in the file and reads only the rows
appended since its last read, so a check before every call stays cheap however long the run.
The file lives in the run directory (``RunStore.spend_path``); it is the source of truth for what
the run has spent.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
from pathlib import Path

from flywheel.ground.atomic import append_bytes
from flywheel.ground.row_files import jsonl_values


class SpendLedger:
    """One run's ledger file, read and appended by any number of threads and processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()  # flock excludes other open files, not threads sharing this object's state
        self._seen: tuple[int, int] = (0, 0)  # (inode, offset): where this reader stopped
        self._total = 0.0
        self._rows = 0

    def append(self, usd: float, **extra: object) -> None:
        """Record one paid call's cost (``extra``: more fields of the row)."""
        row = json.dumps({"worker": f"{socket.gethostname()}:{os.getpid()}", "usd": usd, **extra}) + "\n"
        with self._lock:
            append_bytes(self.path, row)

    def carry(self, usd: float) -> bool:
        """Start an empty ledger with ``usd`` spent before it existed (a run made by an older
        flywheel, whose spending only ``usage.jsonl`` records); True if this call wrote it. Under
        the lock, so of several processes that start at once only the first one carries it."""
        if usd <= 0 or self.has_rows():
            return False
        row = json.dumps({"worker": f"{socket.gethostname()}:{os.getpid()}", "usd": usd, "carried": True}) + "\n"
        with self._lock:
            return append_bytes(self.path, row, only_if_empty=True)

    def has_rows(self) -> bool:
        try:
            return self.path.stat().st_size > 0
        except FileNotFoundError:
            return False

    def total(self) -> float:
        """USD spent so far by every process of the run (a last row cut short by a kill is not counted)."""
        with self._lock:
            self._refresh()
            return self._total

    def rows(self) -> int:
        """How many whole rows (paid calls, and a carried total) the ledger holds."""
        with self._lock:
            self._refresh()
            return self._rows

    def _refresh(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._seen, self._total, self._rows = (0, 0), 0.0, 0
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            st = os.fstat(fd)
            inode, offset = self._seen
            if st.st_ino != inode or st.st_size < offset:  # a new file: read it from the start
                offset, self._total, self._rows = 0, 0.0, 0
            new = b""
            while offset + len(new) < st.st_size:
                chunk = os.pread(fd, st.st_size - offset - len(new), offset + len(new))
                if not chunk:
                    break
                new += chunk
        finally:
            os.close(fd)
        whole = new.rfind(b"\n") + 1  # a line not yet ended is read once it is
        rows = jsonl_values(new[:whole].decode("utf-8").splitlines(keepends=True), self.path, self._rows + 1)
        self._total += sum(float(r["usd"]) for r in rows)
        self._rows += len(rows)
        self._seen = (st.st_ino, offset + whole)
