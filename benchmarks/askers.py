"""Askers as bandit arms: where runs with several askers spent their train battles.

    flywheel run flows/recipes/multiturn.yaml --set run.iterations=2 --set run.seed=0 --set run.name=askers0 \\
        --set 'askers=[{name: followups, kind: procedural}, {name: parrot, kind: procedural, procedure: repeat}]' \\
        --set 'world.conversation.asker=[followups, parrot]'
    python -m benchmarks.askers data/runs/askers0 [data/runs/askers1 ...]

Prints, per run, iteration and selection round, each asker's share of the round's planned train
battles and how often the target lost them (per judged battle: a loss is a training example,
what the ``yield`` reward pays for, before its one-example-per-prompt rule); then per run and
iteration the share of the iteration's battles on each asker. Reads the plans and the battle and
judgment logs through the run store.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flywheel.ground.records import base_name
from flywheel.ground.store import RunStore


def round_rows(run_dir: Path, target: str = "student") -> list[dict]:
    """One row per (iteration, round, asker): battles planned, share, judged battles, loss rate."""
    store = RunStore(Path(run_dir))
    out = []
    k = 1
    while store.plan(k) is not None:
        judged = {jb.battle.battle_id: jb for jb in store.judged(k, "train")}
        rnd = 1
        while (plan := store.plan(k, rnd)) is not None and plan:
            mine = [s for s in plan if target in (base_name(s.model_a), base_name(s.model_b))]
            for asker in sorted({s.asker for s in mine}):
                specs = [s for s in mine if s.asker == asker]
                scored = [judged[s.battle_id].score_of(target) for s in specs if s.battle_id in judged]
                out.append({"iteration": k, "round": rnd, "asker": asker or "(one)", "battles": len(specs),
                            "share": len(specs) / len(mine), "judged": len(scored),
                            "lost": sum(1 for x in scored if x == 0.0) / len(scored) if scored else float("nan")})
            rnd += 1
        k += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories with several askers")
    ap.add_argument("--target", default="student")
    args = ap.parse_args()
    for run in args.runs:
        rows = round_rows(run, args.target)
        print(f"{run.name}\n{'iter':>4} {'round':>5} {'asker':<12} {'battles':>7} {'share':>6} {'lost':>6}")
        for r in rows:
            print(f"{r['iteration']:>4} {r['round']:>5} {r['asker']:<12} {r['battles']:>7} {r['share']:>6.2f} "
                  f"{r['lost']:>6.3f}")
        for k in sorted({r["iteration"] for r in rows}):
            these = [r for r in rows if r["iteration"] == k]
            total = sum(r["battles"] for r in these)
            shares = {}
            for r in these:
                shares[r["asker"]] = shares.get(r["asker"], 0) + r["battles"] / total
            print(f"{run.name} iteration {k}: " + ", ".join(f"{a} {s:.2f}" for a, s in sorted(shares.items())))


if __name__ == "__main__":
    main()
