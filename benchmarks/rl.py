"""Imitation alone against learning from the target's own answers, at equal training compute, in
one run.

Every arm runs the embedded default's 4 iterations on the same worlds and run seeds; the arms differ
in the method of the last iterations (``arms()``): ``sft`` (the embedded default), ``rl`` (the RL
recipe, ``flows/recipes/rl.yaml``: expert iteration on every train prompt in iterations 3 and 4), ``grpo``, ``rloo``,
``odpo`` (on-policy DPO), expert iteration's variants, and the reward model's ``rm`` / ``rm-control``.

Equal compute: every arm takes ``train.steps`` optimizer steps per iteration of ``train.batch_size``
sequences (a GRPO batch is ``batch_size`` sampled answers, ``rl.generations`` per prompt), so
optimizer steps x sequences are equal; the answers each arm generated (sampled before training and
by a trainer) are printed per run, with its wall time. Budgets (``--budgets``) are ``train.steps``
values.

Per budget and arm: the final eval accuracy of the version in use (eval split, reported only),
mean and 95% CI over the runs; the gain of each arm over ``sft`` run by run (same world, same seed),
mean and 95% CI, and the same gain on the validation split (the one a choice on a tuning world
reads); per category, the share of the best opponent's accuracy; the commonest answer's
accuracy per category (a category where no model beats it is not learnable in the world), and on
how many runs the arm reaches 0.90 of the best opponent in every learnable category, on how many it
forgets nothing (no category's eval accuracy more than 0.02 below the starting version's), and both;
then the same two read on the validation split (the opponents' own validation figures, the
commonest answer's there), what a tuning rule reads; per split, the chance that a model exactly as
good as the best opponent would reach its 0.90 on a run and on more than half of them
(``benchmarks.goal_chance``). The last line
is ``ratio:`` the ``rl`` arm's mean accuracy over the ``sft`` arm's at the largest budget (without
an ``rl`` arm, the last arm named; with no ``sft`` arm, no ratio).

    python -m benchmarks.rl --registered rl --arms sft,rl          # the held-out worlds registered for it
    python -m benchmarks.rl --seeds 0 1 --arms sft,rl,grpo,rloo,odpo,expert    # the tuning world
    python -m benchmarks.rl --quick                                # 2 iterations, 300 steps
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.efficacy import GOALS, by_category, figures, reaches, run_once
from benchmarks.goal_chance import LEARNABLE_MARGIN, chance_line, equal_model_passes, learnable, prompts_by_category
from benchmarks.stats import default_jobs, mean_ci, parse_seeds, quiet_runs, run_all
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


# GRPO as the RL recipe ran it before expert iteration won on the tuning world: three SFT iterations,
# then GRPO at the learning rate and temperature chosen then on the tuning world's validation split.
GRPO = ["train.rl.reward=verifier", "train.rl.generations=8", "train.rl.temperature=0.7",
        "train.rl.learning_rate=2e-5"]


GAP_MIX = 4.0  # the gap-weighted arms' train.gap_mix (chosen on the tuning worlds: docs/rl.md)
GAP_PICK = 4.0  # rl-pick's train.rl.gap_pick


def ratio_arm(named: list[str]) -> str | None:
    """The arm whose mean accuracy the ``ratio:`` line sets over ``sft``'s: ``rl`` where it runs,
    else the last arm named other than ``sft``; None without ``sft`` or another arm."""
    others = [a for a in named if a != "sft"]
    if "sft" not in named or not others:
        return None
    return "rl" if "rl" in others else others[-1]


def arms(iterations: int = 4, recipe: bool = False) -> dict[str, list[str]]:
    """Each arm's overrides of the embedded default (4 iterations, the last one's method varies).
    ``rl`` is the RL recipe (``flows/recipes/rl.yaml``), ``rl-thinned`` the recipe with its curated
    rows thinned by the target's own pass rates (``train.rl.thin_known``); ``grpo`` GRPO with dynamic sampling and
    its prompts picked online (``train.rl.pick_online``), ``grpo-shuffled`` in shuffled passes over
    the prompts whose sampled answers differed, ``grpo-plain`` without dynamic sampling; ``rloo``; ``expert`` expert
    iteration on the battles' prompts (the curated rows and the target's own passed answers in one
    SFT phase), ``expert-train`` on every train prompt in the last iteration (the recipe's until it
    took the last two), ``expert-every`` expert iteration from the first iteration on; ``odpo`` SFT, then DPO on pairs of its own passed and
    failed answers. ``rm`` and ``rm-control`` ask how much of the verifier's gain survives when the
    judge is seen only through a reward model: both train a reward model in the iteration before
    their GRPO one (the target carried forward there); ``rm`` then learns from the model's rewards,
    ``rm-control`` from the verifier's. ``sft-gap`` and ``rl-gap`` are ``sft`` and ``rl`` with
    their SFT rows weighted by each category's gap to the best opponent on validation
    (``train.gap_mix`` at ``GAP_MIX``); ``rl-pick`` is ``rl`` with its own answers' prompts picked by
    learnability times that gap (``train.rl.gap_pick`` at ``GAP_PICK``).

    With ``recipe`` (``--recipe``: every arm starts from a recipe of ``iterations`` iterations
    instead of the embedded default), ``rl`` is that recipe as written and ``sft`` imitates in
    every iteration."""
    def last(*methods: str) -> str:
        return "train.schedule=[" + ", ".join(["sft"] * (iterations - len(methods)) + list(methods)) + "]"

    return {"sft": [last("sft")] if recipe else [], "rl": [] if recipe else recipe_overrides(),
            "rl-thinned": [*([] if recipe else recipe_overrides()), "train.rl.thin_known=true"],
            "sft-gap": [*([last("sft")] if recipe else []), f"train.gap_mix={GAP_MIX}"],
            "rl-gap": [*([] if recipe else recipe_overrides()), f"train.gap_mix={GAP_MIX}"],
            "rl-pick": [*([] if recipe else recipe_overrides()), f"train.rl.gap_pick={GAP_PICK}"],
            "grpo": [*GRPO, last("grpo")],
            "grpo-plain": [*GRPO, last("grpo"), "train.rl.dynamic_sampling=false"],
            "grpo-shuffled": [*GRPO, last("grpo"), "train.rl.pick_online=false"],
            "rloo": [*GRPO, last("rloo")], "expert": [*GRPO, last("sft+expert")],
            "expert-train": [*GRPO, last("sft+expert"), "train.rl.prompts=train"],
            "expert-every": [*GRPO, "train.schedule=[sft+expert]"],
            "odpo": [*GRPO, last("sft+onpolicy_dpo")],
            "rm": [*GRPO, last("reward", "grpo"), "train.rl.reward=reward_model"], "rm-control": [*GRPO, last("reward", "grpo")]}


ARMS = arms()


def run_overrides(arm: list[str], common: list[str], steps: int, world: list[str], name: str) -> list[str]:
    """One run's overrides: the arm's own, then ``--set``'s (so that ``--set`` can change a field the
    arm sets, e.g. ``train.rl.generations``), then its steps, its world and its name."""
    return [*arm, *common, f"train.steps={steps}", *world, f"run.name={name}"]


def guess_by_category(overrides: list[str], split: str = "eval", recipe: Path | None = None) -> dict[str, float]:
    """Per category, the accuracy on ``split`` (``eval`` or ``validation``) of always giving the
    commonest answer of the train split at the prompt's level (what a model that learnt nothing but
    the answers' distribution scores), in the world that ``recipe`` with ``overrides`` (every one the
    runs took: a pool's size or a validation split's changes the prompts) makes. A category where no
    model beats it by ``LEARNABLE_MARGIN`` is not learnable in this world."""
    from collections import Counter

    from flywheel.config.loading import load_config
    from flywheel.worlds.world import world_pools

    splits = world_pools(load_config(recipe, overrides).world)
    common = {}
    for cell in {(p.category, p.level) for p in splits.train}:
        refs = Counter(p.reference for p in splits.train if (p.category, p.level) == cell)
        common[cell] = refs.most_common(1)[0][0]
    out: dict[str, list[bool]] = {}
    for p in splits.eval if split == "eval" else splits.validation:
        out.setdefault(p.category, []).append(p.reference == common.get((p.category, p.level)))
    return {c: sum(v) / len(v) for c, v in out.items()}


def two_goals(summary: dict, target: str, guess: dict[str, float], split: str = "eval") -> tuple[float, bool] | None:
    """The second goal read on ``split`` (``eval`` or ``validation``) for ``target``'s version in use:
    the lowest share of the best opponent's accuracy over the learnable categories (those where the
    best opponent scores ``LEARNABLE_MARGIN`` above the commonest answer's ``guess``; NaN where none
    is), and whether no category ends more than the forgetting goal's points below iteration 0.
    None where the summary has no opponent figures on ``split``."""
    cats = by_category(summary, target, split)
    if not cats:
        return None
    shares = [last / top for c, (last, _, top, _) in cats.items() if learnable(top, guess.get(c, 0.0))]
    kept = all(first - last <= GOALS["forgetting"][1] + 1e-9 for last, first, _, _ in cats.values())
    return (min(shares) if shares else float("nan")), kept


def validation_accuracy(summary: dict, target: str) -> float | None:
    """The validation accuracy of the version ``target`` kept after the run's last iteration."""
    from flywheel.ground.reports import in_use_eval

    return (in_use_eval(summary, summary["iterations"][-1], target).get("validation") or {}).get("accuracy")


