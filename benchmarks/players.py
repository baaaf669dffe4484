"""The openai player: 32 requests in flight vs one at a time, in one run, per seed.

A loopback OpenAI-compatible server (its own process) answers each call after a latency drawn from
a log-normal law with median ``--latency`` and log-sd ``--jitter`` (real APIs' latencies have long
tails; ``--jitter 0`` answers every call after exactly ``--latency``). Per seed, the calls' latencies
and the prompts (drawn from the task suite) come from that seed; the same player class runs them
with ``max_concurrency`` 32 and 1 (sequential calls).

    python -m benchmarks.players --seeds 0,1,2     # 256 calls concurrently, 64 sequentially, per seed

Prints both throughputs (calls per second) per seed and ends with ``ratio: X``, the median over the
seeds of concurrent / sequential, with the geometric mean and its 95% CI.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import random
import statistics
import time

from benchmarks.stats import mean_ci, parse_seeds
from flywheel.players import SamplingParams, create_player
from flywheel.worlds.tasks import build_suite
from tests.fakeapi import FakeAPI


def throughput(url: str, prompts, concurrency: int) -> float:
    player = create_player("openai", "bench", model="m", base_urls=[url], api_key_env="FLYWHEEL_BENCH_KEY",
                           max_concurrency=concurrency)
    t0 = time.perf_counter()
    gens = player.generate(prompts, SamplingParams(max_new_tokens=8))
    took = time.perf_counter() - t0
    assert all(g.ok for g in gens), [g.error for g in gens if not g.ok][:3]
    return len(prompts) / took


def latencies(seed: int, median: float, jitter: float, n: int) -> list[float]:
    """``n`` call latencies (seconds), log-normal around ``median``."""
    rng = random.Random(seed)
    return [median * math.exp(rng.gauss(0.0, jitter)) if jitter else median for _ in range(n)]


def _serve(delays: list[float], port_out, stop) -> None:
    with FakeAPI("solver", delay_s=lambda n: delays[(n - 1) % len(delays)]) as server:
        port_out.put(server.url)
        stop.wait()


def one_seed(seed: int, args, train) -> tuple[float, float]:
    """(concurrent, sequential) calls per second on this seed's latencies and prompts."""
    n = args.calls + args.sequential_calls + 8
    # The server runs in its own process, so that it does not share the client's interpreter lock.
    ctx = mp.get_context("fork")
    port_out, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve, args=(latencies(seed, args.latency, args.jitter, n), port_out, stop),
                       daemon=True)
    proc.start()
    prompts = random.Random(seed).sample(train, args.calls)
    try:
        url = port_out.get(timeout=30)
        throughput(url, prompts[:8], args.concurrency)  # warm-up: imports, first connections
        conc = throughput(url, prompts, args.concurrency)
        seq = throughput(url, prompts[: args.sequential_calls], 1)
    finally:
        stop.set()
        proc.join(timeout=10)
    return conc, seq


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0,1,2"])
    ap.add_argument("--latency", type=float, default=0.2, help="median seconds per call")
    ap.add_argument("--jitter", type=float, default=0.5, help="log-sd of the latency (0: every call the same)")
    ap.add_argument("--calls", type=int, default=256)
    ap.add_argument("--sequential-calls", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    if args.sequential_calls > args.calls:
        raise SystemExit("--sequential-calls: at most --calls")
    os.environ.setdefault("FLYWHEEL_BENCH_KEY", "bench")
    train, _ = build_suite(1234, 50, 2)
    print(f"server latency: median {args.latency * 1000:.0f} ms per call, log-sd {args.jitter}")
    ratios = []
    for seed in seeds:
        conc, seq = one_seed(seed, args, train)
        ratios.append(conc / seq)
        print(f"seed {seed}: sequential {seq:7.2f} calls/s ({args.sequential_calls} calls, max_concurrency=1); "
              f"{args.concurrency}-way concurrent {conc:7.2f} calls/s ({args.calls} calls): {conc / seq:.1f}x")
    m, h = mean_ci([math.log(r) for r in ratios])
    print(f"geometric mean {math.exp(m):.1f} (95% CI {math.exp(m - h):.1f}-{math.exp(m + h):.1f}) over {len(seeds)} seed(s)")
    print(f"ratio: {statistics.median(ratios):.1f}")


if __name__ == "__main__":
    main()
