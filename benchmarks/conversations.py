"""Two-turn battles: what runs of ``flows/recipes/multiturn.yaml`` made of each turn, with turn 2
read two ways.

    flywheel run flows/recipes/multiturn.yaml --set run.iterations=3 --set run.seed=0 --set run.name=seed0
    python -m benchmarks.conversations data/runs/seed0 [data/runs/seed1 ...]

Turn 2 two ways (docs/worlds.md#turn-2-two-ways):

- **own first answer**: the eval battles' second turn, whose reference is built on the answer each
  model gave (``accuracy_by_turn[1]`` in ``summary.json``): two models' turn 2 on one prompt are
  two questions.
- **fixed second turn**: one second turn per eval prompt, fixed up front with its reference (MT-Bench's
  way), asked of every model after its own first answer (``turn2.fixed``; the conversations in
  ``ratings/iter-000k-second-turns.json``): prompt by prompt, one question.

Prints, per run and iteration, the version in use (after promotion) and its held-out eval
accuracy on turn 1 and on turn 2 both ways, and the best opponent's turn 2 (the opponent best on
turn 2 on its own first answer, both ways); then, per run, the turn-2 gain over the iterations, the
turn-1 change, and the last iteration's figures of both models with their 95% intervals.

Then the paired comparisons on turn 2, one for each way: both models answered the same eval
prompts, so per prompt the difference of their turn-2 correctness (1, 0 or -1; in use minus best
opponent), from the iteration that evaluated the version in use (``name@k``: iteration k; the
opponents are fixed and play in every iteration), checked with the run's verifier exactly as the
evaluate stage checks them. Each model's per-prompt figures must reproduce ``summary.json``
(``accuracy_by_turn[1]``, ``turn2.fixed.accuracy``), and on the fixed turn both models must have
been asked the same text with the same reference on every prompt (else a ``MISMATCH`` line and exit
status 1). Per run (per target, where a run has several): the mean difference with a 95%
paired-bootstrap interval over prompts (2,000 resamples, seed 0), and how many prompts only one of
the two got right. Pooled over the runs: the mean of every per-prompt difference (prompts x runs)
with a 95% interval from a bootstrap that resamples prompts within each run, and the runs where the
version in use is ahead; last, the lines ``paired turn-2 difference, own first answer: +X (95% CI
lo to hi) over N runs`` and ``paired turn-2 difference, fixed second turn: ...`` (``not recorded``
for runs without fixed turns). Nothing is run again.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.stats import PairedDifference, per_prompt_differences, stratified_bootstrap
from flywheel.arena.evaluation import prompt_turn_results
from flywheel.config.loading import load_config
from flywheel.ground.conversation import Message, decode
from flywheel.ground.records import PlayerVersion
from flywheel.ground.store import RunStore, iter_name
from flywheel.run.context import Context

TURN = 1  # the second user turn, 0-based
ROUNDS, SEED = 2000, 0  # bootstrap resamples and their seed
WAYS = {"own": "own first answer", "fixed": "fixed second turn"}


def turns(entry: dict, model: str) -> list[float] | None:
    """A model's eval accuracy per turn in one iteration's summary entry (None if not evaluated)."""
    found = {**entry["eval"], **entry["opponents_eval"]}.get(model)
    return None if found is None else found.get("accuracy_by_turn")


def turn2(entry: dict, model: str, way: str) -> dict | None:
    """A model's turn 2 one way (``own``: on its own first answer, ``fixed``: the fixed second turn)
    in one iteration's summary entry: accuracy, lower, upper, prompts (None where not recorded)."""
    found = ({**entry["eval"], **entry["opponents_eval"]}.get(model) or {}).get("turn2") or {}
    return found.get({"own": "own_answer", "fixed": "fixed"}[way])


