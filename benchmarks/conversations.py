"""Two-turn battles: what runs of ``flows/recipes/multiturn.yaml`` made of each turn.

    flywheel run flows/recipes/multiturn.yaml --set run.iterations=3 --set run.seed=0 --set run.name=seed0
    python -m benchmarks.conversations data/runs/seed0 [data/runs/seed1 ...]

Prints, per run and iteration, the version in use (after promotion) and its held-out eval
accuracy on turn 1 and turn 2, and the best opponent's on turn 2; then, per run, the turn-2 gain
over the iterations, the turn-1 change, and whether the version in use ends above the best
opponent on turn 2. Reads only ``summary.json`` (``accuracy_by_turn`` of every model).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def turns(entry: dict, model: str) -> list[float] | None:
    """A model's eval accuracy per turn in one iteration's summary entry (None if not evaluated)."""
    found = {**entry["eval"], **entry["opponents_eval"]}.get(model)
    return None if found is None else found.get("accuracy_by_turn")


def rows(run_dir: Path) -> list[dict]:
    """One row per iteration: the version in use, its turn-1 / turn-2 accuracy, the best opponent's turn 2."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    out, evaluated = [], {}
    opponents = {m: v for e in summary["iterations"][:1] for m, v in e["opponents_eval"].items()}
    for e in summary["iterations"]:
        evaluated.update({m: turns(e, m) for m in e["eval"]})
        for target, version in sorted(e.get("current", {}).items()):
            mine = evaluated.get(version) or [0.0, 0.0]
            best = max(opponents, key=lambda m: (opponents[m].get("accuracy_by_turn") or [0, 0])[1])
            out.append({"run": Path(run_dir).name, "iteration": e["iteration"], "in_use": version,
                        "turn1": mine[0], "turn2": mine[1], "best_opponent": best,
                        "opponent_turn2": (opponents[best].get("accuracy_by_turn") or [0, 0])[1]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of the multiturn recipe")
    args = ap.parse_args()
    print(f"{'run':<10} {'iter':>4} {'in use':<12} {'turn 1':>7} {'turn 2':>7}  best opponent (turn 2)")
    for run in args.runs:
        got = rows(run)
        for r in got:
            print(f"{r['run']:<10} {r['iteration']:>4} {r['in_use']:<12} {r['turn1']:>7.3f} {r['turn2']:>7.3f}  "
                  f"{r['best_opponent']} {r['opponent_turn2']:.3f}")
        first, last = got[0], got[-1]
        print(f"{run.name}: turn 2 {last['turn2'] - first['turn2']:+.3f}, turn 1 {last['turn1'] - first['turn1']:+.3f}, "
              f"in use vs best opponent on turn 2 {last['turn2'] - last['opponent_turn2']:+.3f}")


if __name__ == "__main__":
    main()
