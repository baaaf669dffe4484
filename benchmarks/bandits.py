"""Bandits vs uniform choice, in one run.

1. Simulated problems (stationary and drifting Bernoulli arms, per seed): cumulative regret of
   each policy against the oracle, and as a ratio to uniform's regret.
2. The flywheel itself, same run seeds, worlds and iterations for every selection: ``select.policy:
   uniform`` and the bandit (``--policy``, default the embedded default's thompson) under each
   reward of ``--rewards`` (``select.reward``; default ``yield``) and each arm set of ``--arms``
   (default ``both``), side by side, each run at 1/8, 1/4, 1/2 and 1 of the battle budget (an 8x
   span: a ratio up to 8 can be read off the curves). The arm sets say what the bandit chooses:
   ``both`` (prompt cells and, per cell, opponents), ``prompts`` (cells; opponents uniform),
   ``opponents`` (opponents; cells all even, ``select.prompt_floor: 1``), ``neither`` (both even:
   uniform selection by another road, a control run once whatever the rewards); these settings
   come after ``--set``'s. ``--floors`` (``select.prompt_floor`` values: shares or ``auto``) adds
   one selection per floor for the arm sets whose cells the bandit chooses. Each selection's floor is printed: the share of battles spread evenly
   over the cells by ``select.prompt_floor`` (and opponents drawn uniformly) whatever the bandit
   has learnt. Per budget: the final eval accuracy of the target, mean and 95% CI over the runs. The ratio of a run: the isotonic
   (monotone) fit of each selection's accuracy against budget, then uniform's budget / the
   bandit's budget for the same accuracy (benchmarks/stats.py). A ratio marked ``>=`` is a floor
   (the bandit was already at uniform's final accuracy at the smallest budget), ``<=`` a ceiling.
   Per selection ``ratio[<selection>]: X``, the median over the runs; the last line is
   ``ratio: X``, the first selection's (the first reward, the first arm set).

   Variants (``--variant``), each with every setting its figures depend on pinned here, so that a
   later change of the embedded default does not change what this benchmark runs:
   - ``default``: the embedded default as a user runs it (4 iterations, 1,200 steps, 4,000 battles
     per iteration at the full budget, self-distillation, replay, promotion, weight decay);
   - ``before-self-distillation``: the settings the first published figures used (3 iterations,
     400 steps, 2,000 battles, no self-distillation, no promotion, no weight decay).

   Scenarios (``--scenario``):
   - ``balanced``: the embedded default's task suite (18 category x level cells), nothing added;
   - ``realistic``: a user pool (``world.prompt_pools``, written by the benchmark) beside the
     suite: 6 cells of the same tasks at level 6, beyond every model here (25% of the cells and
     of the train prompts), and near-duplicates (twins: ``b+a`` for ``a+b``, anagrams to sort or
     count) of a fifth of the suite's train prompts in their own cells;
   - ``skewed``: an extreme built to show what selection can save: 42 cells of the same six tasks
     at levels 5-11 (sums of 3-9 digit numbers, strings of 8-14 letters) that no model here
     answers, so 70% of the cells (and of the train prompts) teach nothing.
   The eval split is always the suite's.

Every run seed runs on every world (``--suites`` x ``--pretrainings``; benchmarks/worlds.py). The
selection defaults were chosen on suite 1234, pre-training 0; which worlds are tuning and which held
out is the registry's word (benchmarks/worlds.yaml), and each row is labelled from it.

    python -m benchmarks.bandits --scenario balanced --suites 31 --pretrainings 2 --seeds 0,1   # held out
    python -m benchmarks.bandits --scenario realistic --variant before-self-distillation
    python -m benchmarks.bandits --rewards yield,learnability,validation-progress --arms both,prompts,opponents
    python -m benchmarks.bandits --floors 0.5,auto   # the fixed prompt floor against the adaptive one
    python -m benchmarks.bandits --quick      # 2 seeds, 2 iterations, 200 steps, 1,200 battles at most
    python -m benchmarks.bandits --sim-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import string
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.stats import budget_ratio, default_jobs, isotonic, mean_ci, parse_seeds, run_all
from benchmarks.worlds import World, add_world_args, describe, worlds_of
from flywheel.arena.bandit_rewards import REWARDS
from flywheel.config.loading import parse_overrides
from flywheel.maths.bandits import POLICIES, Bandit
from flywheel.stages.select import round_budget

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


def part1(seeds: list[int]) -> None:
    print("1. simulated bandits: cumulative regret vs the oracle (10 arms, 300 rounds of 8 pulls), "
          f"mean over seeds {seeds}; 'x uniform' = uniform's regret / the policy's")
    print(f"{'policy':<24}{'stationary':>12}{'x uniform':>11}{'drifting':>12}{'x uniform':>11}")
    base = {}
    for name, kw in SIM_POLICIES:
        label = name + "".join(f" {k}={v}" for k, v in kw.items())
        st = np.mean([simulate(name, kw, False, s) for s in seeds])
        dr = np.mean([simulate(name, kw, True, s) for s in seeds])
        if name == "uniform":
            base = {"st": st, "dr": dr}
        print(f"{label:<24}{st:>12.1f}{base['st'] / st:>11.2f}{dr:>12.1f}{base['dr'] / dr:>11.2f}")


FRACTIONS = (1 / 8, 1 / 4, 1 / 2, 1.0)
SKEW_LEVELS = tuple(range(5, 12))  # 6 tasks x 7 levels = 42 cells beside the suite's 18: 70%
REALISTIC_LEVELS = (6,)  # 6 cells beside the suite's 18: 25%
TWIN_SHARE = 0.2  # of the suite's train prompts, near-duplicated in the realistic pool


def _digits(rng: random.Random, n: int) -> int:
    return rng.randint(10 ** (n - 1), 10**n - 1)


def out_of_reach(category: str, level: int, rng: random.Random) -> tuple[str, str]:
    """A prompt of a suite task at a level above the suite's 1-3 (longer operands and strings
    than any model here was pre-trained on): the skewed pool's filler."""
    if category == "add":
        a, b = _digits(rng, level - 2), _digits(rng, level - 2)
        return f"{a}+{b}=", str(a + b)
    if category == "sub":
        a, b = _digits(rng, level - 2), _digits(rng, level - 3)
        return f"{a}-{b}=", str(a - b)
    if category == "mul":
        a, b = _digits(rng, level - 2), _digits(rng, level - 2)
        return f"{a}*{b}=", str(a * b)
    if category == "rev":
        s = "".join(rng.choice(string.ascii_lowercase) for _ in range(level + 3))
        return f"rev {s}=", s[::-1]
    if category == "sort":
        s = "".join(rng.choice(string.digits) for _ in range(level + 3))
        return f"sort {s}=", "".join(sorted(s))
    s = "".join(rng.choice("abcde") for _ in range(2 * level + 5))
    c = rng.choice("abcde")
    return f"count {c} {s}=", str(s.count(c))


