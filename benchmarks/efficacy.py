"""Learning efficacy of the embedded default: does the target surpass its teachers and forget
nothing? Each seed runs the embedded default (``flywheel run``'s config, with ``--set``
overrides; in this process's stages, without Prefect) to the end; then, on the eval split
(reported only; nothing here steers the run), the version each target has **in use** (promoted)
after each iteration is compared with the opponents:

- ``overall``: its accuracy minus the best opponent's overall accuracy (goal: >= 0);
- ``worst category``: min over categories of its accuracy / the best opponent's there (goal: >= 0.9;
  categories where no opponent scores are left out);
- ``forgetting``: the largest fall of a category's accuracy below iteration 0 (goal: <= 0.02);
- ``worst step``: the largest fall of overall accuracy from one in-use version to the next
  (goal: <= 0.02).

Per run one line per goal, then, for the tuning worlds and for the held-out worlds apart, the mean
with a 95% CI over the runs and how many runs meet each goal; then per category, pooled over the
runs, the in-use version's accuracy at iteration 0 and at the end beside the best opponent's, the
chance that a model exactly as good as the best opponent there would pass the 90% bar on one run's
eval prompts, and the chance that one exactly as good as iteration 0 there would stay within the
forgetting goal's 2 points of it (what the eval split can resolve).

Every run seed (``--seeds``, run.seed) runs on every world: task suite (``--suites``,
world.tasks.seed) times pre-training (``--pretrainings``, world.seed); see benchmarks/worlds.py.
The defaults were chosen on suite 1234 and pre-training 0 (run seeds 0-4); which worlds are tuning
and which held out (new prompts, new pre-trained models, nothing chosen there) is the registry's
word, benchmarks/worlds.yaml, and each row is labelled from it.

    python -m benchmarks.efficacy --suites 7,99 --pretrainings 2 --seeds 0,1,2   # held out: ~4 min a run
    python -m benchmarks.efficacy --set curate.include_target_wins=false          # an ablation (tuning world)
    python -m benchmarks.efficacy --quick      # 2 seeds, 2 iterations, 300 steps
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.stats import default_jobs, mean_ci, parse_seeds, quiet_runs, run_all
from benchmarks.worlds import add_world_args, describe, worlds_of

QUICK = ["run.iterations=2", "train.steps=300"]  # --quick, applied after every --set
GOALS = {"overall": (">=", 0.0), "worst_category": (">=", 0.9), "forgetting": ("<=", 0.02),
         "worst_step": ("<=", 0.02)}


def run_once(seed: int, overrides: list[str], root: Path, config: Path | None = None, timings: bool = False) -> dict:
    """One run of ``config`` (default: the embedded default); returns its summary.json, with
    ``timings`` also the manifest's wall time of each stage (``{"iter-0002/train": seconds, ...}``)."""
    from flywheel.config.loading import load_config
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.iteration import run_to
    from flywheel.worlds.tinymodels import bootstrap

    cfg = load_config(config, [*overrides, f"run.seed={seed}", f"run.root={root}"])
    bootstrap(cfg.world)
    ctx = open_run(cfg)
    try:
        run_to(ctx, cfg.run.iterations)
    finally:
        close_run(ctx)
    summary = json.loads(ctx.store.summary_path.read_text())
    if timings:
        summary["timings"] = json.loads(ctx.store.manifest_path.read_text()).get("timings", {})
    return summary


def figures(summary: dict, target: str) -> dict[str, float]:
    """The four goal figures of ``target``'s in-use versions (see the module's docstring)."""
    from flywheel.ground.reports import in_use_eval

    entries = summary["iterations"]
    curve = [in_use_eval(summary, e, target) for e in entries]
    opponents = entries[-1]["opponents_eval"]
    best = max(v["accuracy"] for v in opponents.values())
    last, first = curve[-1], curve[0]
    cats = sorted(last["accuracy_by_category"])
    ratios = {}
    for c in cats:
        top = max(v["accuracy_by_category"].get(c, 0.0) for v in opponents.values())
        if top > 0:
            ratios[c] = last["accuracy_by_category"][c] / top
    fell = {c: first["accuracy_by_category"][c] - last["accuracy_by_category"][c] for c in cats}
    return {
        "overall": last["accuracy"] - best,
        "worst_category": min(ratios.values()),
        "worst_category_name": min(ratios, key=lambda c: ratios[c]),
        "forgetting": max(0.0, *fell.values()),
        "forgot": ", ".join(c for c in cats if fell[c] > GOALS["forgetting"][1] + 1e-9) or "-",
        "worst_step": max(0.0, *(a["accuracy"] - b["accuracy"] for a, b in zip(curve, curve[1:]))),
        "accuracy": last["accuracy"],
        "best_opponent": best,
    }