def keep_summaries(folder: Path, summaries: dict[str, dict]) -> None:
    """Each run's summary.json as ``folder/<name>.json``, so that a reader can check the figures."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, summary in summaries.items():
        (folder / f"{name}.json").write_text(json.dumps(summary, indent=1))


def share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def own_answers(summary: dict, target: str, steps: int) -> str:
    """The last iteration's learning from the target's own answers: the share of flat groups among
    those sampled before training and among a GRPO/RLOO trainer's, and the answers generated per
    optimizer step (both counts)."""
    e = summary["iterations"][-1]
    t = e.get("training", {}).get(target) or {}
    sampled, rewards = t.get("sampling") or {}, t.get("rewards") or {}
    if not sampled and not rewards:
        return ""
    parts = []
    if sampled:
        parts.append(f"sampled {sampled['answers']} answers, flat groups {share(sampled['flat_groups'])}")
    if rewards:
        parts.append(f"trainer's flat groups {share(rewards['flat_groups'])}")
    answers = sampled.get("answers", 0) + rewards.get("scored", 0) + rewards.get("failed", 0)
    return "; " + ", ".join(parts) + f", {answers} answers generated, {answers / max(steps, 1):.1f} per optimizer step"


def timed_run(seed: int, overrides: list[str], root: Path, config: Path | None = None) -> tuple[dict, float]:
    t0 = time.perf_counter()
    summary = run_once(seed, overrides, root, config, timings=True)
    return summary, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0"], help="run seeds, run.seed (default 0)")
    add_world_args(ap)
    ap.add_argument("--budgets", default=None,
                    help="train.steps values, comma-separated (default: the config's, 1200 for the embedded default)")
    ap.add_argument("--arms", default="sft,rl", help=f"arms, comma-separated, from {', '.join(ARMS)} (default sft,rl)")
    ap.add_argument("--recipe", type=Path, default=None,
                    help="a recipe every arm starts from instead of the embedded default (its rl arm is the recipe "
                         "as written, its sft arm imitates in every iteration), e.g. flows/recipes/smollm2_rl.yaml")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="an override for every arm, applied after the arm's own")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="runs at a time (default: the CPU count)")
    ap.add_argument("--quick", action="store_true", help="2 iterations, 300 steps, the first seed")
    ap.add_argument("--summaries", type=Path, default=None,
                    help="a folder to keep each run's summary.json in, named after the run "
                         "(<arm>-<steps>-t<suite>-w<pre-training>-s<seed>.json), with each stage's wall "
                         "time under 'timings' (e.g. iter-0002/train: the seconds an equal-time arm's steps are "
                         "read from)")
    args = ap.parse_args()
    quiet_runs()
    worlds = worlds_of(args)  # --registered sets the seeds too
    seeds, common = parse_seeds(args.seeds), list(args.overrides)
    if args.quick:
        seeds, common, args.budgets = seeds[:1], common + QUICK[:1], "300"
    from flywheel.config.loading import load_config
    from flywheel.worlds.tinymodels import bootstrap

    base_cfg = load_config(args.recipe, common)
    iterations = base_cfg.run.iterations
    budgets = [int(b) for b in args.budgets.split(",")] if args.budgets else [base_cfg.train.steps]
    every = arms(iterations, recipe=args.recipe is not None)
    chosen = {a: every[a] for a in args.arms.split(",")}
    for w in worlds:
        bootstrap(load_config(args.recipe, [*common, *w.overrides()]).world)
    base = str(args.recipe) if args.recipe else "the embedded default"
    print(f"arms: {'; '.join(f'{a}: ' + (' '.join(o) or base) for a, o in chosen.items())}; "
          + (f"then for every arm: {' '.join(common)}; " if common else "")
          + f"budgets (train.steps) {budgets}; "
          f"run seeds {seeds} on {describe(worlds)}", flush=True)
    jobs = [(arm, b, w, s) for b in budgets for w in worlds for s in seeds for arm in chosen]
    with tempfile.TemporaryDirectory(prefix="bench-rl-") as tmp:
        names = [f"{arm}-{b}-t{w.suite}-w{w.pretraining}-s{s}" for arm, b, w, s in jobs]
        calls = [(s, run_overrides(chosen[arm], common, b, w.overrides(), name), Path(tmp), args.recipe)
                 for (arm, b, w, s), name in zip(jobs, names)]
        done = run_all(timed_run, calls, args.jobs)
    results = {(arm, b, w, s): r for (arm, b, w, s), r in zip(jobs, done)}
    if args.summaries is not None:
        keep_summaries(args.summaries, {f"{arm}-{b}-t{w.suite}-w{w.pretraining}-s{s}": summary
                                        for (arm, b, w, s), (summary, _) in results.items()})
    last_ratio = None
    for b in budgets:
        print(f"\n-- train.steps {b} --")
        acc: dict[str, list[float]] = {a: [] for a in chosen}
        secs: dict[str, list[float]] = {a: [] for a in chosen}
        shares: dict[str, dict[str, list[float]]] = {a: {} for a in chosen}
        learnable_shares: dict[str, list[float]] = {a: [] for a in chosen}  # per run: the worst learnable category's
        kept: dict[str, list[bool]] = {a: [] for a in chosen}  # per run: no category forgotten
        on_validation: dict[str, list[tuple[float, bool]]] = {a: [] for a in chosen}  # the two, read on validation
        unread = dict.fromkeys(chosen, 0)  # runs whose opponents have no validation figures (a conversation world)
        guessed: dict[str, list[float]] = {}
        gains: dict[str, list[float]] = {a: [] for a in chosen if a != "sft"}
        val_gains: dict[str, list[float]] = {a: [] for a in chosen if a != "sft"}  # what a tuning choice reads
        flat: dict[str, list[float]] = {a: [] for a in chosen}  # the last iteration's trainer's flat groups
        rm_accuracy: list[float] = []
        equal: dict[str, list[float]] = {"eval": [], "validation": []}  # per run: an equal model's chance
        for w in worlds:
            world = [*common, *w.overrides()]  # the world the runs took: a seed changes none of its prompts
            guess = guess_by_category(world, recipe=args.recipe)
            guess_val = guess_by_category(world, "validation", args.recipe)
            counts = {split: prompts_by_category(world, split, args.recipe) for split in equal}
            for s in seeds:
                first = results[(next(iter(chosen)), b, w, s)][0]  # the opponents' figures: the same in every arm
                for split, g in (("eval", guess), ("validation", guess_val)):
                    chance = equal_model_passes(first, first["targets"][0], g, counts[split], split)
                    if chance is not None:
                        equal[split].append(chance)
                row, val = {}, {}
                for c, g in guess.items():
                    guessed.setdefault(c, []).append(g)
                for arm in chosen:
                    summary, wall = results[(arm, b, w, s)]
                    target = summary["targets"][0]
                    f = figures(summary, target)
                    row[arm] = f["accuracy"]
                    val[arm] = validation_accuracy(summary, target)
                    acc[arm].append(f["accuracy"])
                    secs[arm].append(wall)
                    trainer = (summary["iterations"][-1].get("training", {}).get(target) or {}).get("rewards") or {}
                    if trainer.get("flat_groups") is not None:
                        flat[arm].append(trainer["flat_groups"])
                    cats = by_category(summary, target)
                    for c, (last, _, top, _) in cats.items():
                        if top > 0:
                            shares[arm].setdefault(c, []).append(last / top)
                    share, kept_all = two_goals(summary, target, guess)
                    learnable_shares[arm].append(share)
                    kept[arm].append(kept_all)
                    if (read := two_goals(summary, target, guess_val, "validation")) is not None:
                        on_validation[arm].append(read)
                    else:
                        unread[arm] += 1
                    rm = [t["reward_model"]["accuracy"] for e in summary["iterations"]
                          for t in e.get("training", {}).values() if t.get("reward_model")]
                    if arm == "rm" and rm and rm[-1] is not None:
                        rm_accuracy.append(rm[-1])
                    print(f"{w.row_label}, seed {s}, {arm}: accuracy {f['accuracy']:.3f} (validation "
                          f"{'n/a' if val[arm] is None else format(val[arm], '.3f')}; best opponent "
                          f"{f['best_opponent']:.3f}), worst category {f['worst_category_name']} "
                          f"{f['worst_category']:.2f} of the best opponent's, forgot {f['forgot']}, {wall:.0f} s"
                          f"{own_answers(summary, target, b)}")
                for arm in gains:
                    if "sft" in row:
                        gains[arm].append(row[arm] - row["sft"])
                    if "sft" in row and val[arm] is not None and val["sft"] is not None:
                        val_gains[arm].append(val[arm] - val["sft"])
                        print(f"{w.row_label}, seed {s}, {arm}: validation gain over sft {val_gains[arm][-1]:+.3f}")
        for arm in chosen:
            m, h = mean_ci(acc[arm])
            print(f"{arm:<4} final eval accuracy {m:.3f} +- {h:.3f} over {len(acc[arm])} runs; median wall time "
                  f"{statistics.median(secs[arm]):.0f} s")
        for arm, g in gains.items():
            if g:
                m, h = mean_ci(g)
                print(f"gain of {arm} over sft: {m:+.3f} +- {h:.3f} (95% CI, paired by world and seed; "
                      f"{'above zero' if m - h > 0 else 'not above zero'})")
            if val_gains[arm]:
                m, h = mean_ci(val_gains[arm])
                print(f"gain of {arm} over sft on the validation split: {m:+.3f} +- {h:.3f} over {len(val_gains[arm])} "
                      "runs (what a tuning run reads)")
        for arm, got in flat.items():
            if got:
                m, h = mean_ci(got)
                print(f"{arm}: the trainer's flat groups {m:.2f} +- {h:.2f} (95% CI over {len(got)} runs), under 0.30 "
                      f"on {sum(x < 0.3 for x in got)} of {len(got)}")
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
        print("the commonest answer of the train split at the prompt's level, eval accuracy per category "
              "(mean over worlds): " + ", ".join(f"{c} {statistics.fmean(v):.3f}" for c, v in sorted(guessed.items())))
        for arm in chosen:
            got = learnable_shares[arm]
            print(f"{arm}: at least 0.90 of the best opponent in every learnable category (the best opponent "
                  f"{LEARNABLE_MARGIN} above the commonest answer) on {sum(reaches(x) for x in got)} of {len(got)} runs; "
                  f"forgets nothing (no category's eval accuracy more than {GOALS['forgetting'][1]} below iteration "
                  f"0's) on {sum(kept[arm])}; both on {sum(reaches(x) and k for x, k in zip(got, kept[arm]))}")
        for arm in chosen:
            if got_val := on_validation[arm]:
                print(f"{arm} on the validation split (what a tuning rule reads): at least 0.90 of the best opponent in "
                      f"every learnable category on {sum(reaches(x) for x, _ in got_val)} of {len(got_val)} runs; forgets "
                      f"nothing on {sum(k for _, k in got_val)}; both on {sum(reaches(x) and k for x, k in got_val)}"
                      + (f" ({unread[arm]} more runs' opponents have no validation figures)" if unread[arm] else ""))
        for split, chances in equal.items():
            if chances:
                print(chance_line(split, chances))
        compared = ratio_arm(list(chosen))
        if compared is not None:
            last_ratio = statistics.fmean(acc[compared]) / statistics.fmean(acc["sft"])
    if last_ratio is not None:
        print(f"ratio: {last_ratio:.2f}")


if __name__ == "__main__":
    main()