def write_hard_pool(path: Path, categories: list[str], levels: tuple[int, ...], per_cell: int, seed: int = 99) -> list[dict]:
    """Rows of out-of-reach prompts: ``per_cell`` of each task at each of ``levels``."""
    rng = random.Random(seed)
    rows = []
    for c in categories:
        for level in levels:
            seen: dict[str, str] = {}
            while len(seen) < per_cell:
                text, answer = out_of_reach(c, level, rng)
                seen.setdefault(text, answer)
            rows += [{"prompt": t, "reference": a, "category": c, "level": level} for t, a in seen.items()]
    return rows


def twin_of(category: str, text: str, rng: random.Random) -> str | None:
    """Another text with the same meaning (tasks.meaning): the operands swapped, the digits or
    letters shuffled; None where the prompt has no other text (``1+1=``, ``rev``, ``sub``)."""
    from flywheel.worlds.tasks import meaning

    body = text.removesuffix("=")
    if category in ("add", "mul"):
        op = "+" if category == "add" else "*"
        a, b = body.split(op)
        twin = f"{b}{op}{a}="
    elif category in ("sort", "count"):
        *head, s = body.split(" ")
        chars = list(s)
        for _ in range(10):
            rng.shuffle(chars)
            if "".join(chars) != s:
                break
        twin = " ".join([*head, "".join(chars)]) + "="
    else:
        return None
    return twin if twin != text and meaning(category, twin) == meaning(category, text) else None


