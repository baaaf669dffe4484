"""Two-turn battles: what runs of ``flows/recipes/multiturn.yaml`` made of each turn.

    flywheel run flows/recipes/multiturn.yaml --set run.iterations=3 --set run.seed=0 --set run.name=seed0
    python -m benchmarks.conversations data/runs/seed0 [data/runs/seed1 ...]

Prints, per run and iteration, the version in use (after promotion) and its held-out eval
accuracy on turn 1 and turn 2, and the best opponent's on turn 2 (from ``summary.json``); then,
per run, the turn-2 gain over the iterations, the turn-1 change, and whether the version in use
ends above the best opponent on turn 2.

Then the paired comparison on turn 2: both models answered the same eval prompts, so per prompt
the difference of their turn-2 correctness (1, 0 or -1; in use minus best opponent), read from the
eval battles of the iteration that evaluated the version in use (``name@k``: iteration k; the
opponents are fixed and play in every iteration), checked with the run's verifier exactly as the
evaluate stage checks them. Each model's per-prompt figures must reproduce its
``accuracy_by_turn[1]`` in ``summary.json`` (else a ``MISMATCH`` line and exit status 1). Per run
(per target, where a run has several): the mean difference with a 95% paired-bootstrap interval
over prompts (2,000 resamples, seed 0), and how many prompts only one of the two got right. Pooled
over the runs: the mean of every per-prompt difference (prompts x runs) with a 95% interval from a
bootstrap that resamples prompts within each run, and the runs where the version in use is ahead;
last, the line ``paired turn-2 difference: +X (95% CI lo to hi) over N runs``. Nothing is run again.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.stats import PairedDifference, per_prompt_differences, stratified_bootstrap
from flywheel.arena.evaluation import prompt_turn_results
from flywheel.ground.config_io import load_config
from flywheel.ground.conversation import Message, decode
from flywheel.ground.records import PlayerVersion
from flywheel.ground.store import RunStore
from flywheel.stages.context import Context

TURN = 1  # the second user turn, 0-based
ROUNDS, SEED = 2000, 0  # bootstrap resamples and their seed


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


def eval_conversations(store: RunStore, k: int) -> dict[str, dict[str, list[Message]]]:
    """Model -> prompt id -> conversation in iteration ``k``'s eval battles, read as the evaluate
    stage reads them (a later battle's conversation of the same model and prompt replaces an
    earlier one's)."""
    talks: dict[str, dict[str, list[Message]]] = {}
    for bt in store.battles(k, "eval"):
        for model, conv in ((bt.model_a, bt.conversation_a), (bt.model_b, bt.conversation_b)):
            if conv:
                talks.setdefault(model, {})[bt.prompt_id] = decode(conv)
    return talks


@dataclass(frozen=True)
class PairedRun:
    """One run's turn-2 comparison of the version in use with the best opponent on the eval split."""

    run: str
    in_use: str
    opponent: str
    iteration: int  # the iteration whose eval battles both come from
    ours: dict[str, bool]  # prompt id -> turn 2 right (prompts whose turn 2 was checked)
    theirs: dict[str, bool]
    mismatches: tuple[str, ...]  # summary.json figures the per-prompt ones do not reproduce

    @property
    def difference(self) -> PairedDifference:
        return stratified_bootstrap([per_prompt_differences(self.ours, self.theirs)], ROUNDS, SEED)

    @property
    def discordant(self) -> tuple[int, int]:
        """(prompts only the version in use got right, prompts only the opponent got right)."""
        common = set(self.ours) & set(self.theirs)
        return (sum(self.ours[p] and not self.theirs[p] for p in common),
                sum(self.theirs[p] and not self.ours[p] for p in common))


def turn_correct(ctx: Context, talks: dict[str, list[Message]]) -> dict[str, bool]:
    """Per eval prompt, whether turn 2 is right, counted as ``conversation_accuracy`` counts it
    (no conversation: wrong; a turn not reached or without a reference: left out)."""
    got = prompt_turn_results(talks, ctx.eval_split, ctx.correct)
    return {pid: r[TURN] for pid, r in got.items() if len(r) > TURN and r[TURN] is not None}


def paired_runs(run_dir: Path) -> list[PairedRun]:
    """Per target, the version in use at the end of the run against the best opponent on turn 2
    (as ``rows`` picks it), per prompt, from the eval battles of the iteration that evaluated it."""
    summary = json.loads(RunStore(run_dir).summary_path.read_text())
    cfg = load_config(RunStore(run_dir).config_path)
    ctx = Context(cfg, RunStore(run_dir, cfg.run.cache_dir))  # opened read-only: no lock, nothing written
    entries = {e["iteration"]: e for e in summary["iterations"]}
    out = []
    for target in sorted(entries[max(entries)].get("current", {})):
        last = [r for r in rows(run_dir) if PlayerVersion.parse(r["in_use"]).name == target][-1]
        version, opponent = last["in_use"], last["best_opponent"]
        k = PlayerVersion.parse(version).k or 0
        talks = eval_conversations(ctx.store, k)
        ours, theirs = (turn_correct(ctx, talks.get(m, {})) for m in (version, opponent))
        mismatches = []
        for model, got in ((version, ours), (opponent, theirs)):
            stored = (turns(entries[k], model) or [None, None])[TURN]
            mine = round(sum(got.values()) / len(got), 4) if got else 0.0
            if mine != stored:
                mismatches.append(f"{model}: {mine} per prompt, {stored} in summary.json (iteration {k})")
        if set(ours) != set(theirs):
            mismatches.append(f"{version} and {opponent} were checked on different prompts "
                              f"({len(ours)} and {len(theirs)}); only the {len(set(ours) & set(theirs))} shared count")
        out.append(PairedRun(Path(run_dir).name, version, opponent, k, ours, theirs, tuple(mismatches)))
    return out


def check_run_dirs(runs: list[Path]) -> str | None:
    """The first run directory this benchmark cannot read, as one error line (None: all readable)."""
    for run in runs:
        if not RunStore.is_run_dir(run):
            return f"{run}: not a run directory (no config.yaml)"
        if not RunStore(run).summary_path.is_file():
            return f"{run}: no summary.json (no iteration has finished)"
    return None


def _signed(x: float) -> str:
    return f"{x:+.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of the multiturn recipe")
    args = ap.parse_args()
    bad = check_run_dirs(args.runs)
    if bad:
        print(f"error: {bad}", file=sys.stderr)
        sys.exit(2)
    print(f"{'run':<10} {'iter':>4} {'in use':<12} {'turn 1':>7} {'turn 2':>7}  best opponent (turn 2)")
    for run in args.runs:
        got = rows(run)
        for r in got:
            print(f"{r['run']:<10} {r['iteration']:>4} {r['in_use']:<12} {r['turn1']:>7.3f} {r['turn2']:>7.3f}  "
                  f"{r['best_opponent']} {r['opponent_turn2']:.3f}")
        first, last = got[0], got[-1]
        print(f"{run.name}: turn 2 {last['turn2'] - first['turn2']:+.3f}, turn 1 {last['turn1'] - first['turn1']:+.3f}, "
              f"in use vs best opponent on turn 2 {last['turn2'] - last['opponent_turn2']:+.3f}")
    print("\npaired on turn 2 (in use - best opponent, same eval prompts; 95% CI: paired bootstrap over prompts, "
          f"{ROUNDS} resamples, seed {SEED}):")
    paired = [p for run in args.runs for p in paired_runs(run)]
    for p in paired:
        d, (only_ours, only_theirs) = p.difference, p.discordant
        print(f"{p.run}: {p.in_use} - {p.opponent} (iteration {p.iteration}, {d.prompts} prompts): {_signed(d.mean)} "
              f"(95% CI {_signed(d.lower)} to {_signed(d.upper)}); right only for {p.in_use}: {only_ours}, "
              f"only for {p.opponent}: {only_theirs}")
        for m in p.mismatches:
            print(f"MISMATCH {p.run}: {m}", file=sys.stderr)
    pooled = stratified_bootstrap([per_prompt_differences(p.ours, p.theirs) for p in paired], ROUNDS, SEED)
    ahead = sum(p.difference.mean > 0 for p in paired)
    print(f"pooled: {_signed(pooled.mean)} over {pooled.prompts} prompt pairs (95% CI {_signed(pooled.lower)} to "
          f"{_signed(pooled.upper)}, resampling prompts within each run); "
          f"in use ahead in {ahead} of {len(paired)} runs")
    print(f"paired turn-2 difference: {_signed(pooled.mean)} (95% CI {_signed(pooled.lower)} to "
          f"{_signed(pooled.upper)}) over {len(paired)} runs")
    if any(p.mismatches for p in paired):
        sys.exit(1)


if __name__ == "__main__":
    main()
