"""Teaching: does a teacher's one-shot example lift SmolLM2, and does the teacher bandit find the
teacher whose examples lift it most?

Each run seed opens a run whose target (the student) is SmolLM2-135M-Instruct, asked through its
chat template (``--student scripted``: the scripted student of tests/scripted.py, right only after
a right example, to show the mechanism where a model does not learn in context). The teachers:

- ``calc``, ``scribe``, ``generalist``: the embedded world's tiny models (their own answers to the
  task prompts, right or wrong);
- ``reference``: the reference answer (``kind: reference-answer``), always right;
- ``wrong``: a wrong answer (``kind: wrong-answer``), never right.

The run gives ``select.teaching.rounds`` teaching rounds of iteration 1 (flywheel/stages/teach.py,
as the flow runs it; no battles, no training), ``lessons`` lessons each over the task suite's
cells. A lesson scores the student on a sibling prompt alone and after the teacher's example.

Figures: per teacher, its lessons over the runs, the student's accuracy without and with the
example, and the lift (with - without: mean over the runs and its 95% CI); then the teacher
bandits' share of the last round's lessons on the teacher with the highest lift (pooled over the
runs), per run, mean and 95% CI, beside 1 / teachers (a uniform choice), and each teacher's share
of every round's lessons. The last line,
``ratio: X``, is that share over the uniform one.

    python -m benchmarks.teaching                          # 3 seeds, SmolLM2, the pinned settings below
    python -m benchmarks.teaching --student scripted       # the scripted student (seconds)
    python -m benchmarks.teaching --seeds 0,1,2,3,4 --set select.teaching.rounds=6
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.stats import default_jobs, mean_ci, parse_seeds, run_all

# Every setting the figures depend on: three seeds of SmolLM2 in about ten minutes on two
# shared cores.
# The lessons are on the six level-1 cells (the tiny teachers are pre-trained on the default suite
# before the levels are narrowed, so they are not rebuilt): 80 lessons per cell and run give
# a per-cell bandit over five teachers something to learn from; on the 18 cells of three levels
# the same lessons leave each bandit about 27.
PINNED = ["world.tasks.levels=[1]", "select.teaching.enabled=true", "select.teaching.rounds=6",
          "select.teaching.lessons=80", "select.teaching.policy=thompson", "judge.kind=verifier",
          "judge.verifier.extract=final"]
SMOLLM2 = {"name": "smollm2", "path": "data/models/smollm2", "system_prompt": "Answer with the result only.",
           "max_new_tokens": 16, "batch_size": 32}
SCRIPTED = {"name": "scripted", "kind": "tests.scripted:ScriptedStudent"}
TEACHERS = [{"name": "calc"}, {"name": "scribe"}, {"name": "generalist"},
            {"name": "reference", "kind": "reference-answer"}, {"name": "wrong", "kind": "wrong-answer"}]


def run_seed(cfg, seed: int, root: Path) -> list:
    """One run of ``cfg`` with run seed ``seed``: its teaching rounds of iteration 1; its lessons."""
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.teach import teach_round

    tree = cfg.model_dump()
    tree["run"].update(root=str(root), name=f"teach-s{seed}", seed=seed)
    run_cfg = type(cfg).model_validate(tree)
    ctx = open_run(run_cfg)
    try:
        for rnd in range(1, run_cfg.select.teaching.rounds + 1):
            teach_round(ctx, 1, rnd)
    finally:
        close_run(ctx)
    return ctx.store.lessons()


def report(results: list[list], teachers: list[str]) -> None:
    from flywheel.arena.teaching import teacher_lifts

    pooled = teacher_lifts([x for r in results for x in r])
    per_run = [teacher_lifts(r) for r in results]
    print(f"{'teacher':<12}{'lessons':>9}{'example right':>15}{'without':>9}{'with':>7}"
          f"{'lift, mean +- 95% CI over runs':>34}")
    for t in teachers:
        if t not in pooled:
            continue
        lifts = [r[t].lift for r in per_run if t in r]
        right = [x.example_correct for r in results for x in r if x.teacher == t and x.error is None]
        m, h = mean_ci(lifts)
        print(f"{t:<12}{pooled[t].lessons:>9}{sum(right) / max(1, len(right)):>15.1%}{pooled[t].without:>9.3f}"
              f"{pooled[t].with_example:>7.3f}{m:>+24.3f} +- {h:.3f}  (runs: {' '.join(f'{x:+.3f}' for x in lifts)})")
    best = max(pooled, key=lambda t: (pooled[t].lift, t))
    rounds = sorted({x.round for r in results for x in r})
    print("share of each round's lessons (pooled over the runs): " + "  ".join(f"r{n}" for n in rounds))
    for t in teachers:
        row = [[x.teacher == t for r in results for x in r if x.round == n] for n in rounds]
        print(f"  {t:<12}" + "  ".join(f"{sum(v) / max(1, len(v)):.2f}" for v in row))
    shares = []
    for r in results:
        last = max(x.round for x in r)
        final = [x for x in r if x.round == last]
        shares.append(sum(x.teacher == best for x in final) / len(final))
    m, h = mean_ci(shares)
    uniform = 1 / len(teachers)
    print(f"teacher with the highest lift: {best}; its share of the last round's lessons: {m:.3f} +- {h:.3f} "
          f"(runs: {' '.join(f'{x:.3f}' for x in shares)}; uniform: {uniform:.3f})")
    print(f"ratio: {m / uniform:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0,1,2"], help="run seeds, run.seed (default 0,1,2)")
    ap.add_argument("--student", choices=["smollm2", "scripted"], default="smollm2", help="who is taught")
    ap.add_argument("--smollm2", default="data/models/smollm2", help="SmolLM2's weights (flywheel models add smollm2)")
    ap.add_argument("--models-dir", default="data/models", help="the embedded world's tiny models (built if missing)")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="runs at a time (default: the CPU count)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra flywheel --set overrides")
    args = ap.parse_args()
    from flywheel.config.loading import load_config
    from flywheel.config.tree import FlywheelConfig
    from flywheel.face.cli import QUIET_ENV
    from flywheel.worlds.tinymodels import bootstrap

    for key, value in {**QUIET_ENV, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}.items():
        os.environ.setdefault(key, value)
    seeds = parse_seeds(args.seeds)
    bootstrap(load_config(None, [f"world.models_dir={args.models_dir}"]).world)  # the default suite's teachers
    cfg = load_config(None, [*PINNED, f"world.models_dir={args.models_dir}", *args.overrides])
    student = {**SMOLLM2, "path": args.smollm2} if args.student == "smollm2" else SCRIPTED
    cfg = FlywheelConfig.model_validate({**cfg.model_dump(), "targets": [student], "opponents": TEACHERS})
    teachers = [t["name"] for t in TEACHERS]
    tc = cfg.select.teaching
    print(f"teaching {student['name']}: {tc.rounds} rounds of {tc.lessons} lessons, teachers {', '.join(teachers)} "
          f"({tc.policy} bandit per cell); run seeds {seeds}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="flywheel-teach-") as tmp:
        results = run_all(run_seed, [(cfg, s, Path(tmp)) for s in seeds], args.jobs)
    print(f"{len(seeds)} runs in {time.perf_counter() - t0:.0f} s ({args.jobs} processes)")
    report(results, teachers)


if __name__ == "__main__":
    main()