def write_pool(scenario: str, path: Path, cfg) -> str:
    """The scenario's user pool (plain JSONL with references); returns what it holds, in words."""
    from flywheel.worlds.world import prompt_pools

    tasks = cfg.world.tasks
    per_cell = tasks.train_per_cell - tasks.val_per_cell
    if scenario == "skewed":
        rows = write_hard_pool(path, list(tasks.categories), SKEW_LEVELS, per_cell)
        what = f"{len(rows) // per_cell} out-of-reach pool cells (70%)"
    else:
        rows = write_hard_pool(path, list(tasks.categories), REALISTIC_LEVELS, per_cell)
        rng = random.Random(7)
        splits = prompt_pools(tasks)
        texts = {p.text for split in splits for p in split}
        twins = []
        for p in splits.train:
            twin = twin_of(p.category, p.text, rng) if rng.random() < TWIN_SHARE else None
            if twin is not None and twin not in texts:
                texts.add(twin)
                twins.append({"prompt": twin, "reference": p.reference, "category": p.category, "level": p.level})
        what = (f"{len(rows) // per_cell} out-of-reach pool cells (25%) and {len(twins)} near-duplicates of train "
                "prompts in their cells")
        rows += twins
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return what


# Every setting the published figures depend on, per variant (the scenario and the world come on
# top; --set overrides and --quick after these).
VARIANTS = {
    "default": ["run.iterations=4", "select.battles_per_iteration=4000", "select.rounds=4", "select.discount=0.8",
                "select.prompt_floor=0.5", "select.reward=yield", "train.steps=1200", "train.learning_rate=0.0015",
                "train.weight_decay=1.0", "train.replay=true", "curate.include_target_wins=true",
                "curate.include_target_ties=true", "evaluate.promotion=validation"],
    "before-self-distillation": ["run.iterations=3", "select.battles_per_iteration=2000", "select.rounds=4",
                                 "select.discount=0.8", "select.prompt_floor=0.5", "select.reward=yield",
                                 "train.steps=400", "train.learning_rate=0.003", "train.weight_decay=0",
                                 "train.replay=true", "curate.include_target_wins=false",
                                 "curate.include_target_ties=false", "evaluate.promotion=always"],
}
QUICK = ["run.iterations=2", "select.battles_per_iteration=1200", "train.steps=200"]  # applied last

# What the bandit chooses in each arm set (``--arms``); the rest is drawn evenly.
ARM_SETS = {
    "both": ["select.opponents=bandit"],
    "prompts": ["select.opponents=uniform"],
    "opponents": ["select.opponents=bandit", "select.prompt_floor=1.0"],
    "neither": ["select.opponents=uniform", "select.prompt_floor=1.0"],
}


@dataclass(frozen=True)
class Selection:
    """One way of choosing battles that the benchmark runs: uniform, or the bandit with a reward and
    an arm set; ``overrides`` are ``select.*`` settings on top of the variant's."""

    label: str
    overrides: tuple[str, ...]


UNIFORM = Selection("uniform", ("select.policy=uniform",))


def selections(policy: str, rewards: list[str], arm_sets: list[str], floors: list[str] | None = None) -> list[Selection]:
    """Uniform first, then the bandit under every reward, arm set and prompt floor (``neither``
    once: no reward moves a choice there; ``opponents`` and ``neither`` fix the floor at 1, so
    ``floors``, ``select.prompt_floor`` values, apply to ``both`` and ``prompts`` only; without
    ``floors`` the variant's floor)."""
    out = [UNIFORM]
    for arms in arm_sets:
        for reward in rewards[:1] if arms == "neither" else rewards:
            base = (f"select.policy={policy}", f"select.reward={reward}", *ARM_SETS[arms])
            if arms == "neither":
                out.append(Selection(f"{policy} neither", base))
            elif not floors or arms == "opponents":
                out.append(Selection(f"{policy} {reward} {arms}", base))
            else:
                out += [Selection(f"{policy} {reward} {arms} floor={f}", (*base, f"select.prompt_floor={f}"))
                        for f in floors]
    return out


