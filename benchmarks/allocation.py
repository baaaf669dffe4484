"""Compute allocation across targets (ModelArena) vs uniform shares, on the embedded world.

The scenario a user meets: three targets start from the same pre-trained ``student`` weights and
differ in learning rate by at most 3x (``--lrs``, default 3e-3, 1.7e-3, 1e-3), as when a team
tries a few fine-tuning settings at once. Both policies get the same total budget of training
steps per iteration (``--steps`` per target x targets) and battles, and the same seed. Per
iteration we record the training steps spent so far (all targets) and the best target's eval
accuracy (the eval split only reports: the allocator reads the validation split).

The figure of a seed: the isotonic (monotone) fit of each policy's best-target accuracy against
the steps spent, then the steps uniform needs for its final accuracy / the steps the policy
needs for the same accuracy (benchmarks/stats.py). The last line is ``ratio: X``, the median
over the seeds. The oracle's bound is printed beside it: an oracle that knew which target ends
best would give it every step, so it would reach uniform's final accuracy with 1/n of the steps
(n = 3 targets) if accuracy depended only on a target's own steps and battles.

The policy (``selective``, top 1) and signal (``accuracy``, the config's default) were fixed
before this benchmark was run on any seed; defaults are checked on seeds 0-4, and anyone can
rerun other seeds: ``--seeds 5,6,7,8,9``.

    python -m benchmarks.allocation [--seeds 0,1,2,3,4] [--iterations 3] [--steps 150] [--battles 600]
                                    [--policy selective|proportional|successive-halving] [--signal accuracy|loss]
    python -m benchmarks.allocation --quick       # 2 seeds, 2 iterations, smaller budgets

Iterations run through flywheel.stages.iteration.run_to, as the Prefect flow runs them (every
stage, the merge included), each stage a plain call, without a Prefect server.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.stats import budget_ratio, default_jobs, isotonic, mean_ci, parse_seeds, run_all
from flywheel.config import FlywheelConfig
from flywheel.reports import in_use_eval
from flywheel.stages.context import close_run, open_run
from flywheel.stages.iteration import run_to
from flywheel.store import read_json
from flywheel.tinymodels import bootstrap


def run_once(policy: str, seed: int, targets: list[tuple[str, float]], args: argparse.Namespace,
             root: Path) -> list[tuple[int, float, str]]:
    """(training steps spent so far, best target's eval accuracy, that target) per iteration; with
    ``sharing: mixed`` the target's label also says whether the next iteration pools traces."""
    base = str(Path(args.models_dir) / "student")
    cfg = FlywheelConfig.model_validate({
        "run": {"root": str(root), "name": f"{policy}-seed{seed}", "iterations": args.iterations, "seed": seed},
        "world": {"models_dir": args.models_dir},
        "targets": [{"name": n, "path": base, "learning_rate": lr} for n, lr in targets],
        "select": {"battles_per_iteration": args.battles},
        "train": {"steps": args.steps, "weight_decay": 0.0},
        "rating": {"bootstrap_rounds": 0},
        "allocate": {"policy": policy, "signal": args.signal, "sharing": args.sharing},
        # as the README's figures were measured, before the embedded default's self-distillation,
        # promotion and weight decay
        "curate": {"include_target_wins": False, "include_target_ties": False},
        "evaluate": {"promotion": "always"},
    })
    ctx = open_run(cfg)
    try:
        run_to(ctx, args.iterations)
    finally:
        close_run(ctx)
    curve, spent = [], 0
    summary = read_json(ctx.store.summary_path)
    for e in summary["iterations"][1:]:
        spent += sum(e["train_steps"].values())
        acc = {t: in_use_eval(summary, e, t)["accuracy"] for t, _ in targets}
        best = max(acc, key=lambda t: acc[t])
        pooled = {True: ", next pooled", False: ", next own"}.get((e.get("allocation") or {}).get("pooled"), "")
        curve.append((spent, acc[best], best + pooled))
    return curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0,1,2,3,4"], help="e.g. 5,6,7,8,9 (default 0-4)")
    ap.add_argument("--lrs", default="3e-3,1.7e-3,1e-3", help="the targets' learning rates")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150, help="training steps per target per iteration (uniform)")
    ap.add_argument("--battles", type=int, default=600, help="battles per target per iteration (uniform)")
    ap.add_argument("--policy", default="selective", help="allocate.policy compared with uniform")
    ap.add_argument("--signal", default="accuracy", choices=["accuracy", "loss"],
                    help="what learning rates measure (allocate.signal); uniform ignores it")
    ap.add_argument("--sharing", default="competitive", choices=["competitive", "cooperative", "federated", "mixed"],
                    help="allocate.sharing, for both policies")
    ap.add_argument("--models-dir", default="data/models")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="runs at a time (default: the CPU count)")
    ap.add_argument("--quick", action="store_true", help="2 seeds (the first two given), 2 iterations, 80 steps, "
                    "300 battles")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    if args.quick:
        seeds, args.iterations, args.steps, args.battles = seeds[:2], 2, 80, 300
    lrs = [float(x) for x in args.lrs.split(",")]
    targets = [(f"t{i + 1}", lr) for i, lr in enumerate(lrs)]
    bootstrap(FlywheelConfig(world={"models_dir": args.models_dir}).world, only=["student", "calc", "scribe", "generalist"])
    total = args.steps * len(targets) * args.iterations
    print(f"{len(targets)} targets from student (lr {', '.join(f'{n}={lr:g}' for n, lr in targets)}), "
          f"{args.iterations} iterations, {total} training steps in all, sharing {args.sharing}; policy {args.policy} "
          f"(signal {args.signal}) "
          f"vs uniform; seeds {seeds}", flush=True)
    arms = ("uniform", args.policy)
    best: dict[str, list[list[float]]] = {a: [] for a in arms}
    ratios, marks = [], []
    budgets: list[int] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-alloc-") as tmp:
        calls = [(a, seed, targets, args, Path(tmp)) for seed in seeds for a in arms]
        results = dict(zip([(a, seed) for a, seed, *_ in calls], run_all(run_once, calls, args.jobs)))
    for seed in seeds:
        curves = {a: results[a, seed] for a in arms}
        budgets = [b for b, _, _ in curves["uniform"]]
        for a in arms:
            best[a].append([acc for _, acc, _ in curves[a]])
        ratio, mark = budget_ratio(budgets, best["uniform"][-1], best[args.policy][-1])
        ratios.append(ratio)
        marks.append(mark)
        for a in arms:
            show = " ".join(f"{b}:{acc:.3f}({t})" for b, acc, t in curves[a])
            print(f"seed {seed}: {a:<12} {show}  isotonic {' '.join(f'{x:.3f}' for x in isotonic(best[a][-1]))}")
        print(f"        ratio {mark}{ratio:.2f}")
    print(f"{len(calls)} runs in {time.perf_counter() - t0:.0f} s ({args.jobs} processes)")
    print("\nbest target's eval accuracy by training steps spent, mean +- 95% CI over the seeds")
    print(f"{'steps':>8}" + "".join(f"{a:>22}" for a in arms))
    for i, b in enumerate(budgets):
        cells = ["{:.3f} +- {:.3f}".format(*mean_ci([c[i] for c in best[a]])) for a in arms]
        print(f"{b:>8}" + "".join(f"{c:>22}" for c in cells))
    m, h = mean_ci([math.log(r) for r in ratios])
    print(f"ratio per seed: {', '.join(f'{k}{r:.2f}' for k, r in zip(marks, ratios))}; geometric mean "
          f"{math.exp(m):.2f} (95% CI {math.exp(m - h):.2f}-{math.exp(m + h):.2f}); "
          f"oracle bound ~{len(targets):.2f} (every step on the target that ends best)")
    print(f"ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