def rows(run_dir: Path) -> list[dict]:
    """One row per iteration: the version in use, its turn-1 / turn-2 accuracy (on its own first
    answer, and fixed: None where not recorded), the best opponent's turn 2 both ways."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    out, evaluated = [], {}
    first = summary["iterations"][0]
    opponents = dict(first["opponents_eval"])
    best = max(opponents, key=lambda m: (opponents[m].get("accuracy_by_turn") or [0, 0])[1])
    for e in summary["iterations"]:
        evaluated.update({m: (turns(e, m), turn2(e, m, "fixed")) for m in e["eval"]})
        for target, version in sorted(e.get("current", {}).items()):
            mine, fixed = evaluated.get(version) or ([0.0, 0.0], None)
            theirs = turn2(first, best, "fixed")
            out.append({"run": Path(run_dir).name, "iteration": e["iteration"], "in_use": version,
                        "turn1": (mine or [0.0, 0.0])[0], "turn2": (mine or [0.0, 0.0])[1],
                        "turn2_fixed": fixed["accuracy"] if fixed else None, "best_opponent": best,
                        "opponent_turn2": (opponents[best].get("accuracy_by_turn") or [0, 0])[1],
                        "opponent_turn2_fixed": theirs["accuracy"] if theirs else None})
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


def fixed_conversations(store: RunStore, k: int) -> dict[str, dict[str, list[Message]]] | None:
    """Model -> prompt id -> conversation on the fixed second turns in iteration ``k`` (None: the
    run recorded none)."""
    path = store.ratings_path(f"{iter_name(k)}-second-turns.json")
    return json.loads(path.read_text()) if path.is_file() else None


@dataclass(frozen=True)
class Comparison:
    """Turn 2 read one way, per prompt: whether each of the two models got it right."""

    ours: dict[str, bool]  # prompt id -> turn 2 right (prompts whose turn 2 was checked)
    theirs: dict[str, bool]

    @property
    def difference(self) -> PairedDifference:
        return stratified_bootstrap([per_prompt_differences(self.ours, self.theirs)], ROUNDS, SEED)

    @property
    def discordant(self) -> tuple[int, int]:
        """(prompts only the version in use got right, prompts only the opponent got right)."""
        common = set(self.ours) & set(self.theirs)
        return (sum(self.ours[p] and not self.theirs[p] for p in common),
                sum(self.theirs[p] and not self.ours[p] for p in common))


@dataclass(frozen=True)
class PairedRun:
    """One run's turn-2 comparisons of the version in use with the best opponent on the eval split."""

    run: str
    in_use: str
    opponent: str
    iteration: int  # the iteration whose eval both come from
    own: Comparison  # turn 2 on each model's own first answer (the eval battles)
    fixed: Comparison | None  # the fixed second turn (None: the run recorded none)
    mismatches: tuple[str, ...]  # summary.json figures the per-prompt ones do not reproduce, or unequal questions

    def way(self, name: str) -> Comparison | None:
        return self.own if name == "own" else self.fixed


def turn_correct(ctx: Context, talks: dict[str, list[Message]], prompts: list | None = None) -> dict[str, bool]:
    """Per eval prompt (or per one of ``prompts``), whether turn 2 is right, counted as
    ``conversation_accuracy`` counts it (no conversation: wrong; a turn not reached or without a
    reference: left out)."""
    got = prompt_turn_results(talks, ctx.eval_split if prompts is None else prompts, ctx.correct)
    return {pid: r[TURN] for pid, r in got.items() if len(r) > TURN and r[TURN] is not None}


def _check(model: str, got: dict[str, bool], stored: float | None, where: str) -> list[str]:
    mine = round(sum(got.values()) / len(got), 4) if got else 0.0
    return [] if mine == stored else [f"{model}: {mine} per prompt, {stored} in summary.json ({where})"]


def _fixed(ctx: Context, entry: dict, k: int, version: str, opponent: str) -> tuple[Comparison | None, list[str]]:
    """The fixed-turn comparison of iteration ``k`` and what in it does not hold: a summary figure
    the per-prompt ones do not reproduce, or a prompt whose second question differs between them."""
    talks = fixed_conversations(ctx.store, k)
    if talks is None:
        return None, []
    asked = json.loads(ctx.store.ratings_path("eval-second-turns.json").read_text())
    prompts = [p for p in ctx.eval_split if p.id in asked]
    ours, theirs = (turn_correct(ctx, talks.get(m, {}), prompts) for m in (version, opponent))
    bad = []
    for model, got in ((version, ours), (opponent, theirs)):
        stored = turn2(entry, model, "fixed")
        bad += _check(model, got, stored["accuracy"] if stored else None, f"turn2.fixed, iteration {k}")
    for pid in sorted(asked):
        seen = {(c[TURN * 2]["content"], c[TURN * 2].get("reference")) for m in (version, opponent)
                for c in [talks.get(m, {}).get(pid, [])] if len(c) > TURN * 2}
        if seen - {(asked[pid]["text"], asked[pid]["reference"])}:
            bad.append(f"prompt {pid}: the fixed second turn differs between {version} and {opponent}: {sorted(seen)}")
    return Comparison(ours, theirs), bad


def paired_runs(run_dir: Path) -> list[PairedRun]:
    """Per target, the version in use at the end of the run against the best opponent on turn 2
    (as ``rows`` picks it), per prompt, both ways, from the iteration that evaluated it."""
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
            mismatches += _check(model, got, (turns(entries[k], model) or [None, None])[TURN], f"iteration {k}")
        if set(ours) != set(theirs):
            mismatches.append(f"{version} and {opponent} were checked on different prompts "
                              f"({len(ours)} and {len(theirs)}); only the {len(set(ours) & set(theirs))} shared count")
        fixed, bad = _fixed(ctx, entries[k], k, version, opponent)
        out.append(PairedRun(Path(run_dir).name, version, opponent, k, Comparison(ours, theirs), fixed,
                             tuple(mismatches + bad)))
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


