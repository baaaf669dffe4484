"""How much room learning from right answers has: the embedded default's SFT against an oracle that
labels every train prompt right, at the same compute.

Expert iteration (the RL recipe) adds the target's own right answers to the winners' rows. The
``oracle`` arm trains on every train prompt of the world with its reference answer: not a method
(no player knows every reference), a yardstick for what right answers to train prompts can teach at
this compute. Starting from the same pre-trained ``student``, it trains ``run.iterations`` x
``train.steps`` optimizer steps of ``train.batch_size`` sequences (the SFT arm's compute) on those
rows (never a validation or eval prompt), by the same trainer and settings, keeps every version
(the SFT arm promotes on validation), and is scored on the eval split as the runs score theirs. It
is not a strict ceiling: the arena's rows (the bandit's prompts, replayed iterations) can teach more
than the flat oracle mix on a given world.

Per world and run seed: both arms' final eval accuracy; per category, the share of the best
opponent's accuracy (the opponents' from the SFT run, on the same eval split). Then each arm's mean
with its 95% CI, the oracle's gain over SFT paired by world and seed, and on how many runs each arm
reaches 0.90 of the best opponent in every learnable category (as ``benchmarks.rl`` reads it). The
last line is ``ratio:`` the oracle's mean accuracy over SFT's.

    python -m benchmarks.rl_ceiling --suites 1931 2039 2143 --pretrainings 81 82 --jobs 2
    python -m benchmarks.rl_ceiling --suites 1931 2039 2143 --pretrainings 81 82 --repeat add=3 sub=3 mul=3
    python -m benchmarks.rl_ceiling --quick        # 2 iterations, 300 steps, the tuning world
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.efficacy import by_category, figures, reaches
from benchmarks.goal_chance import learnable
from benchmarks.rl import QUICK, guess_by_category, timed_run
from benchmarks.stats import default_jobs, mean_ci, parse_seeds, quiet_runs, run_all
from benchmarks.worlds import add_world_args, describe, worlds_of


def oracle_rows(splits, repeat: dict[str, int] | None = None) -> list[dict[str, str]]:
    """Every train prompt with a reference, as an SFT row (prompt, its reference as the completion),
    a category in ``repeat`` that many times; the validation and eval splits never."""
    return [{"prompt": p.text, "completion": p.reference} for p in splits.train if p.reference is not None
            for _ in range((repeat or {}).get(p.category, 1))]


def oracle_run(seed: int, overrides: list[str], root: Path, repeat: dict[str, int] | None = None
               ) -> tuple[dict[str, float], float, int]:
    """The oracle arm: per category eval accuracy of ``student`` after SFT on ``oracle_rows`` for the
    run's iterations x ``train.steps``; returns (accuracy by category with ``overall``, seconds, rows)."""
    from datasets import Dataset

    from flywheel.config.loading import load_config
    from flywheel.learning.training import TrainJob, train_version
    from flywheel.worlds.tinymodels import bootstrap
    from flywheel.worlds.world import world_pools

    t0 = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    cfg = load_config(None, [*overrides, f"run.seed={seed}"])
    bootstrap(cfg.world)
    splits = world_pools(cfg.world)
    rows = oracle_rows(splits, repeat)
    data = Dataset.from_list(rows)
    base = str(cfg.world.models_dir / cfg.targets[0].name)
    for k in range(1, cfg.run.iterations + 1):
        out = root / f"oracle-{k}"
        train_version(TrainJob(base=base, out=out, steps=cfg.train.steps, seed=cfg.run.seed * 1000 + k, method="sft"),
                      cfg.train, sft_data=data)
        base = str(out)
    return eval_by_category(base, splits.eval, cfg.targets[0].max_new_tokens), time.perf_counter() - t0, len(rows)


def eval_by_category(path: str, prompts, max_new: int) -> dict[str, float]:
    """Greedy eval accuracy of the checkpoint at ``path`` (at most ``max_new`` tokens an answer), per
    category and ``overall``, scored as the runs score theirs (``flywheel.arena.evaluation.accuracy``)."""
    import torch
    from transformers import AutoTokenizer

    from benchmarks.rl_diagnose import generate
    from flywheel.arena.evaluation import accuracy
    from flywheel.ground.checkpoints import load_checkpoint

    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = load_checkpoint(path, dtype=torch.float32)
    answers = generate(model, tok, [p.text for p in prompts], max_new, None, 0)
    overall, by = accuracy({p.id: text for p, (text, _, _) in zip(prompts, answers)}, prompts)
    return {**by, "overall": overall}