def by_category(summary: dict, target: str, split: str = "eval") -> dict[str, tuple[float, float, float, str]]:
    """Per category: the in-use version's accuracy on ``split`` (``eval`` or ``validation``) after
    the last iteration and at iteration 0, and the best opponent's accuracy there with its name.
    Empty on the validation split where the summary has no opponent's validation figures."""
    from flywheel.ground.reports import has_opponent_validation, in_use_eval

    entries = summary["iterations"]
    first, last = in_use_eval(summary, entries[0], target), in_use_eval(summary, entries[-1], target)
    opponents = entries[-1]["opponents_eval"]
    if split == "validation":
        if not has_opponent_validation(summary):
            return {}
        first, last = first["validation"], last["validation"]
        opponents = {o: v["validation"] for o, v in opponents.items()}
    out = {}
    for c in sorted(last["accuracy_by_category"]):
        name = max(opponents, key=lambda o: opponents[o]["accuracy_by_category"].get(c, 0.0))
        out[c] = (last["accuracy_by_category"][c], first["accuracy_by_category"][c],
                  opponents[name]["accuracy_by_category"].get(c, 0.0), name)
    return out


def chance_at_least(n: int, p: float, bar: float) -> float:
    """The chance that a model that gets each of ``n`` prompts right with probability ``p``
    (independently) scores an accuracy of at least ``bar``: the binomial tail P(S >= bar * n)."""
    need = max(0, math.ceil(bar * n - 1e-9))
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(need, n + 1))


def equal_passes(n: int, top: float, scale: float = 1.0) -> float:
    """The chance that a model ``scale`` x as good as an opponent who scored ``top`` on ``n`` prompts
    (each prompt right independently) scores at least 0.90 of the opponent's count there."""
    return chance_at_least(n, min(1.0, scale * top), GOALS["worst_category"][1] * round(top * n) / n)


def count_by_category(prompts) -> dict[str, int]:
    """Per category, how many of ``prompts`` it has."""
    out: dict[str, int] = {}
    for p in prompts:
        out[p.category] = out.get(p.category, 0) + 1
    return out


def holds_still(n: int, first: float) -> float:
    """The chance that a new version exactly as good as iteration 0 in a category (accuracy
    ``first`` on ``n`` prompts), its answers right or wrong independently of iteration 0's, does not
    fall more than the forgetting goal's 2 points below it: what the eval split can resolve of
    forgetting where a category holds still."""
    return chance_at_least(n, first, (round(first * n) - GOALS["forgetting"][1] * n) / n)


SHARE_SLACK = 1e-3


def reaches(share: float) -> bool:
    """Whether a share of the best opponent's accuracy meets the worst-category goal (0.90). Summaries
    round accuracies to 4 decimals, so 9 prompts of 60 against 10 reads 0.1500 / 0.1667 = 0.8998:
    the slack reads that as the 0.90 it is, and the nearest share under 0.90 on 60 prompts (53 / 59,
    0.8983) stays under. NaN (no learnable category) does not reach it."""
    return share >= GOALS["worst_category"][1] - SHARE_SLACK


