"""Evolved prompts against the prompts they came from, side by side in one run.

Each run seed runs the embedded world with ``select.evolve`` on (the procedural evolver: depth
lengthens operands and raises the level, breadth composes ``rev`` with sort and arithmetic;
docs/selection.md). After each iteration the arms that yielded most give parents, whose rewrites
join the pool as arms of their own (``evolved/<cell>``). From the second iteration on, every
train battle of the target falls in one of three groups:

- ``evolved``: on a prompt evolved in an earlier iteration;
- ``parents``: on a prompt an evolved prompt came from (played again: a parent is chosen because
  it was played, and nothing keeps it out of later iterations);
- ``parent arms``: on any other prompt of the arms the parents came from.

The figure of a group is its yield per battle: the share of its battles that made a new training
example (the target lost on a prompt that had not yielded yet in the iteration: the ``yield``
reward, flywheel/arena/bandit_rewards.py), and beside it the share of its battles that both players got
wrong (no one to learn from). Per group: the mean over the runs and its 95% CI; then the
differences ``evolved - parents`` and ``evolved - parent arms``, per run, mean and 95% CI; per
evolving method, the evolved prompts' yield. The last line, ``ratio: X``, is evolved / parents
(the yields pooled over the runs' battles): above 1 the evolved prompts taught more per battle.

    python -m benchmarks.evolve                         # 3 seeds, the pinned settings below
    python -m benchmarks.evolve --seeds 0,1,2,3,4 --set select.evolve.per_iteration=48
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.stats import default_jobs, mean_ci, parse_seeds, run_all

# Every setting the figures depend on (the world's defaults beside them): short enough for three
# seeds in a few minutes on two cores, long enough for two iterations on evolved prompts.
PINNED = ["run.iterations=3", "select.battles_per_iteration=600", "select.rounds=3", "select.reward=yield",
          "select.policy=thompson", "select.prompt_floor=0.5", "select.evolve.enabled=true",
          "select.evolve.evolver=procedural", "select.evolve.arms=3", "select.evolve.per_iteration=36",
          "train.steps=200", "rating.bootstrap_rounds=0", "evaluate.promotion=validation"]
GROUPS = ("evolved", "parents", "parent arms")


def groups_of(store, target: str) -> dict[str, list[int]]:
    """Per group (and ``evolved:<method>``), [battles, new examples, both wrong] over iterations 2
    and on (both wrong: a ``tie (bothbad)``, where no player could teach the prompt)."""
    from flywheel.arena.bandit_rewards import feedback, plays

    lineage = {e.id: e for e in store.evolved()}
    arm_of_prompt = {}
    for jb in store.judged(None, "train"):
        arm_of_prompt.setdefault((jb.battle.iteration, jb.battle.prompt_id), jb.battle.arm)
    out: dict[str, list[int]] = {}
    last = max((jb.battle.iteration for jb in store.judged(None, "train")), default=0)
    for k in range(2, last + 1):
        made = [e for e in lineage.values() if e.iteration < k]
        mine = {e.id: e for e in made}
        parents = {e.parent_id for e in made}
        arms = {arm_of_prompt[e.iteration, e.parent_id] for e in made if (e.iteration, e.parent_id) in arm_of_prompt}
        judged = [jb for jb in store.judged(k, "train") if plays(jb.battle, target)]
        for jb, (arm, _, reward) in zip(judged, feedback("yield", judged, target, {}, set())):
            pid = jb.battle.prompt_id
            keys = (["evolved", f"evolved:{mine[pid].method}"] if pid in mine else ["parents"] if pid in parents
                    else ["parent arms"] if arm in arms else [])
            for key in keys:
                tally = out.setdefault(key, [0, 0, 0])
                tally[0] += 1
                tally[1] += int(reward)
                tally[2] += int(jb.judgment.winner == "tie (bothbad)")
    return out


def run_seed(cfg, seed: int, root: Path) -> dict[str, list[int]]:
    """One run of ``cfg`` with run seed ``seed`` (every stage as the flow runs it, no Prefect
    server); its groups' battles and new examples."""
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.iteration import run_to

    tree = cfg.model_dump()
    tree["run"].update(root=str(root), name=f"evolve-s{seed}", seed=seed)
    run_cfg = type(cfg).model_validate(tree)
    ctx = open_run(run_cfg)
    try:
        run_to(ctx, run_cfg.run.iterations)
    finally:
        close_run(ctx)
    return groups_of(ctx.store, run_cfg.targets[0].name)


