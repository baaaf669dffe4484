"""Does the flywheel's cost grow linearly with the work? One iteration's arena stages (select ->
battle -> judge per round, then rate and curate) at 1,000, 10,000 and 100,000 battles, with
instant stand-in players and the verifier judge, so that no model time is counted: what is left
is the flywheel's own bookkeeping (plans, shards, logs, caches, bandits, ratings, datasets).

Two paths, each size of each in a fresh spawned process (its peak memory is its own):

- **stages**: the stage functions called in order in the process (``InProcess``), timed from the
  first select to the end of curate; the baseline before them is not timed.
- **prefect**: the real flow, ``flows.flywheel_flow.run_flywheel`` as ``flywheel run`` calls it
  (its task runner, tags, artifacts, assets, events; Prefect's console lines off as the CLI has
  them), one iteration, on a temporary Prefect server with an empty database of its own
  (``prefect_test_harness``; ``flywheel run`` without PREFECT_API_URL also starts a temporary
  local server, on the database in PREFECT_HOME). The same players and judge; the target also
  names a tiny untrained model (pre-trained 0 steps) and ``train.steps=0``, so the train stage
  loads and saves it and trains nothing. Timed: the
  server's start (apart); the whole flow (baseline, ``ensure_models``, the arena stages as
  Prefect tasks and mapped shard tasks, train, merge, evaluate, promote, allocate); and within
  it the arena tasks alone, from the end of the baseline's last task to the end of iteration 1's
  curate (its datasets announcement included), read from the task runs the server recorded.

Fixed costs (imports done inside the timed code, first writes, Prefect's per-task overhead, the
flow's stages other than the arena ones) are measured by a run at a tiny size (``--fixed``, 10
battles) on each path. For each path the benchmark prints the raw ratio, throughput (battles /
seconds) at the largest size / at the smallest, and the ratio net of fixed costs: the same with
each size's throughput taken as (battles - battles at the tiny size) / (seconds - seconds at the
tiny size), medians over seeds. Net above 1 means the later battles cost less than the earlier
ones; goal: net >= 0.8, and peak memory under 2 GB at 100k. Peak memory is this process's: the
Prefect server is another process. The last line, ``ratio: X``, is the net ratio of the arena tasks
through Prefect, or through the stages alone when only ``--paths stages`` runs. (The whole flow's
net ratio is printed too, but its smallest size adds only a second or so over the tiny run, within
the noise: read the marginal throughputs beside it.)

    python -m benchmarks.scale                      # 1k, 10k, 100k; seed 0; both paths
    python -m benchmarks.scale --sizes 1000,10000 --seeds 0,1 --paths stages
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.stats import parse_seeds, run_all
from flywheel.ground.records import Generation, Prompt
from flywheel.players.player import Player, PlayerSetup, SamplingParams

SKILL = {"target": 0.4, "sage": 0.7, "novice": 0.2}
# By module name, not __name__: a spawned process imports this file as __mp_main__, which the
# run's config.yaml (and a flow's resume) could not import again.
KIND = "benchmarks.scale:InstantPlayer"
PATHS = ("stages", "prefect")


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


def config(battles: int, seed: int, root: Path, flow: bool = False):
    """The run's config; ``flow``: also what the whole flow needs past the arena stages (one
    iteration, a tiny untrained model for the target's train stage, no training steps)."""
    from flywheel.config.loading import load_config

    target = f"{{name: target, kind: '{KIND}'" + (f", path: '{root}/models/stub'" if flow else "") + "}"
    overrides = [
        f"run.root={root}", f"run.name=scale-{battles}", f"run.seed={seed}", f"targets=[{target}]",
        f"opponents=[{{name: sage, kind: '{KIND}'}}, {{name: novice, kind: '{KIND}'}}]",
        "judge.kind=verifier", f"select.battles_per_iteration={battles}",
    ]
    if flow:
        overrides += ["run.iterations=1", f"world.models_dir={root}/models", "train.steps=0",
                      "world.models=[{name: stub, steps: 0, n_layer: 1, n_embd: 8, n_head: 1}]"]
    return load_config(None, overrides)


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one_size(battles: int, seed: int) -> dict[str, float]:
    """Stages path: seconds and peak memory (MiB, this process) of one iteration's arena stages."""
    from flywheel.learning.allocation import Allocation
    from flywheel.run.context import close_run, open_run, read_stage
    from flywheel.stages import battle, curate, judge, rate, select
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
    return {"battles": played, "seconds": seconds, "peak_mib": peak_mib()}


