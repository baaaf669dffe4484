"""Bandits vs uniform choice, in one run.

1. Simulated problems (stationary and drifting Bernoulli arms, several seeds): cumulative
   regret of each policy against the oracle, and as a ratio to uniform's regret.
2. The flywheel itself on the embedded default, same seeds and iterations: uniform selection
   at the default battle budget sets the goal (its final eval accuracy); the bandit runs at
   1, 2/3 and 1/2 of that budget. Battles needed = the budget at which the bandit's final
   accuracy reaches the goal (linear interpolation). The last line is ``ratio: X`` =
   uniform's battles / the bandit's, median over the seeds (at most 2: no extrapolation).

    python -m benchmarks.bandits                 # 3 seeds; part 2 takes ~15 min on 2 cores
    python -m benchmarks.bandits --sim-only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from flywheel.bandits import POLICIES, Bandit

SIM_POLICIES = [("uniform", {}), ("ucb", {}), ("thompson", {}), ("gaussian", {}), ("exp3", {}),
                ("ucb", {"discount": 0.9}), ("thompson", {"discount": 0.9}), ("ucb", {"window": 20})]


def simulate(policy: str, kw: dict, drifting: bool, seed: int, arms: int = 10, rounds: int = 300, k: int = 8) -> float:
    """Cumulative regret (expected reward of the best arm minus the chosen arms')."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(0.1, 0.9, arms)
    bandit = Bandit([str(i) for i in range(arms)], policy, **kw)
    regret = 0.0
    for r in range(rounds):
        if drifting:  # a random walk of every arm's mean, and a reshuffle halfway
            means = np.clip(means + rng.normal(0, 0.02, arms), 0.05, 0.95)
            if r == rounds // 2:
                means = rng.permutation(means)
        chosen = bandit.select(k, rng)
        rewards = rng.random(k) < means[chosen]
        bandit.update(chosen, rewards)
        regret += float(means.max() * k - means[chosen].sum())
    return regret


def part1(seeds: int) -> None:
    print("1. simulated bandits: cumulative regret vs the oracle (10 arms, 300 rounds of 8 pulls), "
          f"mean over {seeds} seeds; 'x uniform' = uniform's regret / the policy's")
    print(f"{'policy':<24}{'stationary':>12}{'x uniform':>11}{'drifting':>12}{'x uniform':>11}")
    base = {}
    for name, kw in SIM_POLICIES:
        label = name + "".join(f" {k}={v}" for k, v in kw.items())
        st = np.mean([simulate(name, kw, False, s) for s in range(seeds)])
        dr = np.mean([simulate(name, kw, True, s) for s in range(seeds)])
        if name == "uniform":
            base = {"st": st, "dr": dr}
        print(f"{label:<24}{st:>12.1f}{base['st'] / st:>11.2f}{dr:>12.1f}{base['dr'] / dr:>11.2f}")


FRACTIONS = (1.0, 2 / 3, 1 / 2)


def run_flywheel(policy: str, seed: int, battles: int, root: Path, extra: list[str]) -> float:
    """Final eval accuracy of the (first) target after a run with this policy and budget."""
    name = f"{policy}-s{seed}-b{battles}"
    cmd = [sys.executable, "-m", "flywheel.cli", "run", *extra, "--set", f"run.root={root}", "--set", f"run.name={name}",
           "--set", f"run.seed={seed}", "--set", f"select.policy={policy}",
           "--set", f"select.battles_per_iteration={battles}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = json.loads((root / name / "summary.json").read_text())["iterations"][-1]
    return next(v["accuracy"] for m, v in last["eval"].items())


def battles_needed(budgets: list[int], accuracy: list[float], goal: float) -> float:
    """The smallest budget at which ``accuracy`` reaches ``goal``, interpolated linearly between
    the measured budgets (ascending). Below the smallest budget tried we do not extrapolate."""
    pts = sorted(zip(budgets, accuracy))
    if pts[0][1] >= goal:
        return float(pts[0][0])
    for (b0, a0), (b1, a1) in zip(pts, pts[1:]):
        if a1 >= goal:
            return b0 + (b1 - b0) * (goal - a0) / (a1 - a0)
    return float("inf")


def part2(seeds: int, policy: str, extra: list[str]) -> None:
    from flywheel.config import load_config

    cfg = load_config(None, [o for o in extra if o != "--set"])
    full = cfg.select.battles_per_iteration
    budgets = [round(full * f) for f in FRACTIONS]
    print(f"\n2. the flywheel on the embedded default ({cfg.run.iterations} iterations): uniform at {full} battles per "
          f"iteration sets the goal (its final eval accuracy); {policy} runs at {budgets} battles per iteration; "
          "battles needed = the budget at which the final accuracy reaches the goal (interpolated; capped at the "
          f"smallest budget tried, so the ratio is at most {1 / min(FRACTIONS):.1f})")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="flywheel-bench-") as tmp:
        for seed in range(seeds):
            goal = run_flywheel("uniform", seed, full, Path(tmp), extra)
            accs = []
            for b in budgets:
                accs.append(run_flywheel(policy, seed, b, Path(tmp), extra))
            need = battles_needed(budgets, accs, goal)
            ratio = full / need if need > 0 else float("inf")
            ratios.append(ratio)
            shown = ", ".join(f"{b}: {a:.3f}" for b, a in zip(budgets, accs))
            print(f"seed {seed}: uniform@{full} reaches {goal:.3f}; {policy} final accuracy by budget {{{shown}}}; "
                  f"{policy} needs {need:.0f} battles per iteration -> {ratio:.2f}x")
    print(f"ratio: {statistics.median(ratios):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--policy", default="thompson", choices=[p for p in POLICIES if p != "uniform"])
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra flywheel --set overrides")
    args = ap.parse_args()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    part1(max(args.seeds, 5))
    if not args.sim_only:
        extra = [x for o in args.overrides for x in ("--set", o)]
        part2(args.seeds, args.policy, extra)


if __name__ == "__main__":
    main()
