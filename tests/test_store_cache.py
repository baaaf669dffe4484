"""The generation and judge-output caches: SQLite files read by key, shared by processes, and
earlier runs' JSONL caches imported."""

import json
import multiprocessing as mp
from pathlib import Path

from flywheel.store import KeyValueCache, RunStore


def _writer(path: str, start: int, barrier) -> None:
    barrier.wait()  # all open the new cache at once: the race that once failed with "database is locked"
    cache = KeyValueCache(Path(path))
    for i in range(start, start + 100, 20):
        cache.put((f"k{j}", f"t{j}") for j in range(i, i + 20))


def test_cache_reads_only_the_keys_asked_and_persists(tmp_path):
    cache = KeyValueCache(tmp_path / "c" / "generations.sqlite")
    assert cache.get_many(["a"]) == {} and not cache.path.exists()  # nothing created by a lookup
    cache.put([("a", "1"), ("b", "2")])
    cache.put([("a", "1 again")])  # a key written twice keeps the last text
    again = KeyValueCache(tmp_path / "c" / "generations.sqlite")
    assert again.get_many(["a", "zzz"]) == {"a": "1 again"}
    assert again.get_many(f"k{i}" for i in range(2000)) == {}  # more keys than one query takes
    assert len(again) == 2


def test_processes_share_one_cache(tmp_path):
    ctx = mp.get_context("fork")  # fork: no interpreter start-up, so the processes really meet
    for attempt in range(10):  # the race is won or lost by timing: several fresh caches
        path = tmp_path / f"shared-{attempt}.sqlite"
        barrier = ctx.Barrier(6)
        procs = [ctx.Process(target=_writer, args=(str(path), 100 * s, barrier)) for s in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 6
        got = KeyValueCache(path).get_many(f"k{i}" for i in range(600))
        assert got == {f"k{i}": f"t{i}" for i in range(600)}


def test_an_earlier_runs_jsonl_cache_is_imported_once(tmp_path):
    store = RunStore(tmp_path / "run")
    store.cache_dir.mkdir(parents=True)
    legacy = store.cache_dir / "generations.jsonl"
    legacy.write_text(json.dumps({"key": "x", "text": "5"}) + "\n" + '{"key": "y", "te')  # cut short by a kill
    assert store.generations.get_many(["x", "y"]) == {"x": "5"}
    assert not legacy.exists() and (store.cache_dir / "generations.jsonl.imported").exists()
    assert RunStore(tmp_path / "run").generations.get_many(["x"]) == {"x": "5"}
