"""Kill a run at random moments, resume it each time, and compare it with one never interrupted.

Per seed, ``flywheel run`` (a config, with ``--set`` overrides) is killed with SIGKILL (its whole
process group: no handler runs, Prefect's temporary server dies with it) after a delay drawn
uniformly from [0.5, --max-delay] s, then continued with ``flywheel run --resume`` (or started
again while it had not yet written its ``config.yaml``), and killed again, until a start finishes.
The finished run must equal a run of the same config never interrupted:

- ``summary.json`` the same in every figure (accuracy, Elo and its CIs, battles, training steps,
  losses, allocation, promotion), except each iteration's wall time and its ``usage``: the work
  done, which a kill can make larger (a generation or an API call cut short is made again; a
  stage cut short after generating reads its answers back from the cache), printed beside;
- every iteration's battle log holds exactly its plan's battles, once each, and its judgments
  exactly those that did not fail (an API call that stayed failed is recorded, never judged).

``--api``: the embedded default with an OpenAI-compatible opponent (``oracle``: right on every
prompt but ``sort``, where its server answers 500 every time, so those battles fail for good) and an
LLM judge for ``add`` and ``rev``, both servers on 127.0.0.1 (``tests/fakeapi.py``) answering one
call in ten with a 500 and one in ten with a malformed body (retried). Checked too: the failed
battles are the same, never judged, and the API key (from the environment) is in no file of the run.

Runs are compared at one thread (``OMP_NUM_THREADS=1``) so that training is the same bit for bit.
Each seed prints its kills, and ``identical`` or the differences.

    python -m benchmarks.kills --seeds 1,2,3                  # the embedded default, shortened
    python -m benchmarks.kills --config flows/recipes/tictactoe.yaml --seeds 1,2 \\
        --set select.battles_per_iteration=300 --set train.steps=100 --set run.iterations=2 \\
        --max-delay 25 --set train.checkpoint_steps=20   # kills inside training: it resumes from the last save
    python -m benchmarks.kills --api --seeds 1,2,3            # API players with faults
"""

from __future__ import annotations

import argparse
import contextlib
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

RUN = [sys.executable, "-m", "flywheel.face.cli", "run"]
SHORT = ["select.battles_per_iteration=600", "train.steps=100", "run.iterations=2"]
KEY_ENV = "FLYWHEEL_KILLS_API_KEY"
FAULTS = [500, None, None, None, "malformed", None, None, None, None, None]
IGNORED = {"run_id", "wall_s", "usage"}  # a run's id; timings; the work done (printed apart: ``work``)


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


def work(summary: dict) -> dict[str, float]:
    """The usage counters (generated, cached, calls, retries, failures, ...) summed over iterations and players."""
    out: dict[str, float] = {}
    for e in summary["iterations"]:
        for counters in (e.get("usage") or {}).values():
            for name, v in counters.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[name] = round(out.get(name, 0) + v, 6)
    return out


def logged_once(run_dir: Path) -> list[str]:
    """Iterations whose battle log or judgments do not hold exactly their plan's battles, once each."""
    from flywheel.ground.store import RunStore

    store, bad = RunStore(run_dir), []
    summary = json.loads((run_dir / "summary.json").read_text())
    for k in [e["iteration"] for e in summary["iterations"]][1:]:
        plan = sorted(s.battle_id for s in store.plan(k))
        battles = store.battles(k, "train")
        logged = sorted(b.battle_id for b in battles)
        played = {b.battle_id for b in battles if not b.error}  # a failed battle is never judged
        judged = set(store.judgments(k, "train"))
        if logged != plan:
            bad.append(f"iteration {k}: {len(logged)} battles logged ({len(set(logged))} distinct) for {len(plan)} planned")
        if judged != played:
            bad.append(f"iteration {k}: {len(judged)} judged for {len(played)} battles that did not fail")
    return bad


def command(config: str | None, overrides: list[str], root: Path, name: str) -> list[str]:
    sets = [a for o in [*overrides, f"run.root={root}", f"run.name={name}"] for a in ("--set", o)]
    return [*RUN, *([config] if config else []), *sets]


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
        start = [*RUN, "--resume", str(run_dir)] if resumable else cmd


