"""Weights by category, from the gap between the best opponent's validation accuracy and the
target's: how often each SFT row appears (``train.gap_mix``), what each prompt's pick score is
multiplied by (``train.rl.gap_pick``), and how the select stage spreads the battles it does not
leave to the bandit (``select.gap_spread``). Weighed once an iteration and kept (in the train
state, or beside the select stage's plans), so that a resumed phase or round and every
``accelerate`` rank use the same ones."""

from __future__ import annotations

import logging
from pathlib import Path

from flywheel.config.tree import picks_prompts
from flywheel.ground.atomic import atomic_write_json, read_json
from flywheel.learning.mix import gap_weights
from flywheel.learning.training import is_main_process
from flywheel.run.context import Context
from flywheel.stages.evaluate import validation_accuracy

log = logging.getLogger("flywheel")


def mix_weights(ctx: Context, k: int, t: str) -> dict[str, float] | None:
    """``train.gap_mix``: per category, how many times each of target ``t``'s SFT rows appears in
    iteration ``k``'s data, on average (``flywheel.learning.mix.gap_weights``). None with ``gap_mix``
    0, and in an iteration without SFT rows."""
    tc = ctx.cfg.train
    method = tc.method_of(k)
    if not tc.gap_mix or not (method in ("sft", "expert") or method.startswith("sft+")):
        return None
    return category_gaps(ctx, k, t, name="train.gap_mix", strength=tc.gap_mix,
                         kept=ctx.store.train_state_dir(k, t) / "mix.json", says="rows of %s in the data, on average")


def pick_weights(ctx: Context, k: int, t: str) -> dict[str, float] | None:
    """``train.rl.gap_pick``: per category, what target ``t``'s prompts' learnability (before its own
    answers are sampled in iteration ``k``) and chance to teach (GRPO's and RLOO's online picks)
    are multiplied by. None with ``gap_pick`` 0, and in an iteration that picks no prompts that way."""
    tc = ctx.cfg.train
    if not tc.rl.gap_pick or not picks_prompts(tc, tc.method_of(k)):
        return None
    return category_gaps(ctx, k, t, name="train.rl.gap_pick", strength=tc.rl.gap_pick,
                         kept=ctx.store.train_state_dir(k, t) / "pick.json", says="learnability of %s's prompts, times")


def spread_weights(ctx: Context, k: int, t: str) -> dict[str, float] | None:
    """``select.gap_spread``: per category, the weight of a cell of it in the evenly spread share of
    target ``t``'s battles in iteration ``k`` (``select.prompt_floor``). None with ``gap_spread`` 0."""
    strength = ctx.cfg.select.gap_spread
    if not strength:
        return None
    return category_gaps(ctx, k, t, name="select.gap_spread", strength=strength, kept=ctx.store.spread_path(k, t),
                         says="evenly spread battles of %s, weighed by")


def category_gaps(ctx: Context, k: int, t: str, *, name: str, strength: float, kept: Path,
                  says: str) -> dict[str, float]:
    """Per category, 1 + ``strength`` x the gap between the best opponent's validation accuracy and
    target ``t``'s version in use in iteration ``k`` (the one it trains from;
    ``flywheel.learning.mix.gap_weights``; the opponents' answered once a run, through the
    generation cache). Kept at ``kept`` (the train state, or the select stage's file), so that a
    killed phase or round resumes, and every ``accelerate`` rank trains, on the same weights, even
    where an opponent's call failed and is asked again."""
    if (stored := read_json(kept)) is not None:
        return stored
    version = ctx.current_version(t, k)
    own = ctx.version_eval(version)
    if own is None or own.validation is None:
        raise RuntimeError(f"{name}: {version} has no validation figures (its iteration's evaluate stage)")
    opponents = [validation_accuracy(ctx, o, k)[1] for o in ctx.roster.opponents]
    weights = gap_weights(own.validation.accuracy_by_category, opponents, strength)
    log.info(says + ", per category (%s %g): %s", t, name, strength, weights)
    if is_main_process():
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(kept, weights)
    return weights
