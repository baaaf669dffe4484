"""The run's caches of generations and judge outputs: key -> text in SQLite."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

from flywheel.ground.row_files import read_jsonl


class KeyValueCache:
    """A key -> text cache (generations, judge outputs) in one SQLite file: lookups read only the
    keys asked for, so memory stays bounded however large the cache grows, and several
    processes (mapped shards) can share it. Each ``put`` is one transaction: a kill loses at most
    the batch in flight, which is simply computed again. A cache written by older versions as
    JSONL (the same name with ``.jsonl``) is imported once (``read_jsonl``)."""

    CHUNK = 500  # keys per lookup query (SQLite's bound on query parameters)

    def __init__(self, path: Path) -> None:
        self.path = path.with_suffix(".sqlite")
        self._ready = False
        self.reads = True  # False: lookups find nothing (a round judged again after the judge guard stopped it)

    def _connect(self):
        con = sqlite3.connect(self.path, timeout=120)
        if not self._ready:
            self._prepare(con)
            self._import_jsonl(con)
            self._ready = True
        return con

    @staticmethod
    def _prepare(con, attempts: int = 200) -> None:
        """WAL mode and the table. Switching the journal mode takes an exclusive lock that SQLite
        does not wait for (its busy timeout does not apply), so when two processes open a new cache
        at once, one is told "database is locked": it waits a moment and tries again."""
        for attempt in range(attempts):
            try:
                if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    con.execute("PRAGMA journal_mode=WAL")
                con.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, text TEXT NOT NULL)")
                con.commit()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or attempt == attempts - 1:
                    raise
                time.sleep(0.05 + 0.01 * attempt)

    def _import_jsonl(self, con) -> None:
        legacy = self.path.with_suffix(".jsonl")
        rows = [(r["key"], r["text"]) for r in read_jsonl(legacy)]
        try:
            with con:
                con.executemany("INSERT OR IGNORE INTO cache VALUES (?, ?)", rows)
            legacy.rename(legacy.with_suffix(".jsonl.imported"))
        except FileNotFoundError:  # none, or another process imported it first
            return

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        """The cached texts of those ``keys`` that are cached."""
        keys = list(dict.fromkeys(keys))
        if not keys or not self.reads or not (self.path.exists() or self.path.with_suffix(".jsonl").exists()):
            return {}
        out: dict[str, str] = {}
        con = self._connect()
        try:
            for i in range(0, len(keys), self.CHUNK):
                chunk = keys[i:i + self.CHUNK]
                marks = ",".join("?" * len(chunk))
                out.update(con.execute(f"SELECT key, text FROM cache WHERE key IN ({marks})", chunk).fetchall())
        finally:
            con.close()
        return out

    def put(self, items: Iterable[tuple[str, str]]) -> None:
        items = list(items)
        if not items:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = self._connect()
        try:
            with con:
                con.executemany("INSERT OR REPLACE INTO cache VALUES (?, ?)", items)
        finally:
            con.close()

    def __len__(self) -> int:
        if not self.path.exists():
            return 0
        con = self._connect()
        try:
            return con.execute("SELECT COUNT(*) FROM cache").fetchone()[0]
        finally:
            con.close()
