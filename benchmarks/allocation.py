"""Compute allocation across targets (ModelArena) vs uniform shares, on the embedded world.

Three targets start from the same pre-trained ``student`` weights and learn at different rates
(learning rates 3e-3, 6e-4 and 1e-4). Each run has the same total budget of training steps
(steps per target x targets x iterations) and the same seed for both policies. Per iteration we
record the training steps spent so far (all targets) and the best target's eval accuracy.

The figure: the budget uniform allocation spends to reach its final best-target accuracy,
divided by the budget the allocator spends to reach that same accuracy (linear interpolation
between iterations; 0 if it never does), median over the seeds.

    python -m benchmarks.allocation [--seeds 0 1 2] [--iterations 4] [--steps 150] [--battles 600]
                                    [--policy selective|proportional|successive-halving] [--signal loss|accuracy]

Iterations run through flywheel.stages.iteration.run_to, as the Prefect flow runs them (every
stage, the merge included), each stage a plain call, without a Prefect server.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bandits import battles_needed
from flywheel.config import FlywheelConfig
from flywheel.records import versioned
from flywheel.stages.context import close_run, open_run
from flywheel.stages.iteration import run_to
from flywheel.store import read_json
from flywheel.tinymodels import bootstrap

TARGETS = [("fast", 3e-3), ("mid", 6e-4), ("slow", 1e-4)]


def run_once(policy: str, seed: int, args: argparse.Namespace, root: Path) -> list[tuple[int, float]]:
    """(training steps spent so far, best target's eval accuracy) after each iteration."""
    base = str(Path(args.models_dir) / "student")
    cfg = FlywheelConfig.model_validate({
        "run": {"root": str(root), "name": f"{policy}-seed{seed}", "iterations": args.iterations, "seed": seed},
        "world": {"models_dir": args.models_dir},
        "targets": [{"name": n, "path": base, "learning_rate": lr} for n, lr in TARGETS],
        "select": {"battles_per_iteration": args.battles},
        "train": {"steps": args.steps},
        "rating": {"bootstrap_rounds": 0},
        "allocate": {"policy": policy, "signal": args.signal},
    })
    ctx = open_run(cfg)
    try:
        run_to(ctx, args.iterations)
    finally:
        close_run(ctx)
    curve, spent = [], 0
    for e in read_json(ctx.store.summary_path)["iterations"]:
        spent += sum(e["train_steps"].values())
        best = max(e["eval"][versioned(t, e["iteration"])]["accuracy"] for t, _ in TARGETS)
        curve.append((spent, best))
    return curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--steps", type=int, default=150, help="training steps per target per iteration (uniform)")
    ap.add_argument("--battles", type=int, default=600, help="battles per target per iteration (uniform)")
    ap.add_argument("--policy", default="selective", help="allocate.policy compared with uniform")
    ap.add_argument("--signal", default="loss", choices=["accuracy", "loss"],
                    help="what learning rates measure (allocate.signal); uniform ignores it")
    ap.add_argument("--models-dir", default="data/models")
    args = ap.parse_args()
    bootstrap(FlywheelConfig(world={"models_dir": args.models_dir}).world, only=["student", "calc", "scribe", "generalist"])
    total = args.steps * len(TARGETS) * args.iterations
    print(f"3 targets (lr {', '.join(f'{n}={lr:g}' for n, lr in TARGETS)}), {args.iterations} iterations, "
          f"total budget {total} training steps; policy {args.policy} (signal {args.signal}) vs uniform")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-alloc-") as tmp:
        for seed in args.seeds:
            t0 = time.perf_counter()
            uni = run_once("uniform", seed, args, Path(tmp))
            ours = run_once(args.policy, seed, args, Path(tmp))
            goal = uni[-1][1]
            # The budget at which each curve first reaches the goal (interpolated; inf if never).
            b_uni, b_ours = (battles_needed([b for b, _ in c], [a for _, a in c], goal) for c in (uni, ours))
            ratio = 0.0 if b_ours == float("inf") else 1.0 if b_ours == b_uni else b_uni / b_ours if b_ours else float("inf")
            ratios.append(ratio)
            fmt = lambda c: " ".join(f"{b}:{a:.3f}" for b, a in c)  # noqa: E731
            print(f"seed {seed}: uniform  {fmt(uni)}\n        {args.policy:<8} {fmt(ours)}\n"
                  f"        goal {goal:.3f}: uniform {b_uni:.0f} steps, {args.policy} {b_ours:.0f} steps, "
                  f"ratio {ratio:.2f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