def with_selection(cfg, selection: Selection):
    """``cfg`` with the selection's ``select.*`` settings."""
    tree = cfg.model_dump()
    for key, value in parse_overrides(list(selection.overrides)):
        section, _, name = key.partition(".")
        if section != "select":
            raise ValueError(f"{selection.label}: {key} is not a select.* setting")
        tree["select"][name] = value
    return type(cfg).model_validate(tree)


def floor_share(select, battles: int) -> tuple[float | None, float]:
    """(share of an iteration's ``battles`` that ``select.prompt_floor`` spreads evenly over the
    cells, share whose opponent is drawn uniformly) whatever the bandit has learnt: the selector's
    own rounding of each round's budget (flywheel/arena/selection.py, Selector.choose). None for
    the first with ``auto``: the runs report the share they spread."""
    if select.policy == "uniform":  # nothing is learnt: every battle is drawn evenly
        return 1.0, 1.0
    uniform_opponents = 1.0 if select.opponents == "uniform" else 0.0
    if select.prompt_floor == "auto":
        return None, uniform_opponents
    rounds = range(1, select.rounds + 1)
    even = sum(round(round_budget(battles, select.rounds, r) * select.prompt_floor) for r in rounds)
    return even / battles, uniform_opponents


def _is_share(text: str) -> bool:
    try:
        return 0 <= float(text) <= 1
    except ValueError:
        return False


def _csv(values: list[str]) -> list[str]:
    return [v for value in values for v in value.replace(",", " ").split()]


def bench_overrides(variant: str, world: World, extra: list[str], quick: bool) -> list[str]:
    """The overrides of one world's runs: no bootstrap CIs (not read), the variant's pins, the
    world, the user's ``--set``, and ``--quick``'s sizes last, so that nothing undoes them."""
    return ["rating.bootstrap_rounds=0", *VARIANTS[variant], *world.overrides(), *extra, *(QUICK if quick else [])]


def scenario_config(scenario: str, overrides: list[str], tmp: Path) -> tuple[object, str]:
    """The embedded default with ``overrides``, plus the scenario's pool; and what it holds."""
    from flywheel.config.loading import load_config
    from flywheel.config.tree import FlywheelConfig

    cfg = load_config(None, overrides)
    what = "18 suite cells"
    if scenario != "balanced":
        pool = tmp / f"{scenario}_pool.jsonl"
        what += " + " + write_pool(scenario, pool, cfg)
        tree = cfg.model_dump()
        tree["world"]["prompt_pools"] = [{"path": str(pool), "layout": "plain"}]
        cfg = FlywheelConfig.model_validate(tree)
    return cfg, what


def run_flywheel(cfg, label: str, seed: int, battles: int, root: Path) -> tuple[float, float, float]:
    """(final eval accuracy of the first target, share of its train battles that taught it
    something: lost to an opponent, mean share of a round's battles its prompt floor spread evenly
    over the cells) after a run of ``cfg`` (a selection's, named ``label``) with
    this seed and budget, every stage run as the flow runs it (flywheel.stages.iteration.run_to),
    without a Prefect server."""
    from flywheel.ground.records import SCORE_A, base_name
    from flywheel.ground.reports import in_use_eval
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.iteration import run_to

    tree = cfg.model_dump()
    name = label.replace(" ", "-")
    tree["run"].update(root=str(root), name=f"{name}-t{cfg.world.tasks.seed}-w{cfg.world.seed}-s{seed}-b{battles}",
                       seed=seed)
    tree["select"].update(battles_per_iteration=battles)
    run_cfg = type(cfg).model_validate(tree)
    ctx = open_run(run_cfg)
    try:
        run_to(ctx, run_cfg.run.iterations)
    finally:
        close_run(ctx)
    target = run_cfg.targets[0].name
    summary = json.loads(ctx.store.summary_path.read_text())
    acc = in_use_eval(summary, summary["iterations"][-1], target)["accuracy"]
    judged = ctx.store.judged(None, "train")
    lost = sum(1 for jb in judged  # the target's score is 0: the opponent won
               if SCORE_A[jb.winner] == (0.0 if base_name(jb.battle.model_a) == target else 1.0))
    floors = [(ctx.store.stage_json(k, f"select-r{r}") or {}).get("floors") or {}
              for k in range(1, run_cfg.run.iterations + 1) for r in range(1, run_cfg.select.rounds + 1)]
    fixed = 1.0 if run_cfg.select.policy == "uniform" else run_cfg.select.prompt_floor
    even = [f[target] for f in floors if target in f] or [float("nan") if fixed == "auto" else float(fixed)]
    return acc, lost / max(1, len(judged)), statistics.fmean(even)


