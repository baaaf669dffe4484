"""The openai player: 32 requests in flight vs one at a time, in one run.

A loopback OpenAI-compatible server answers every call after 200 ms (``--latency``). The same
player class runs the same prompts with ``max_concurrency`` 32 and 1 (sequential calls).

    python -m benchmarks.players            # 256 calls concurrently, 64 sequentially

Prints both throughputs (calls per second) and ends with ``ratio: X`` (concurrent / sequential).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

from flywheel.players import SamplingParams, create_player
from flywheel.tasks import build_suite
from tests.fakeapi import FakeAPI


def throughput(url: str, prompts, concurrency: int) -> float:
    player = create_player("openai", "bench", model="m", base_urls=[url], api_key_env="FLYWHEEL_BENCH_KEY",
                           max_concurrency=concurrency)
    t0 = time.perf_counter()
    gens = player.generate(prompts, SamplingParams(max_new_tokens=8))
    took = time.perf_counter() - t0
    assert all(g.ok for g in gens), [g.error for g in gens if not g.ok][:3]
    return len(prompts) / took


def _serve(latency: float, port_out, stop) -> None:
    with FakeAPI("solver", delay_s=latency) as server:
        port_out.put(server.url)
        stop.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--calls", type=int, default=256)
    ap.add_argument("--sequential-calls", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    os.environ.setdefault("FLYWHEEL_BENCH_KEY", "bench")
    train, _ = build_suite(1234, 50, 2)
    # The server runs in its own process, so that it does not share the client's interpreter lock.
    ctx = mp.get_context("fork")
    port_out, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve, args=(args.latency, port_out, stop), daemon=True)
    proc.start()
    try:
        url = port_out.get(timeout=30)
        throughput(url, train[:8], args.concurrency)  # warm-up: imports, first connections
        conc = throughput(url, train[: args.calls], args.concurrency)
        seq = throughput(url, train[: args.sequential_calls], 1)
    finally:
        stop.set()
        proc.join(timeout=10)
    print(f"server latency {args.latency * 1000:.0f} ms per call")
    print(f"sequential:       {seq:8.2f} calls/s ({args.sequential_calls} calls, max_concurrency=1)")
    print(f"{args.concurrency}-way concurrent: {conc:8.2f} calls/s ({args.calls} calls)")
    print(f"ratio: {conc / seq:.1f}")


if __name__ == "__main__":
    main()
