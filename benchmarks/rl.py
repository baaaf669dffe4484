"""Imitation alone against imitation then reinforcement learning, at equal training compute, in
one run.

Two arms run the embedded default on the same worlds and run seeds:

- ``sft``: the embedded default (every iteration SFT on the curated winners' answers);
- ``rl``: the RL recipe (``flows/recipes/rl.yaml``: SFT iterations, then GRPO with the verifier's
  reward on the prompts the select stage chose).

Equal compute: both arms take ``train.steps`` optimizer steps per iteration of ``train.batch_size``
sequences (a GRPO batch is ``batch_size`` sampled answers, ``rl.generations`` per prompt), so
optimizer steps x sequences are equal; the GRPO arm also spends time sampling its answers (its wall
time is printed beside). Budgets (``--budgets``) are ``train.steps`` values.

Per budget and arm: the final eval accuracy of the version in use (eval split, reported only),
mean and 95% CI over the runs; the gain of ``rl`` over ``sft`` run by run (same world, same seed),
mean and 95% CI; per category, the share of the best opponent's accuracy. The goal: the RL arm at
least as good as the best opponent in every category (share >= 1.0), with the CI of the gain over
``sft`` above zero. The last line is ``ratio:`` the RL arm's mean accuracy over the SFT arm's at the
largest budget.

    python -m benchmarks.rl --suites 7,99 --pretrainings 1,2 --seeds 0      # held out
    python -m benchmarks.rl --quick                                          # 2 iterations, 300 steps
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.efficacy import by_category, figures, run_once
from benchmarks.stats import default_jobs, mean_ci, parse_seeds, run_all
from benchmarks.worlds import add_world_args, describe, worlds_of

RECIPE = Path(__file__).resolve().parent.parent / "flows" / "recipes" / "rl.yaml"
QUICK = ["run.iterations=2", "train.steps=300"]


def recipe_overrides() -> list[str]:
    """The RL recipe as ``--set`` overrides of the embedded default (every field it sets)."""
    import yaml

    out: list[str] = []

    def walk(node, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                out.append(f"{prefix}{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}")

    walk(yaml.safe_load(RECIPE.read_text()), "")
    return out


def arms() -> dict[str, list[str]]:
    """Each arm's overrides of the embedded default. ``rm`` and ``rm-control`` ask how much of the
    verifier's gain survives when the judge is seen only through a reward model: both train a
    reward model in the iteration before their GRPO one (the target carried forward there); ``rm``
    then learns from the model's rewards, ``rm-control`` from the verifier's."""
    rl = recipe_overrides()
    shape = [o for o in rl if not o.startswith("train.schedule=")]
    n = len(next(o for o in rl if o.startswith("train.schedule=")).split(","))
    schedule = "train.schedule=[" + ", ".join(["sft"] * (n - 2) + ["reward", "grpo"]) + "]"
    return {"sft": [], "rl": rl, "rm": [*shape, schedule, "train.rl.reward=reward_model"],
            "rm-control": [*shape, schedule]}


ARMS = arms()


def timed_run(seed: int, overrides: list[str], root: Path) -> tuple[dict, float]:
    t0 = time.perf_counter()
    summary = run_once(seed, overrides, root)
    return summary, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0"], help="run seeds, run.seed (default 0)")
    add_world_args(ap)
    ap.add_argument("--budgets", default="1200", help="train.steps values, comma-separated (default 1200)")
    ap.add_argument("--arms", default="sft,rl", help=f"arms, comma-separated, from {', '.join(ARMS)} (default sft,rl)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="an override for both arms")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="runs at a time (default: the CPU count)")
    ap.add_argument("--quick", action="store_true", help="2 iterations, 300 steps, the first seed")
    args = ap.parse_args()
    from flywheel.face.cli import QUIET_ENV

    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    seeds, budgets, common = parse_seeds(args.seeds), [int(b) for b in args.budgets.split(",")], list(args.overrides)
    chosen = {a: ARMS[a] for a in args.arms.split(",")}
    if args.quick:
        seeds, common, budgets = seeds[:1], common + QUICK[:1], [300]
    from flywheel.ground.config_io import load_config
    from flywheel.worlds.tinymodels import bootstrap

    worlds = worlds_of(args)
    for w in worlds:
        bootstrap(load_config(None, [*common, *w.overrides()]).world)
    print(f"arms: {'; '.join(f'{a}: ' + (' '.join(o) or 'the embedded default') for a, o in chosen.items())}; "
          f"budgets (train.steps) {budgets}; "
          f"run seeds {seeds} on {describe(worlds)}", flush=True)
    jobs = [(arm, b, w, s) for b in budgets for w in worlds for s in seeds for arm in chosen]
    with tempfile.TemporaryDirectory(prefix="bench-rl-") as tmp:
        done = run_all(timed_run, [(s, [*common, *chosen[arm], f"train.steps={b}", *w.overrides(),
                                        f"run.name={arm}-{b}-t{w.suite}-w{w.pretraining}-s{s}"], Path(tmp))
                                   for arm, b, w, s in jobs], args.jobs)
    results = {(arm, b, w, s): r for (arm, b, w, s), r in zip(jobs, done)}
    last_ratio = None
    for b in budgets:
        print(f"\n-- train.steps {b} --")
        acc: dict[str, list[float]] = {a: [] for a in chosen}
        secs: dict[str, list[float]] = {a: [] for a in chosen}
        shares: dict[str, dict[str, list[float]]] = {a: {} for a in chosen}
        gains: dict[str, list[float]] = {a: [] for a in chosen if a != "sft"}
        rm_accuracy: list[float] = []
        for w in worlds:
            for s in seeds:
                row = {}
                for arm in chosen:
                    summary, wall = results[(arm, b, w, s)]
                    target = summary["targets"][0]
                    f = figures(summary, target)
                    row[arm] = f["accuracy"]
                    acc[arm].append(f["accuracy"])
                    secs[arm].append(wall)
                    for c, (last, _, top, _) in by_category(summary, target).items():
                        if top > 0:
                            shares[arm].setdefault(c, []).append(last / top)
                    rm = [t["reward_model"]["accuracy"] for e in summary["iterations"]
                          for t in e.get("training", {}).values() if t.get("reward_model")]
                    if arm == "rm" and rm and rm[-1] is not None:
                        rm_accuracy.append(rm[-1])
                    print(f"{w.label}, seed {s}, {arm}: accuracy {f['accuracy']:.3f} (best opponent "
                          f"{f['best_opponent']:.3f}), worst category {f['worst_category_name']} "
                          f"{f['worst_category']:.2f} of the best opponent's, {wall:.0f} s")
                for arm in gains:
                    if "sft" in row:
                        gains[arm].append(row[arm] - row["sft"])
        for arm in chosen:
            m, h = mean_ci(acc[arm])
            print(f"{arm:<4} final eval accuracy {m:.3f} +- {h:.3f} over {len(acc[arm])} runs; median wall time "
                  f"{statistics.median(secs[arm]):.0f} s")
        for arm, g in gains.items():
            if g:
                m, h = mean_ci(g)
                print(f"gain of {arm} over sft: {m:+.3f} +- {h:.3f} (95% CI, paired by world and seed; "
                      f"{'above zero' if m - h > 0 else 'not above zero'})")
        if rm_accuracy:
            m, h = mean_ci(rm_accuracy)
            print(f"rm: the reward model's pair accuracy on validation pairs {m:.3f} +- {h:.3f}")
        print(f"{'category':<10}" + "".join(f"{arm + ' / best opponent':>24}" for arm in chosen))
        every = {arm: True for arm in chosen}
        for c in sorted(next(iter(shares.values()))):
            cells = []
            for arm in chosen:
                cm, ch = mean_ci(shares[arm][c])
                cells.append(f"{cm:.2f} +- {ch:.2f}")
                every[arm] &= statistics.fmean(shares[arm][c]) >= 1.0
            print(f"{c:<10}" + "".join(f"{x:>24}" for x in cells))
        for arm in chosen:
            print(f"goal ({arm} at least the best opponent in every category, mean over runs): "
                  f"{'met' if every[arm] else 'not met'}")
        if "rl" in acc and "sft" in acc:
            last_ratio = statistics.fmean(acc["rl"]) / statistics.fmean(acc["sft"])
    if last_ratio is not None:
        print(f"ratio: {last_ratio:.2f}")


if __name__ == "__main__":
    main()