def _opt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _interval(acc: dict | None) -> str:
    return "not recorded" if acc is None else f"{acc['accuracy']:.3f} [{acc['lower']:.3f}, {acc['upper']:.3f}]"


def print_rows(run: Path) -> None:
    """The per-iteration table of one run, its changes, and both models' last turn-2 figures."""
    got = rows(run)
    for r in got:
        print(f"{r['run']:<10} {r['iteration']:>4} {r['in_use']:<12} {r['turn1']:>7.3f} {r['turn2']:>7.3f} "
              f"{_opt(r['turn2_fixed']):>7}  {r['best_opponent']} {r['opponent_turn2']:.3f} / "
              f"{_opt(r['opponent_turn2_fixed'])}")
    first, last = got[0], got[-1]
    print(f"{run.name}: turn 2 own first answer {last['turn2'] - first['turn2']:+.3f}, turn 1 "
          f"{last['turn1'] - first['turn1']:+.3f}, in use vs best opponent on turn 2 own first answer "
          f"{last['turn2'] - last['opponent_turn2']:+.3f}")
    entries = {e["iteration"]: e for e in json.loads((run / "summary.json").read_text())["iterations"]}
    k = PlayerVersion.parse(last["in_use"]).k or 0
    for m in (last["in_use"], last["best_opponent"]):
        print(f"  {m} (iteration {k}), turn 2 with 95% intervals: own first answer "
              f"{_interval(turn2(entries[k], m, 'own'))}, fixed second turn {_interval(turn2(entries[k], m, 'fixed'))}")


def print_paired(paired: list[PairedRun], way: str) -> None:
    """One way's per-run paired differences, pooled, and its last line."""
    have = [(p, p.way(way)) for p in paired if p.way(way) is not None]
    print(f"\n{WAYS[way]}:")
    for p, c in have:
        d, (only_ours, only_theirs) = c.difference, c.discordant
        print(f"{p.run}: {p.in_use} - {p.opponent} (iteration {p.iteration}, {d.prompts} prompts): {_signed(d.mean)} "
              f"(95% CI {_signed(d.lower)} to {_signed(d.upper)}); right only for {p.in_use}: {only_ours}, "
              f"only for {p.opponent}: {only_theirs}")
    if not have:
        print("not recorded in these runs (no fixed second turns: run made without them, or an asker that checks "
              "no turn up front)")
        return
    pooled = stratified_bootstrap([per_prompt_differences(c.ours, c.theirs) for _, c in have], ROUNDS, SEED)
    ahead = sum(c.difference.mean > 0 for _, c in have)
    print(f"pooled: {_signed(pooled.mean)} over {pooled.prompts} prompt pairs (95% CI {_signed(pooled.lower)} to "
          f"{_signed(pooled.upper)}, resampling prompts within each run); "
          f"in use ahead in {ahead} of {len(have)} runs")


def last_line(paired: list[PairedRun], way: str) -> str:
    have = [c for p in paired for c in [p.way(way)] if c is not None]
    if not have:
        return f"paired turn-2 difference, {WAYS[way]}: not recorded in these runs"
    pooled = stratified_bootstrap([per_prompt_differences(c.ours, c.theirs) for c in have], ROUNDS, SEED)
    return (f"paired turn-2 difference, {WAYS[way]}: {_signed(pooled.mean)} (95% CI {_signed(pooled.lower)} to "
            f"{_signed(pooled.upper)}) over {len(have)} runs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of the multiturn recipe")
    args = ap.parse_args()
    bad = check_run_dirs(args.runs)
    if bad:
        print(f"error: {bad}", file=sys.stderr)
        sys.exit(2)
    print(f"{'run':<10} {'iter':>4} {'in use':<12} {'turn 1':>7} {'turn 2':>7} {'fixed':>7}  "
          "best opponent (turn 2: own first answer / fixed)")
    for run in args.runs:
        print_rows(run)
    print("\npaired on turn 2 (in use - best opponent, same eval prompts; 95% CI: paired bootstrap over prompts, "
          f"{ROUNDS} resamples, seed {SEED}):")
    paired = [p for run in args.runs for p in paired_runs(run)]
    for way in WAYS:
        print_paired(paired, way)
    for p in paired:
        for m in p.mismatches:
            print(f"MISMATCH {p.run}: {m}", file=sys.stderr)
    print()
    for way in WAYS:
        print(last_line(paired, way))
    if any(p.mismatches for p in paired):
        sys.exit(1)


if __name__ == "__main__":
    main()
