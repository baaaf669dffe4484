"""Kill a run at random moments, resume it each time, and compare it with one never interrupted.

Per seed, ``flywheel run`` (a config, with ``--set`` overrides) is killed with SIGKILL (its whole
process group: no handler runs, Prefect's temporary server dies with it) after a delay drawn
uniformly from [0.5, --max-delay] s, then continued with ``flywheel run --resume`` (or started
again while it had not yet written its ``config.yaml``), and killed again, until a start finishes.
The finished run must equal a run of the same config never interrupted:

- ``summary.json`` the same in every figure (accuracy, Elo and its CIs, battles, training steps,
  losses, allocation, promotion), except each iteration's wall time and the usage log's count of
  answers read from the answer cache (a stage cut short after generating reads its answers back
  from the cache on resume);
- every iteration's battle log and judgments hold exactly its plan's battles, once each.

Runs are compared at one thread (``OMP_NUM_THREADS=1``) so that training is the same bit for bit.
Each seed prints its kills, and ``identical`` or the differences.

    python -m benchmarks.kills --seeds 1,2,3                  # the embedded default, shortened
    python -m benchmarks.kills --config flows/recipes/tictactoe.yaml --seeds 1,2 --max-delay 60
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stats import parse_seeds

SHORT = ["select.battles_per_iteration=600", "train.steps=100", "run.iterations=2"]
IGNORED = {"run_id", "cached", "wall_s"}  # a run's id; answers read from the answer cache; timings


def differences(a, b, path: str = "") -> list[str]:
    """Where two summaries differ (keys in ``IGNORED`` left out), one line each."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k in IGNORED:
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'the killed run' if k in b else 'the straight run'}")
            else:
                out += differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def logged_once(run_dir: Path) -> list[str]:
    """Iterations whose battle log or judgments do not hold exactly their plan's battles, once each."""
    from flywheel.store import RunStore

    store, bad = RunStore(run_dir), []
    summary = json.loads((run_dir / "summary.json").read_text())
    for k in [e["iteration"] for e in summary["iterations"]][1:]:
        plan = sorted(s.battle_id for s in store.plan(k))
        logged = sorted(b.battle_id for b in store.battles(k, "train"))
        if logged != plan or set(store.judgments(k, "train")) != set(plan):
            bad.append(f"iteration {k}: {len(logged)} battles logged for {len(plan)} planned")
    return bad


def command(config: str | None, overrides: list[str], root: Path, name: str) -> list[str]:
    sets = [a for o in [*overrides, f"run.root={root}", f"run.name={name}"] for a in ("--set", o)]
    return [sys.executable, "-m", "flywheel.cli", "run", *([config] if config else []), *sets]


def killed_run(cmd: list[str], run_dir: Path, rng: random.Random, max_delay: float, env: dict) -> int:
    """Start ``cmd``, SIGKILL it after a random delay and resume, until one start finishes; the kills."""
    kills = 0
    start = cmd
    while True:
        proc = subprocess.Popen(start, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            _, err = proc.communicate(timeout=rng.uniform(0.5, max_delay))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            kills += 1
        else:
            if proc.returncode != 0:
                raise SystemExit(f"{run_dir.name}: exit {proc.returncode} after {kills} kills:\n{err.decode()[-3000:]}")
            return kills
        resumable = (run_dir / "config.yaml").exists()
        start = [*cmd[:4], "--resume", str(run_dir)] if resumable else cmd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None, help="recipe YAML (default: the embedded default)")
    ap.add_argument("--set", dest="overrides", action="append", default=None,
                    help=f"dotted.key=value (default: {' '.join(SHORT)})")
    ap.add_argument("--seeds", nargs="+", default=["1,2,3"], help="seeds of the kill times (not of the run)")
    ap.add_argument("--max-delay", type=float, default=40.0, help="longest time between a start and its kill (s)")
    args = ap.parse_args()
    seeds, overrides = parse_seeds(args.seeds), SHORT if args.overrides is None else args.overrides
    with tempfile.TemporaryDirectory(prefix="bench-kills-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        env.setdefault("PREFECT_HOME", str(root / "prefect"))
        t0 = time.time()
        straight = subprocess.run(command(args.config, overrides, root, "straight"), env=env, capture_output=True,
                                  text=True)
        if straight.returncode != 0:
            raise SystemExit(f"the uninterrupted run failed:\n{straight.stderr[-3000:]}")
        print(f"uninterrupted run: {time.time() - t0:.0f} s; killed runs: SIGKILL after 0.5-{args.max_delay:g} s")
        ref = json.loads((root / "straight" / "summary.json").read_text())
        failed = 0
        for seed in seeds:
            name = f"killed-{seed}"
            kills = killed_run(command(args.config, overrides, root, name), root / name, random.Random(seed),
                               args.max_delay, env)
            got = json.loads((root / name / "summary.json").read_text())
            wrong = differences(ref, got) + logged_once(root / name)
            failed += bool(wrong)
            print(f"seed {seed}: {kills} kill(s), " + ("identical" if not wrong else f"{len(wrong)} differences:"))
            for line in wrong[:20]:
                print("   ", line)
        print(f"{len(seeds) - failed} of {len(seeds)} killed runs identical to the uninterrupted one")
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