def api_recipe(root: Path, opponent_url: str, judge_url: str) -> Path:
    """The embedded default with an OpenAI-compatible opponent next to ``generalist`` and an LLM judge
    for ``add`` and ``rev`` (the verifier for the rest), both read with the key in ``KEY_ENV``."""
    import yaml

    api = {"api_key_env": KEY_ENV, "max_retries": 6, "backoff_s": 0.01, "max_concurrency": 8, "timeout_s": 5}
    path = root / "api.yaml"
    path.write_text(yaml.safe_dump({
        "opponents": [{"name": "oracle", "kind": "openai", "model": "oracle-1", "base_urls": [opponent_url], **api},
                      {"name": "generalist", "kind": "transformers"}],
        "judge": {"kind": "hybrid", "llm_categories": ["add", "rev"],
                  "player": {"name": "judge", "kind": "openai", "model": "judge-1", "base_urls": [judge_url],
                             "max_new_tokens": 64, **api}}}))
    return path


def secrets_written(run_dir: Path, secret: str) -> list[str]:
    return [f"{p.relative_to(run_dir)}: holds the API key" for p in run_dir.rglob("*")
            if p.is_file() and secret.encode() in p.read_bytes()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None, help="recipe YAML (default: the embedded default)")
    ap.add_argument("--set", dest="overrides", action="append", default=None,
                    help=f"dotted.key=value (default: {' '.join(SHORT)})")
    ap.add_argument("--seeds", nargs="+", default=["1,2,3"], help="seeds of the kill times (not of the run)")
    ap.add_argument("--max-delay", type=float, default=40.0, help="longest time between a start and its kill (s)")
    ap.add_argument("--api", action="store_true", help="API players on 127.0.0.1 with faults (see the docstring)")
    args = ap.parse_args()
    if args.api and args.config:
        ap.error("--api runs the embedded default with API players; it takes no --config")
    seeds, overrides = parse_seeds(args.seeds), SHORT if args.overrides is None else args.overrides
    with tempfile.TemporaryDirectory(prefix="bench-kills-") as tmp, contextlib.ExitStack() as servers:
        root = Path(tmp)
        secret = f"sk-kills-{random.getrandbits(64):016x}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", KEY_ENV: secret}
        env.setdefault("PREFECT_HOME", str(root / "prefect"))
        config = args.config
        if args.api:
            from tests.fakeapi import FakeAPI

            oracle = servers.enter_context(FakeAPI("solver", fail_when=lambda text: text.startswith("sort ")))
            judge = servers.enter_context(FakeAPI("judge"))
            for server in (oracle, judge):  # 1 call in 10 a 500, 1 in 10 a malformed body: retried
                server.faults = FAULTS * 100_000
            config = str(api_recipe(root, oracle.url, judge.url))
        t0 = time.time()
        straight = subprocess.run(command(config, overrides, root, "straight"), env=env, capture_output=True,
                                  text=True)
        if straight.returncode != 0:
            raise SystemExit(f"the uninterrupted run failed:\n{straight.stderr[-3000:]}")
        print(f"uninterrupted run: {time.time() - t0:.0f} s; killed runs: SIGKILL after 0.5-{args.max_delay:g} s")
        ref = json.loads((root / "straight" / "summary.json").read_text())
        failed = 0
        for seed in seeds:
            name = f"killed-{seed}"
            kills = killed_run(command(config, overrides, root, name), root / name, random.Random(seed),
                               args.max_delay, env)
            got = json.loads((root / name / "summary.json").read_text())
            wrong = differences(ref, got) + logged_once(root / name) + secrets_written(root / name, secret)
            failed += bool(wrong)
            done = work(got)
            extra = ", ".join(f"{n} {v:g} vs {done.get(n, 0):g}" for n, v in work(ref).items() if done.get(n, 0) != v)
            print(f"seed {seed}: {kills} kill(s), " + ("identical" if not wrong else f"{len(wrong)} differences:")
                  + (f" (work, uninterrupted vs killed: {extra})" if extra else ""))
            for line in wrong[:20]:
                print("   ", line)
        print(f"{len(seeds) - failed} of {len(seeds)} killed runs identical to the uninterrupted one")
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