def one_flow(battles: int, seed: int) -> dict[str, float]:
    """Prefect path: the seconds of the server's start, of the whole flow (one iteration) and of
    its arena tasks, and the peak memory (MiB, this process; the server is another)."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.flywheel_flow import run_flywheel
    from flywheel.ground.store import RunStore

    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(battles, seed, Path(tmp), flow=True)
        t0 = time.perf_counter()
        with prefect_test_harness(server_startup_timeout=120):
            server = time.perf_counter() - t0
            t0 = time.perf_counter()
            run_dir = run_flywheel(cfg)
            seconds = time.perf_counter() - t0
            arena = arena_seconds()
        played = len(RunStore(Path(run_dir)).battles(1, "train"))
    return {"battles": played, "seconds": seconds, "arena": arena, "server": server, "peak_mib": peak_mib()}


def arena_seconds(wait_s: float = 60.0) -> float:
    """Iteration 1's arena tasks, from the end of the baseline's last task (``allocate-i0``) to
    the end of its curate task and of the datasets announcement after it, as the server recorded
    them (its records may trail the flow's return by a moment: waits for them)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    names = ["allocate-i0", "curate-i1", "datasets-i1"]
    deadline = time.monotonic() + wait_s
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=names)))
            ends = {r.name: r.end_time for r in runs if r.end_time is not None}
            if {"allocate-i0", "curate-i1"} <= ends.keys():
                return (max(t for n, t in ends.items() if n != "allocate-i0") - ends["allocate-i0"]).total_seconds()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server recorded no end for {sorted(set(names[:2]) - ends.keys())}")
            time.sleep(0.2)


