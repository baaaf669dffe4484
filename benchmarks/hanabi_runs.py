"""Hanabi: what runs of ``flows/recipes/hanabi.yaml`` made of the target as a partner.

    flywheel run flows/recipes/hanabi.yaml --set run.seed=0 --set world.seed=0 --set world.models_dir=data/models-h0
    python -m benchmarks.hanabi_runs data/runs/<run 0> [data/runs/<run 1> ...]

Prints, per run and iteration, from ``ratings/iter-000k-hanabi.json``: the target version's
self-play score, its score beside the cautious bot, and the bot's own self-play, each the mean over
the eval deals with its 95% interval; then the ceiling (seats that see their own cards).

Then the paired comparison at each run's last iteration (``--at K``: at iteration K): the team of the target and the bot, and
the bot's self-play team, played the same eval deals (duplicate battles), so per deal the
difference of their scores (read from the eval judgments). Per run: the mean difference with a 95%
t interval, and the deals won, tied and lost. Pooled over the runs: the mean of every per-deal
difference with a 95% interval from a bootstrap that resamples deals within each run; last, the
line ``beside the bot minus the bot with itself: +X (95% CI lo to hi) over N runs``. Nothing is
run again.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from benchmarks.stats import mean_ci, stratified_bootstrap
from flywheel.ground.records import team_members
from flywheel.ground.store import RunStore

BOT = "cautious"


def iterations(run_dir: Path) -> list[tuple[int, dict]]:
    """(k, the iteration's hanabi report) for every evaluated iteration, in order."""
    out = []
    for path in sorted((run_dir / "ratings").glob("iter-*-hanabi.json")):
        out.append((int(re.search(r"iter-(\d+)", path.name).group(1)), json.loads(path.read_text())))
    return out


def beside_the_bot(team: str, version: str) -> bool:
    """Whether ``team`` is ``version`` and the bot, in either seat."""
    return sorted(team_members(team)) == sorted([version, BOT])


def version_rows(teams: dict[str, dict]) -> tuple[str, dict | None, dict | None]:
    """The target version this report evaluated, its self-play row and its row beside the bot."""
    version = next(t for t in teams if "@" in t and "+" not in t)
    beside = next((v for t, v in teams.items() if beside_the_bot(t, version)), None)
    return version, teams.get(version), beside


def paired(store: RunStore, k: int, version: str) -> list[float]:
    """Per eval deal of iteration ``k``: the score of the version beside the bot minus the bot's
    self-play score on the same deal."""
    diffs = []
    for jb in store.judged(k, "eval"):
        b, raw = jb.battle, json.loads(jb.judgment.raw)
        teams = {"a": b.model_a, "b": b.model_b}
        mine = [s for s, t in teams.items() if beside_the_bot(t, version)]
        theirs = [s for s, t in teams.items() if t == BOT]
        if mine and theirs:
            diffs.append(float(raw["scores"][mine[0]] - raw["scores"][theirs[0]]))
    return diffs


def show(row: dict | None) -> str:
    return "-" if row is None else f"{row['mean_score']:.2f} ({row['ci_low']:.2f}-{row['ci_high']:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of the Hanabi recipe")
    ap.add_argument("--at", type=int, default=None, help="the iteration compared deal by deal (default: each run's last)")
    args = ap.parse_args()
    groups = []
    for run in args.runs:
        reports = iterations(run)
        if not reports:
            raise SystemExit(f"error: {run}: no ratings/iter-*-hanabi.json (not a Hanabi run?)")
        print(f"{run}")
        print("iteration  version  self-play  beside the bot  the bot with itself")
        for k, rep in reports:
            version, alone, beside = version_rows(rep["teams"])
            print(f"{k:9d}  {version}  {show(alone)}  {show(beside)}  {show(rep['teams'].get(BOT))}")
        at = [r for r in reports if r[0] == args.at] if args.at is not None else reports[-1:]
        if not at:
            raise SystemExit(f"error: {run}: iteration {args.at} was not evaluated")
        k, rep = at[0]
        ceiling = rep["ceiling_open_hands"]
        print(f"ceiling (open hands): {ceiling['mean_score']:.2f} ({ceiling['ci_low']:.2f}-{ceiling['ci_high']:.2f}) "
              f"of {rep['max_score']}")
        version = version_rows(rep["teams"])[0]
        diffs = paired(RunStore(run), k, version)
        mean, half = mean_ci(diffs)
        won, tied = sum(d > 0 for d in diffs), sum(d == 0 for d in diffs)
        print(f"{version} beside the bot minus the bot with itself, {len(diffs)} deals: "
              f"{mean:+.3f} (95% CI {mean - half:+.3f} to {mean + half:+.3f}); "
              f"won {won}, tied {tied}, lost {len(diffs) - won - tied}\n")
        groups.append(diffs)
    pooled = stratified_bootstrap(groups)
    print(f"beside the bot minus the bot with itself: {pooled.mean:+.3f} "
          f"(95% CI {pooled.lower:+.3f} to {pooled.upper:+.3f}) over {len(groups)} runs")


if __name__ == "__main__":
    main()