def parse_repeat(ap: argparse.ArgumentParser, values: list[str]) -> dict[str, int]:
    """``CATEGORY=N`` pairs: a task category and a whole number of at least 1 (else one usage error)."""
    from flywheel.worlds.tasks import CATEGORIES

    out = {}
    for x in values:
        c, _, n = x.partition("=")
        if c not in CATEGORIES or not n.isdigit() or int(n) < 1:
            ap.error(f"--repeat {x}: CATEGORY=N, a category of {', '.join(CATEGORIES)} and N at least 1")
        out[c] = int(n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_world_args(ap)
    ap.add_argument("--quick", action="store_true", help="2 iterations, 300 steps, the first seed")
    ap.add_argument("--seeds", nargs="+", default=["0"], help="run seeds, run.seed (default 0)")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="runs at a time (default: the CPU count)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="an override for both arms")
    ap.add_argument("--repeat", nargs="+", default=[], metavar="CATEGORY=N",
                    help="the oracle's rows of CATEGORY, N times each (its mix; default: every row once)")
    args = ap.parse_args()
    quiet_runs()
    worlds = worlds_of(args)
    repeat = parse_repeat(ap, args.repeat)
    seeds, common = parse_seeds(args.seeds), list(args.overrides)
    if args.quick:
        seeds, common = seeds[:1], [*common, *QUICK]
    from flywheel.config.loading import load_config
    from flywheel.worlds.tinymodels import bootstrap

    for w in worlds:
        bootstrap(load_config(None, [*common, *w.overrides()]).world)
    print(f"arms: sft: the embedded default; oracle: SFT on every train prompt's reference at the same steps"
          f"{' (' + ', '.join(f'{c} x{n}' for c, n in repeat.items()) + ')' if repeat else ''}; "
          f"{' '.join(common) or 'no overrides'}; run seeds {seeds} on {describe(worlds)}", flush=True)
    runs = [(w, s) for w in worlds for s in seeds]
    with tempfile.TemporaryDirectory(prefix="bench-ceiling-") as tmp:
        names = [f"t{w.suite}-w{w.pretraining}-s{s}" for w, s in runs]
        calls = [(timed_run, (s, [*common, *w.overrides(), f"run.name=sft-{n}"], Path(tmp)))
                 for (w, s), n in zip(runs, names)]
        calls += [(oracle_run, (s, [*common, *w.overrides()], Path(tmp) / f"oracle-{n}", repeat))
                  for (w, s), n in zip(runs, names)]
        done = run_all(call, calls, args.jobs)
    report(runs, done[:len(runs)], done[len(runs):], common)


def call(fn, args):
    return fn(*args)


def report(runs, sft_done, oracle_done, common: list[str]) -> None:
    acc: dict[str, list[float]] = {"sft": [], "oracle": []}
    secs: dict[str, list[float]] = {"sft": [], "oracle": []}
    shares: dict[str, dict[str, list[float]]] = {"sft": {}, "oracle": {}}
    reached = {"sft": 0, "oracle": 0}
    gains = []
    # per world, the commonest answer's eval accuracy per category in the world the runs took (a seed
    # changes none of its prompts): a category is learnable where the best opponent beats it
    guesses = {w.label: guess_by_category([*common, *w.overrides()]) for w in dict.fromkeys(w for w, _ in runs)}
    for (w, s), (summary, wall), (oracle, o_wall, rows) in zip(runs, sft_done, oracle_done):
        target = summary["targets"][0]
        sft_acc = figures(summary, target)["accuracy"]
        cats = by_category(summary, target)
        guess = guesses[w.label]
        got = {"sft": {c: last for c, (last, _, _, _) in cats.items()}, "oracle": oracle}
        line = []
        for arm in ("sft", "oracle"):
            learnt = []  # the shares of the learnable categories
            for c, (_, _, top, _) in cats.items():
                if top > 0:
                    shares[arm].setdefault(c, []).append(got[arm][c] / top)
                if learnable(top, guess.get(c, 0.0)):
                    learnt.append(got[arm][c] / top)
            reached[arm] += bool(learnt) and reaches(min(learnt))
            line.append(", ".join(f"{c} {got[arm][c] / top:.2f}" for c, (_, _, top, _) in cats.items() if top > 0))
        acc["sft"].append(sft_acc)
        acc["oracle"].append(oracle["overall"])
        secs["sft"].append(wall)
        secs["oracle"].append(o_wall)
        gains.append(oracle["overall"] - sft_acc)
        print(f"{w.label}, seed {s}: sft {sft_acc:.3f} ({wall:.0f} s), oracle {oracle['overall']:.3f} on {rows} rows "
              f"({o_wall:.0f} s), gain {oracle['overall'] - sft_acc:+.3f}; of the best opponent: sft {line[0]}; "
              f"oracle {line[1]}")
    for arm in ("sft", "oracle"):
        m, h = mean_ci(acc[arm])
        print(f"{arm:<6} final eval accuracy {m:.3f} +- {h:.3f} over {len(acc[arm])} runs; median wall time "
              f"{statistics.median(secs[arm]):.0f} s; at least 0.90 of the best opponent in every learnable category "
              f"on {reached[arm]} of {len(acc[arm])} runs")
    m, h = mean_ci(gains)
    print(f"gain of oracle over sft: {m:+.3f} +- {h:.3f} (95% CI, paired by world and seed)")
    print(f"{'category':<10}{'sft / best opponent':>24}{'oracle / best opponent':>26}")
    for c in sorted(shares["sft"]):
        cells = [f"{mean_ci(shares[arm][c])[0]:.2f} +- {mean_ci(shares[arm][c])[1]:.2f}" for arm in ("sft", "oracle")]
        print(f"{c:<10}{cells[0]:>24}{cells[1]:>26}")
    guessed = {c: statistics.fmean(g[c] for g in guesses.values() if c in g)
               for c in sorted(set().union(*guesses.values()))}
    print("the commonest answer of the train split at the prompt's level, eval accuracy per category "
          "(mean over worlds): " + ", ".join(f"{c} {g:.3f}" for c, g in guessed.items()))
    print(f"ratio: {statistics.mean(acc['oracle']) / statistics.mean(acc['sft']):.2f}")


if __name__ == "__main__":
    main()