def ci_table(budgets: list[int], runs: dict[str, dict[int, list[float]]]) -> None:
    """One row per selection, one column per budget: mean +- 95% CI half-width."""
    width = max(len(label) for label in runs) + 2
    print(f"{'selection':<{width}}" + "".join(f"{b:>18}" for b in budgets))
    for label, by_budget in runs.items():
        cells = []
        for b in budgets:
            m, h = mean_ci(by_budget[b])
            cells.append(f"{m:.3f} +- {h:.3f}")
        print(f"{label:<{width}}" + "".join(f"{c:>18}" for c in cells))


def part2(seeds: list[int], worlds: list[World], chosen: list[Selection], scenario: str, variant: str,
          extra: list[str], quick: bool, jobs: int) -> None:
    from flywheel.worlds.tinymodels import bootstrap

    with tempfile.TemporaryDirectory(prefix="flywheel-bench-") as tmp:
        cfgs = {}
        for w in worlds:
            folder = Path(tmp) / f"t{w.suite}-w{w.pretraining}"
            folder.mkdir()
            base, what = scenario_config(scenario, bench_overrides(variant, w, extra, quick), folder)
            bootstrap(base.world)
            for sel in chosen:
                cfgs[w, sel.label] = with_selection(base, sel)
        cfg = cfgs[worlds[0], UNIFORM.label]
        full = cfg.select.battles_per_iteration
        budgets = [round(full * f) for f in FRACTIONS]
        bandits = [sel.label for sel in chosen if sel != UNIFORM]
        print(f"\n2. the flywheel, variant {variant}, scenario {scenario} ({what}), {cfg.run.iterations} iterations, "
              f"{cfg.train.steps} steps; uniform and {len(bandits)} bandit selection(s) at {budgets} battles per "
              f"iteration; run seeds {seeds} on {describe(worlds)}")
        print(f"the floor of each selection, at {full} battles per iteration (what no reward moves):")
        for sel in chosen:
            sc = cfgs[worlds[0], sel.label].select
            even, opp = floor_share(sc, full)
            spread = ("an adaptive share of battles (reported below)" if even is None else f"{even:.1%} of battles")
            print(f"  {sel.label}: {' '.join(sel.overrides)}; {spread} spread evenly over the cells by "
                  f"select.prompt_floor {sc.prompt_floor}, {opp:.0%} with a uniformly drawn opponent")
        acc: dict[str, dict[int, list[float]]] = {sel.label: {b: [] for b in budgets} for sel in chosen}
        taught: dict[str, list[float]] = {sel.label: [] for sel in chosen}
        spread: dict[str, list[float]] = {sel.label: [] for sel in chosen}
        t0 = time.perf_counter()
        runs = [(w, seed) for w in worlds for seed in seeds]
        keys = [(w, seed, label, b) for w, seed in runs for label in acc for b in budgets]
        calls = [(cfgs[w, label], label, seed, b, Path(tmp)) for w, seed, label, b in keys]
        results = dict(zip(keys, run_all(run_flywheel, calls, jobs)))
        ratios: dict[str, list[float]] = {label: [] for label in bandits}
        marks: dict[str, list[str]] = {label: [] for label in bandits}
        show = lambda c: " ".join(f"{a:.3f}" for a in c)  # noqa: E731
        for w, seed in runs:
            curves = {label: [results[w, seed, label, b][0] for b in budgets] for label in acc}
            for label in acc:
                taught[label] += [results[w, seed, label, b][1] for b in budgets]
                spread[label] += [results[w, seed, label, b][2] for b in budgets]
                for b, a in zip(budgets, curves[label]):
                    acc[label][b].append(a)
            print(f"{w.label}, seed {seed}: uniform {show(curves['uniform'])} "
                  f"(isotonic {show(isotonic(curves['uniform']))})")
            for label in bandits:
                ratio, mark = budget_ratio(budgets, curves["uniform"], curves[label])
                ratios[label].append(ratio)
                marks[label].append(mark)
                print(f"  {label}: {show(curves[label])} (isotonic {show(isotonic(curves[label]))}); "
                      f"ratio {mark}{ratio:.2f}")
        print(f"{len(calls)} runs in {time.perf_counter() - t0:.0f} s ({jobs} processes)")
    print("\nfinal eval accuracy, mean +- 95% CI over the runs")
    ci_table(budgets, acc)
    for label in bandits:
        diff = [a - b for a, b in zip(acc[label][budgets[-1]], acc["uniform"][budgets[-1]])]
        m, h = mean_ci(diff)
        print(f"{label} - uniform at {budgets[-1]} battles: {m:+.3f} +- {h:.3f} (95% CI {m - h:+.3f} to {m + h:+.3f})")
    for label, t in taught.items():
        print(f"{label}: {statistics.fmean(t):.1%} of train battles lost to the opponent (training data), "
              f"{statistics.fmean(spread[label]):.1%} of a round's battles spread evenly over the cells by the prompt "
              "floor; means over runs")
    for label in bandits:
        logs = [math.log(r) for r in ratios[label]]
        m, h = mean_ci(logs)
        print(f"{label}: ratio per run {', '.join(f'{k}{r:.2f}' for k, r in zip(marks[label], ratios[label]))}; "
              f"geometric mean {math.exp(m):.2f} (95% CI {math.exp(m - h):.2f}-{math.exp(m + h):.2f}); the budgets "
              f"span {budgets[-1] / budgets[0]:.0f}x ('>=' a floor, '<=' a ceiling)")
    for label in bandits:
        print(f"ratio[{label}]: {statistics.median(ratios[label]):.2f}")
    print(f"ratio: {statistics.median(ratios[bandits[0]]):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0,1,2,3,4"], help="run seeds, run.seed (default 0-4)")
    add_world_args(ap)
    ap.add_argument("--scenario", default="balanced", choices=["balanced", "realistic", "skewed"])
    ap.add_argument("--variant", default="default", choices=list(VARIANTS))
    ap.add_argument("--policy", default="thompson", choices=[p for p in POLICIES if p != "uniform"])
    ap.add_argument("--rewards", nargs="+", default=["yield"], help="select.reward values to compare, comma- or "
                    f"space-separated (default yield; known: {', '.join(REWARDS)})")
    ap.add_argument("--arms", nargs="+", default=["both"], help="arm sets the bandit chooses, comma- or "
                    f"space-separated (default both; known: {', '.join(ARM_SETS)}; neither = uniform by another road)")
    ap.add_argument("--floors", nargs="+", default=[], help="select.prompt_floor values to compare for the arm sets "
                    "both and prompts, comma- or space-separated: numbers in [0, 1] or auto (default: the variant's)")
    ap.add_argument("--quick", action="store_true", help="2 seeds (the first two given), 2 iterations, "
                    "1,200 battles at most, 200 steps")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="runs at a time (default: the CPU count)")
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra flywheel --set overrides")
    args = ap.parse_args()
    from flywheel.face.cli import QUIET_ENV

    for key, value in {**QUIET_ENV, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}.items():
        os.environ.setdefault(key, value)  # no progress bars (the spawned runs inherit these)
    seeds = parse_seeds(args.seeds)
    rewards, arm_sets = _csv(args.rewards), _csv(args.arms)
    for flag, got, known in (("--rewards", rewards, REWARDS), ("--arms", arm_sets, tuple(ARM_SETS))):
        bad = [v for v in got if v not in known]
        if bad or not got:
            ap.error(f"{flag}: {', '.join(bad) or 'nothing given'}; known: {', '.join(known)}")
    floors = _csv(args.floors)
    bad = [f for f in floors if f != "auto" and not _is_share(f)]
    if bad:
        ap.error(f"--floors: {', '.join(bad)}; known: numbers in [0, 1] and auto")
    part1(seeds if len(seeds) >= 5 else list(range(5)))
    if args.sim_only:
        return
    if args.quick:
        seeds = seeds[:2]
    part2(seeds, worlds_of(args), selections(args.policy, rewards, arm_sets, floors), args.scenario, args.variant,
          args.overrides, args.quick, args.jobs)


if __name__ == "__main__":
    main()
