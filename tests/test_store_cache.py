"""The generation and judge-output caches: SQLite files read by key, shared by processes, and
earlier runs' JSONL caches imported."""

import json
import multiprocessing as mp
from pathlib import Path

from flywheel.ground.cache import KeyValueCache
from flywheel.ground.store import RunStore


def _writer(folder: str, start: int, barrier, attempts: int) -> None:
    for attempt in range(attempts):
        barrier.wait()  # all open a new cache at once: the race that once failed with "database is locked"
        cache = KeyValueCache(Path(folder) / f"shared-{attempt}.sqlite")
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
    ctx = mp.get_context("spawn")
    barrier, attempts = ctx.Barrier(6, timeout=30), 10  # the race is won or lost by timing: ten fresh caches
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), 100 * s, barrier, attempts)) for s in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 6
    for attempt in range(attempts):
        got = KeyValueCache(tmp_path / f"shared-{attempt}.sqlite").get_many(f"k{i}" for i in range(600))
        assert got == {f"k{i}": f"t{i}" for i in range(600)}


def test_an_earlier_runs_jsonl_cache_is_imported_once(tmp_path):
    store = RunStore(tmp_path / "run")
    store.cache_dir.mkdir(parents=True)
    legacy = store.cache_dir / "generations.jsonl"
    legacy.write_text(json.dumps({"key": "x", "text": "5"}) + "\n" + '{"key": "y", "te')  # cut short by a kill
    assert store.generations.get_many(["x", "y"]) == {"x": "5"}
    assert not legacy.exists() and (store.cache_dir / "generations.jsonl.imported").exists()
    assert RunStore(tmp_path / "run").generations.get_many(["x"]) == {"x": "5"}


def test_a_plan_is_read_shard_by_shard_and_old_jsonl_plans_still_read(tmp_path):
    from flywheel.ground.records import BattleSpec

    store = RunStore(tmp_path / "run")
    specs = [BattleSpec(f"b{i}", 1, "train", f"p{i % 7}", "student@0", "calc", "add/1") for i in range(1200)]
    store.write_plan(1, 2, specs, shard_size=500)
    assert store.plan_size(1, 2) == 1200 and store.plan(1, 2) == specs
    assert [store.plan_shard(1, 2, i, 500) for i in range(3)] == [specs[:500], specs[500:1000], specs[1000:]]
    assert store.plan_shard(1, 2, 1, 300) == specs[300:600]  # another shard size: sliced from the whole plan
    legacy = store.iter_dir(1) / "plan-r1.jsonl"  # a run directory written before plans were Parquet
    legacy.write_text("".join(json.dumps(s.to_row()) + "\n" for s in specs[:10]))
    assert store.plan(1) == specs[:10] + specs and store.plan_size(1, 1) == 10
    assert store.plan_shard(1, 1, 1, 4) == specs[4:8] and store.plan_size(1, 3) == 0 and store.plan(2) is None