def meets(name: str, value: float) -> bool:
    if name == "worst_category":
        return reaches(value)
    op, goal = GOALS[name]
    return value >= goal - 1e-9 if op == ">=" else value <= goal + 1e-9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0,1,2,3,4"], help="run seeds, run.seed (default 0-4)")
    add_world_args(ap)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="a config override, dotted.key=value")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="runs at a time (default: the CPU count)")
    ap.add_argument("--quick", action="store_true", help="2 seeds (the first two given), 2 iterations, 300 steps")
    args = ap.parse_args()
    quiet_runs()
    seeds = parse_seeds(args.seeds)
    overrides = list(args.overrides)
    if args.quick:
        seeds = seeds[:2]
        overrides += QUICK
    from flywheel.config.loading import load_config
    from flywheel.worlds.tinymodels import bootstrap

    worlds = worlds_of(args)
    for w in worlds:  # once per world, before the runs share its models
        cfg = load_config(None, [*overrides, *w.overrides()])
        bootstrap(cfg.world)
    print(f"embedded default{' with ' + ' '.join(overrides) if overrides else ''}: {cfg.run.iterations} iterations, "
          f"{cfg.select.battles_per_iteration} battles and {cfg.train.steps} steps per iteration; run seeds {seeds} "
          f"on {describe(worlds)}", flush=True)
    t0 = time.perf_counter()
    runs = [(w, s) for w in worlds for s in seeds]
    with tempfile.TemporaryDirectory(prefix="bench-efficacy-") as tmp:
        summaries = run_all(run_once, [(s, [*overrides, *w.overrides(), f"run.name=t{w.suite}-w{w.pretraining}-s{s}"],
                                        Path(tmp)) for w, s in runs], args.jobs)
    per: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}  # tuning worlds' runs, held-out worlds' runs
    for (w, seed), summary in zip(runs, summaries):
        for target in summary["targets"]:
            f = figures(summary, target)
            for name in GOALS:
                per[w.held_out].setdefault(name, []).append(f[name])
            marks = "  ".join(f"{n} {f[n]:+.3f}{'' if meets(n, f[n]) else ' (missed)'}" for n in GOALS)
            print(f"{w.label}, seed {seed} {target}: accuracy {f['accuracy']:.3f} vs best opponent "
                  f"{f['best_opponent']:.3f}  {marks}  (worst category {f['worst_category_name']}; fell by > 2 points: "
                  f"{f['forgot']})")
    print(f"{len(runs)} runs in {time.perf_counter() - t0:.0f} s ({args.jobs} processes)")
    for held_out, figs in per.items():
        if not figs:
            continue
        print(f"\n{'held-out worlds' if held_out else 'tuning worlds'} ({len(figs['overall'])} runs)")
        print(f"{'goal':<16}{'target':>10}{'mean +- 95% CI':>20}{'runs meeting it':>20}")
        for name, (op, goal) in GOALS.items():
            m, h = mean_ci(figs[name])
            ok = sum(meets(name, v) for v in figs[name])
            print(f"{name:<16}{op + ' ' + format(goal, 'g'):>10}{f'{m:+.3f} +- {h:.3f}':>20}"
                  f"{f'{ok} of {len(figs[name])}':>20}")
    for held_out in (False, True):
        these = [summary for (w, _), summary in zip(runs, summaries) if w.held_out == held_out]
        if these:
            print(f"\n-- {'held-out worlds' if held_out else 'tuning worlds'} --")
            category_table(these, cfg)


def category_table(summaries: list[dict], cfg) -> None:
    """Per category, pooled over the runs: where a target really stands, beside the resolution
    of the eval split (what the worst-category goal can tell on one run). The best opponent is
    each run's own (each world pre-trains its own opponents); its accuracy is the mean over runs."""
    from flywheel.worlds.world import world_pools

    sizes = count_by_category(world_pools(cfg.world).eval)
    for target in summaries[0]["targets"]:
        cats = [by_category(s, target) for s in summaries]
        print(f"{target} per category, mean +- 95% CI over the {len(summaries)} runs (in-use version; eval split):")
        print(f"{'category':<10}{'prompts':>8}{'iteration 0':>18}{'last':>18}{'best opponent':>20}{'last / best':>13}"
              f"{'an equal model passes':>23}{'one that holds passes':>23}")
        equal = held = 1.0
        for c in cats[0]:
            first, last = mean_ci([x[c][1] for x in cats]), mean_ci([x[c][0] for x in cats])
            top, n = statistics.fmean(x[c][2] for x in cats), sizes[c]
            names = sorted({x[c][3] for x in cats})
            name = names[0] if len(names) == 1 else "best"
            # a model exactly as good as the best opponent here, its answers right or wrong
            # independently of theirs
            eq = equal_passes(n, top) if top > 0 else 1.0
            hold = holds_still(n, first[0])
            equal, held = equal * eq, held * hold
            share = f"{last[0] / top:.2f}" if top > 0 else "-"
            print(f"{c:<10}{n:>8}{f'{first[0]:.3f} +- {first[1]:.3f}':>18}{f'{last[0]:.3f} +- {last[1]:.3f}':>18}"
                  f"{f'{name} {top:.3f}':>20}{share:>13}{eq:>23.2f}{hold:>23.2f}")
        print(f"on one run, a model exactly as good as the best opponent in every category meets the worst-category "
              f"goal with probability {equal:.2f}; one exactly as good as iteration 0 in every category (it learnt "
              f"nothing, forgot nothing) meets the forgetting goal with probability {held:.2f} (binomial: each "
              f"prompt right independently)")


if __name__ == "__main__":
    main()