def rate(tally: list[int] | None) -> float:
    return tally[1] / tally[0] if tally and tally[0] else float("nan")


def report(seeds: list[int], results: list[dict[str, list[int]]]) -> None:
    print(f"{'group':<22}{'battles':>9}{'new':>7}{'both wrong':>12}{'yield per battle, mean +- 95% CI over runs':>46}")
    keys = list(GROUPS) + sorted({k for r in results for k in r if k.startswith("evolved:")})
    for key in keys:
        rates = [rate(r.get(key)) for r in results if r.get(key)]
        battles, new, wrong = (sum(r.get(key, [0, 0, 0])[i] for r in results) for i in (0, 1, 2))
        m, h = mean_ci(rates) if rates else (float("nan"), float("nan"))
        print(f"{key:<22}{battles:>9}{new:>7}{wrong / max(1, battles):>12.1%}{m:>38.3f} +- {h:.3f}  "
              f"(runs: {' '.join(f'{x:.3f}' for x in rates)})")
    for other in GROUPS[1:]:
        diff = [rate(r.get("evolved")) - rate(r.get(other)) for r in results if r.get("evolved") and r.get(other)]
        if diff:
            m, h = mean_ci(diff)
            verdict = "more" if m - h > 0 else "less" if m + h < 0 else "no clear difference"
            print(f"evolved - {other}: {m:+.3f} +- {h:.3f} per battle (95% CI {m - h:+.3f} to {m + h:+.3f}) "
                  f"over {len(diff)} runs: {verdict}")
    pooled = {g: [sum(r.get(g, [0, 0])[i] for r in results) for i in (0, 1)] for g in GROUPS}
    print(f"ratio: {rate(pooled['evolved']) / rate(pooled['parents']):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0,1,2"], help="run seeds, run.seed (default 0,1,2)")
    ap.add_argument("--models-dir", default="data/models", help="the embedded world's tiny models (built if missing)")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="runs at a time (default: the CPU count)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra flywheel --set overrides")
    args = ap.parse_args()
    from flywheel.config.loading import load_config
    from flywheel.face.cli import QUIET_ENV
    from flywheel.worlds.tinymodels import bootstrap

    for key, value in {**QUIET_ENV, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}.items():
        os.environ.setdefault(key, value)
    seeds = parse_seeds(args.seeds)
    cfg = load_config(None, [*PINNED, f"world.models_dir={args.models_dir}", *args.overrides])
    bootstrap(cfg.world)
    print(f"evolved prompts vs their parents: {cfg.run.iterations} iterations, {cfg.select.battles_per_iteration} "
          f"battles each, evolver {cfg.select.evolve.evolver} ({', '.join(cfg.select.evolve.methods)}), "
          f"{cfg.select.evolve.per_iteration} parents from the {cfg.select.evolve.arms} top-yield arms per iteration; "
          f"run seeds {seeds}; battles of iterations 2-{cfg.run.iterations}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="flywheel-evolve-") as tmp:
        results = run_all(run_seed, [(cfg, s, Path(tmp)) for s in seeds], args.jobs)
    print(f"{len(seeds)} runs in {time.perf_counter() - t0:.0f} s ({args.jobs} processes)")
    report(seeds, results)


if __name__ == "__main__":
    main()