def net_rate(rows: list[dict], fixed: list[dict], key: str = "seconds") -> float:
    """Battles per second past the tiny run's: (battles - its battles) / (seconds - its seconds),
    medians over seeds; nan where the seconds do not exceed the tiny run's (at sizes so small
    that the battles cost less than the noise in the fixed costs)."""
    b = statistics.median(r["battles"] for r in rows) - statistics.median(r["battles"] for r in fixed)
    s = statistics.median(r[key] for r in rows) - statistics.median(r[key] for r in fixed)
    return b / s if s > 0 and b > 0 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000", help="battles per iteration, comma separated")
    ap.add_argument("--seeds", nargs="+", default=["0"], help="seeds (each size runs once per seed)")
    ap.add_argument("--fixed", type=int, default=10, help="the tiny size whose run measures the fixed costs")
    ap.add_argument("--paths", default=",".join(PATHS), help="stages, prefect, or both (comma separated)")
    args = ap.parse_args()
    from flywheel.face.cli import QUIET_ENV

    # the spawned runs inherit these: the CLI's quiet defaults, and its console without Prefect's
    # flow- and task-run lines (flywheel run without -v)
    for key, value in {**QUIET_ENV, "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL": "CRITICAL",
                       "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "CRITICAL"}.items():
        os.environ.setdefault(key, value)
    sizes, seeds = sorted(set(parse_seeds([args.sizes]))), parse_seeds(args.seeds)
    paths = [p for p in PATHS if p in args.paths.replace(",", " ").split()]
    if not paths or not 0 < args.fixed < min(sizes):
        raise SystemExit(f"--paths: some of {', '.join(PATHS)}; --fixed: between 0 and the smallest size")
    lo, hi = sizes[0], sizes[-1]
    runs: dict[str, dict[int, list[dict]]] = {}
    for path in paths:
        fn = one_size if path == "stages" else one_flow
        calls = [(n, s) for n in [args.fixed, *sizes] for s in seeds]
        got = [run_all(fn, [c], 2)[0] for c in calls]  # one spawned process per run, one at a time
        runs[path] = {n: [r for (m, _), r in zip(calls, got) if m == n] for n in [args.fixed, *sizes]}

    def both(path: str, key: str) -> tuple[float, float]:
        """The raw and the net ratio of a path's timing ``key``."""
        by, rate = runs[path], {n: statistics.median(r["battles"] / r[key] for r in runs[path][n]) for n in (lo, hi)}
        return rate[hi] / rate[lo], net_rate(by[hi], by[args.fixed], key) / net_rate(by[lo], by[args.fixed], key)

    ratios: list[tuple[str, float, float]] = []
    if "stages" in runs:
        print("stages alone: one iteration's arena stages called in one process")
        print(f"{'battles':>8} {'seed':>4} {'seconds':>8} {'battles/s':>10} {'peak MiB':>9}")
        for rows in runs["stages"].values():
            for s, r in zip(seeds, rows):
                print(f"{r['battles']:>8} {s:>4} {r['seconds']:>8.1f} {r['battles'] / r['seconds']:>10.0f}"
                      f" {r['peak_mib']:>9.0f}")
        ratios.append(("stages alone", *both("stages", "seconds")))
    if "prefect" in runs:
        print("through Prefect: the flywheel flow, one iteration (server start apart; arena: its arena tasks)")
        print(f"{'battles':>8} {'seed':>4} {'server s':>8} {'flow s':>8} {'battles/s':>10} {'arena s':>8}"
              f" {'battles/s':>10} {'peak MiB':>9}")
        for rows in runs["prefect"].values():
            for s, r in zip(seeds, rows):
                print(f"{r['battles']:>8} {s:>4} {r['server']:>8.1f} {r['seconds']:>8.1f}"
                      f" {r['battles'] / r['seconds']:>10.0f} {r['arena']:>8.1f} {r['battles'] / r['arena']:>10.0f}"
                      f" {r['peak_mib']:>9.0f}")
        ratios += [("Prefect, arena tasks", *both("prefect", "arena")),
                   ("Prefect, whole flow", *both("prefect", "seconds"))]

    fixed = {p: {k: statistics.median(r[k] for r in runs[p][args.fixed]) for k in ("seconds", "arena", "server")
                 if k in runs[p][args.fixed][0]} for p in paths}
    said = [f"stages {fixed['stages']['seconds']:.1f} s"] if "stages" in fixed else []
    if "prefect" in fixed:
        server = statistics.median(r["server"] for rows in runs["prefect"].values() for r in rows)
        said.append(f"Prefect: server start {server:.1f} s (median of every run), then the flow "
                    f"{fixed['prefect']['seconds']:.1f} s (its arena tasks {fixed['prefect']['arena']:.1f} s)")
    print(f"fixed costs, the runs at {args.fixed} battles (median over seeds): " + "; ".join(said))
    if len(sizes) > 2:  # the cost of the last battles added, free of fixed costs (imports, first writes)
        mid = sizes[-2]
        for path in paths:
            secs = {n: statistics.median(r["seconds"] for r in runs[path][n]) for n in (mid, hi)}
            if secs[hi] > secs[mid]:
                print(f"{path}{' (whole flow)' if path == 'prefect' else ''}: marginal throughput from {mid} to "
                      f"{hi} battles: {(hi - mid) / (secs[hi] - secs[mid]):.0f} battles/s")
    print(f"throughput at {hi} / at {lo} battles (median over seeds): raw, and net of the fixed costs (each size's "
          f"battles and seconds less those at {args.fixed}); goal: net >= 0.8, peak memory < 2 GB")
    for name, raw, net in ratios:
        print(f"  {name:<22} raw {raw:6.2f}   net {net:6.2f}")
    if any(math.isnan(net) for _, _, net in ratios):
        print("  (net nan: a size's seconds did not exceed the tiny run's; its battles cost less than the noise "
              "in the fixed costs: use larger sizes)")
    # the arena's work through Prefect, net of fixed costs (the whole flow's net ratio rests on the
    # few seconds its smallest size adds over the tiny run: within the noise)
    headline = {name: net for name, _, net in ratios}
    print(f"ratio: {headline.get('Prefect, arena tasks', ratios[0][2]):.2f}")


if __name__ == "__main__":
    main()
