"""Does the flywheel's cost grow linearly with the work? One iteration's arena stages (select ->
battle -> judge per round, then rate and curate) at 1,000, 10,000 and 100,000 battles, with
instant stand-in players and the verifier judge, so that no model time is counted: what is left
is the flywheel's own bookkeeping (plans, shards, logs, caches, bandits, ratings, datasets).

Each size runs in a fresh spawned process (its peak memory is its own). Prints battles per
second and peak resident memory per size, and ends with ``ratio: X`` = throughput at the largest
size / throughput at the smallest (goal: X >= 0.8, and peak memory under 2 GB at 100k).

    python -m benchmarks.scale                      # 1k, 10k, 100k; seed 0
    python -m benchmarks.scale --sizes 1000,10000 --seeds 0,1
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.stats import parse_seeds, run_all
from flywheel.players.base import Player, PlayerSetup, SamplingParams
from flywheel.records import Generation, Prompt

SKILL = {"target": 0.4, "sage": 0.7, "novice": 0.2}


class InstantPlayer(Player):
    """A stand-in that answers at once: right (the prompt's reference) on a fixed share of
    prompts, its ``SKILL``, chosen by a hash of its name and the prompt; else a wrong answer."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.skill = SKILL.get(name.split("@")[0], 0.5)

    @classmethod
    def from_config(cls, pc, name: str, setup: PlayerSetup) -> InstantPlayer:
        return cls(name)

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        out = []
        for p in prompts:
            h = int.from_bytes(hashlib.blake2b(f"{self.name}|{p.id}".encode(), digest_size=4).digest(), "big")
            right = h / 2**32 < self.skill
            out.append(Generation(self.name, p.id, (p.reference or "") if right else "wrong"))
        return out


def config(battles: int, seed: int, root: Path):
    from flywheel.config import load_config

    kind = f"{__name__}:InstantPlayer"
    return load_config(None, [
        f"run.root={root}", f"run.name=scale-{battles}", f"run.seed={seed}",
        f"targets=[{{name: target, kind: '{kind}'}}]",
        f"opponents=[{{name: sage, kind: '{kind}'}}, {{name: novice, kind: '{kind}'}}]",
        "judge.kind=verifier", f"select.battles_per_iteration={battles}",
    ])


def one_size(battles: int, seed: int) -> dict[str, float]:
    """Seconds and peak memory (MiB, this process) of one iteration's arena stages at ``battles``."""
    from flywheel.allocation import Allocation
    from flywheel.stages import battle, curate, judge, rate, select
    from flywheel.stages.context import close_run, open_run, read_stage
    from flywheel.stages.iteration import InProcess, run_baseline

    with tempfile.TemporaryDirectory() as tmp:
        ctx = open_run(config(battles, seed, Path(tmp)))
        try:
            run_baseline(ctx)  # the eval of the starting versions and the first allocation: not timed
            plan = read_stage(ctx.store, 0, "allocate", Allocation)
            runner, run_dir, k = InProcess(), str(ctx.store.root), 1
            t0 = time.perf_counter()
            for rnd in range(1, ctx.cfg.select.rounds + 1):
                select.select_round(ctx, k, rnd, plan.battles)
                n = battle.shard_count(ctx, k, rnd)
                runner.shards("play-shard", battle.play_shard, run_dir, k, rnd, n)
                battle.battle_round(ctx, k, rnd)
                runner.shards("judge-shard", judge.judge_shard, run_dir, k, rnd, n)
                judge.judge_round(ctx, k, rnd)
            rate.rate_arena(ctx, k)
            curate.curate_datasets(ctx, k)
            seconds = time.perf_counter() - t0
            played = len(ctx.store.battles(k, "train"))
        finally:
            close_run(ctx)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {"battles": played, "seconds": seconds, "peak_mib": peak_mib}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000", help="battles per iteration, comma separated")
    ap.add_argument("--seeds", nargs="+", default=["0"], help="seeds (each size runs once per seed)")
    args = ap.parse_args()
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # the spawned runs inherit it
    sizes, seeds = parse_seeds([args.sizes]), parse_seeds(args.seeds)
    calls = [(n, s) for n in sizes for s in seeds]
    results = [run_all(one_size, [c], 2)[0] for c in calls]  # one spawned process per run, one at a time
    print(f"{'battles':>8} {'seed':>4} {'seconds':>8} {'battles/s':>10} {'peak MiB':>9}")
    rates: dict[int, list[float]] = {}
    for (n, s), r in zip(calls, results):
        rate = r["battles"] / r["seconds"]
        rates.setdefault(n, []).append(rate)
        print(f"{r['battles']:>8} {s:>4} {r['seconds']:>8.1f} {rate:>10.0f} {r['peak_mib']:>9.0f}")
    lo, hi = min(sizes), max(sizes)
    if len(sizes) > 2:  # the cost of the last battles added, free of fixed costs (imports, first writes)
        mid = sorted(sizes)[-2]
        secs = {n: statistics.median(r["seconds"] for (m, _), r in zip(calls, results) if m == n) for n in (mid, hi)}
        print(f"marginal throughput from {mid} to {hi} battles: {(hi - mid) / (secs[hi] - secs[mid]):.0f} battles/s")
    ratio = statistics.median(rates[hi]) / statistics.median(rates[lo])
    print(f"throughput at {hi} / at {lo} battles (median over seeds); goal >= 0.8, peak memory < 2 GB")
    print(f"ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
