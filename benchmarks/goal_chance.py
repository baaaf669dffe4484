"""What the second goal asks of a run, beside what noise allows: the chance that a model exactly as
good as the best opponent in every learnable category reaches 0.90 of it everywhere on one run's
prompts (each prompt right or wrong independently, as ``benchmarks.efficacy`` reads its
worst-category goal), and the chance that this happens on more than half of several runs.

A run's split has tens of prompts a category, so a model that matches its teacher still falls
under 0.90 of the teacher's measured accuracy in some category now and then; "on most runs" then
asks for more than matching.

    python -m benchmarks.goal_chance SUMMARIES --recipe flows/recipes/few_battles.yaml

reads the ``sft`` runs' summaries a ``benchmarks.rl --summaries SUMMARIES`` kept (the chance depends
only on the opponents and the world's prompts, the same in every arm) and prints, per split, the
chance a run and on more than half of the runs."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.efficacy import GOALS, by_category, chance_at_least


def prompts_by_category(overrides: list[str], split: str = "eval", recipe: Path | None = None) -> dict[str, int]:
    """Per category, the number of prompts of ``split`` (``eval`` or ``validation``) in the world
    ``recipe`` with ``overrides`` makes."""
    from flywheel.config.loading import load_config
    from flywheel.worlds.world import world_pools

    splits = world_pools(load_config(recipe, overrides).world)
    out: dict[str, int] = {}
    for p in splits.eval if split == "eval" else splits.validation:
        out[p.category] = out.get(p.category, 0) + 1
    return out


def equal_model_passes(summary: dict, target: str, guess: dict[str, float], counts: dict[str, int],
                       split: str, margin: float) -> float | None:
    """The chance that a model whose accuracy in each learnable category (the best opponent
    ``margin`` above the commonest answer's ``guess``) equals the best opponent's measured one scores
    at least 0.90 of it in all of them on ``counts`` prompts a category. None where the summary has
    no opponent figures on ``split``."""
    cats = by_category(summary, target, split)
    if not cats:
        return None
    bar = GOALS["worst_category"][1]
    chance = 1.0
    for c, (_, _, top, _) in cats.items():
        if top >= guess.get(c, 0.0) + margin and top > 0:
            n = counts[c]
            chance *= chance_at_least(n, top, bar * round(top * n) / n)
    return chance


def more_than_half(chances: list[float]) -> float:
    """The chance that more than half of independent runs succeed, run i with ``chances[i]``."""
    dist = [1.0]  # dist[k]: the chance of k successes so far
    for p in chances:
        dist = [(dist[k] if k < len(dist) else 0.0) * (1 - p) + (dist[k - 1] * p if k > 0 else 0.0)
                for k in range(len(dist) + 1)]
    return sum(dist[len(chances) // 2 + 1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summaries", type=Path, help="a folder of summaries kept by benchmarks.rl --summaries")
    ap.add_argument("--recipe", type=Path, default=None, help="the recipe the runs started from")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="an override the runs took that changes the world (e.g. a pool's size)")
    args = ap.parse_args()
    from benchmarks.rl import LEARNABLE_MARGIN, guess_by_category

    runs = sorted(args.summaries.glob("sft-*.json"))  # <arm>-<steps>-t<suite>-w<pre-training>-s<seed>.json
    if not runs:
        ap.exit(2, f"error: no sft-*.json summaries in {args.summaries}\n")
    for split in ("eval", "validation"):
        chances = []
        for path in runs:
            suite, pretraining = (part[1:] for part in path.stem.split("-")[2:4])
            world = [*args.overrides, f"world.tasks.seed={suite}", f"world.seed={pretraining}"]
            summary = json.loads(path.read_text())
            chance = equal_model_passes(summary, summary["targets"][0], guess_by_category(world, split, args.recipe),
                                        prompts_by_category(world, split, args.recipe), split, LEARNABLE_MARGIN)
            if chance is not None:
                chances.append(chance)
        if chances:
            print(f"{split}: a model exactly as good as the best opponent in every learnable category reaches 0.90 of "
                  f"it everywhere with probability {statistics.fmean(chances):.2f} a run (mean over {len(chances)}; "
                  f"{min(chances):.2f}-{max(chances):.2f}), on more than half of them {more_than_half(chances):.3f}")


if __name__ == "__main__":
    main()
