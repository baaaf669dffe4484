"""One budget for all workers: the run's spending ledger under concurrent processes, and two worker
processes, each with its own roster as a Dask worker builds it, spending against one
``budget.max_usd`` at the loopback API."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time

import pytest

from flywheel.arena.generation import generate_cached
from flywheel.config.loading import dump_config
from flywheel.config.tree import FlywheelConfig
from flywheel.ground.ledger import SpendLedger
from flywheel.ground.records import Prompt
from flywheel.ground.store import RunStore
from flywheel.players.api import BudgetExhausted
from flywheel.run.context import worker_context
from flywheel.worlds.world import Roster
from tests.fakeapi import FakeAPI

SPAWN = mp.get_context("spawn")  # real, fresh processes, as Dask's workers are


# -- the ledger alone --------------------------------------------------------------------------
def _append_many(path: str, n: int, usd: float, start) -> None:
    ledger = SpendLedger(path)
    start.wait()
    seen = 0.0
    for _ in range(n):
        ledger.append(usd)
        total = ledger.total()
        if total < seen:  # a reader's total never goes back
            os._exit(3)
        seen = total


def test_many_processes_appending_at_once_give_the_exact_total(tmp_path):
    path = tmp_path / "spend.jsonl"
    workers, n, usd = 4, 250, 0.125  # a binary fraction: the total is exact
    start = SPAWN.Barrier(workers)
    procs = [SPAWN.Process(target=_append_many, args=(str(path), n, usd, start)) for _ in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * workers
    ledger = SpendLedger(path)
    assert ledger.total() == workers * n * usd and ledger.rows() == workers * n
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    by_worker: dict[str, int] = {}
    for r in rows:
        by_worker[r["worker"]] = by_worker.get(r["worker"], 0) + 1
    assert sorted(by_worker.values()) == [n] * workers  # every row whole, none lost, none doubled


def test_a_row_cut_short_by_a_kill_is_skipped_and_the_next_row_stands_alone(tmp_path):
    path = tmp_path / "spend.jsonl"
    reader, writer = SpendLedger(path), SpendLedger(path)
    writer.append(0.5)
    assert reader.total() == 0.5
    with open(path, "a") as f:
        f.write('{"worker": "gone:1", "usd": 0.2')  # a process killed mid-row
    assert reader.total() == 0.5
    writer.append(0.25)
    assert reader.total() == 0.75 and reader.rows() == 2 and SpendLedger(path).total() == 0.75
    assert "gone:1" not in path.read_text()  # the next writer cut the torn row off
    path.unlink()  # a new ledger file is read from its start
    writer.append(1.0)
    assert reader.total() == 1.0


def test_a_run_from_before_the_ledger_carries_its_usage_once(tmp_path):
    store = RunStore(tmp_path)
    store.append_usage({"iteration": 1, "phase": "train", "player": "paid", "cost_usd": 0.3})
    store.append_usage({"iteration": 1, "phase": "judge", "player": "judge:j", "cost_usd": 0.2})
    cfg = FlywheelConfig.model_validate({"budget": {"max_usd": 0.5}})
    budget = Roster(cfg, store).budget
    assert budget.spent_usd == pytest.approx(0.5)
    with pytest.raises(BudgetExhausted):
        budget.check()
    assert Roster(cfg, RunStore(tmp_path)).budget.spent_usd == pytest.approx(0.5)  # carried once, not twice
    assert SpendLedger(store.spend_path).rows() == 1


# -- two workers, one budget, at the loopback API -----------------------------------------------
PRICE = 0.01  # per call: the script's reply is 2 output tokens at $5,000 per million
LIMIT = 0.5  # 50 calls
CONCURRENCY = 4  # per worker: one batch is 2 x 4 calls in flight
PER_WORKER = 60  # either worker alone could spend the whole budget


def _worker(run_dir: str, w: int, start) -> None:
    ctx = worker_context(run_dir)  # as a Dask worker builds its context: from the run's config.yaml
    prompts = [Prompt(f"w{w}-{i}", f"question {i} of worker {w}", "add", 1) for i in range(PER_WORKER)]
    start.wait()
    generate_cached(ctx.roster, ctx.store, "paid", prompts, iteration=1, phase="train")


def test_two_workers_share_one_budget_at_the_loopback_api(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_TEST_KEY", "fake-test-key-0123456789abcdefghij")
    with FakeAPI("script", delay_s=0.05) as server:
        server.script = lambda text: "ok"
        cfg = FlywheelConfig.model_validate({"budget": {"max_usd": LIMIT}, "opponents": [
            {"name": "paid", "kind": "openai", "model": "paid-1", "base_urls": [server.url],
             "api_key_env": "FLYWHEEL_TEST_KEY", "max_concurrency": CONCURRENCY, "max_retries": 0,
             "price_output_per_mtok": 5000.0}]})
        store = RunStore(tmp_path / "run")
        store.root.mkdir()
        store.config_path.write_text(dump_config(cfg))
        start = SPAWN.Barrier(2)
        t0 = time.perf_counter()
        procs = [SPAWN.Process(target=_worker, args=(str(store.root), w, start)) for w in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0]
        calls = len(server.requests)
    assert time.perf_counter() - t0 < 30

    ledger = SpendLedger(store.spend_path)
    spent = ledger.total()
    # nothing counted twice: the ledger holds every call the server answered, once
    assert ledger.rows() == calls and spent == pytest.approx(calls * PRICE)
    # paid calls stop at the limit, and the run ends within one batch of calls over it
    assert LIMIT <= spent <= LIMIT + 2 * CONCURRENCY * PRICE + 1e-9
    workers = {json.loads(line)["worker"] for line in store.spend_path.read_text().splitlines()}
    assert len(workers) == 2  # both processes spent from the one budget
    # usage.jsonl reports the same spending; every prompt not sent failed on the budget
    usage = store.usage()
    assert len(usage) == 2 and sum(r["calls"] for r in usage) == calls
    assert sum(r["cost_usd"] for r in usage) == pytest.approx(spent)
    assert sum(r["failed"] for r in usage) == 2 * PER_WORKER - calls
    # a resumed run reads the same ledger: the spending counts once, and the budget stays spent
    budget = Roster(cfg, RunStore(store.root)).budget
    assert budget.spent_usd == pytest.approx(spent)
    with pytest.raises(BudgetExhausted):
        budget.check()
