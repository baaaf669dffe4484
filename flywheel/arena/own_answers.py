"""The target's own answers to its RL prompts, sampled in rounds that the learnability posterior
steers (``flywheel.learning.onpolicy``): each round samples ``k`` answers to the prompts the
target is likeliest to pass sometimes, scores them with the phase's reward, and updates the
posterior (the prompt's and its cell's) before the next round picks. Flat groups are counted and
kept apart; sampling stops at the answer budget or when the prompts run out.

The answers come from the target's player as it plays (its chat template, stop strings, device),
sampled at ``train.rl.temperature``, so what a method learns from is what the target would say."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from flywheel.ground.atomic import atomic_write_text
from flywheel.ground.records import Prompt
from flywheel.ground.row_files import read_jsonl
from flywheel.learning.onpolicy import Group, PromptPosterior, cell_of, pick
from flywheel.learning.rl import Scorer, finite, scored_safely
from flywheel.players.player import Player, SamplingParams

log = logging.getLogger("flywheel")

# Prompts sampled per round (k answers each): small enough that the posterior steers, large
# enough for batched generation; and at least ROUNDS rounds where the budget allows, so that the
# posterior steers a small budget too (a SmolLM2 phase samples 60 prompts).
ROUND = 256
ROUNDS = 4
COPY_SEED = 100_003  # the seed of a prompt's j-th answer: the round's seed + COPY_SEED * j


def sample_groups(player: Player, params: SamplingParams, rows: list[dict], scorer: Scorer, *, k: int,
                  budget: int, at: float, seed: int, strength: float = 2.0,
                  weights: Mapping[str, float] | None = None, saved: Path | None = None) -> list[Group]:
    """Groups of ``k`` sampled answers, ``ROUND`` prompts a round (fewer where the budget holds under
    ``ROUNDS`` rounds of them) chosen by learnability (each prompt once), until ``budget`` answers
    are generated or every prompt is sampled; ``weights``: per category, what its prompts'
    learnability is multiplied by before the picking (``train.rl.gap_pick``). ``params``: the
    target's sampling (temperature set). ``saved``: where the groups are kept once sampled (JSON
    lines); a phase resumed after a kill reads them back instead of sampling again."""
    if saved is not None and saved.exists():
        return [_group_of(r) for r in read_jsonl(saved)]
    rng = random.Random(seed)
    posterior = PromptPosterior(strength)
    seen: set[str] = set()
    groups: list[Group] = []
    answers, rnd = 0, 0
    per_round = min(ROUND, max(1, budget // k // ROUNDS))
    while answers + k <= budget:
        chosen = pick(rows, posterior, min(per_round, (budget - answers) // k), seen, rng, weights)
        if not chosen:
            break
        rnd += 1
        got = _sample_round(player, replace(params, seed=seed + rnd), chosen, scorer, k, rnd)
        for g in got:
            posterior.update(g.row["prompt_id"], cell_of(g.row), len(g.passed(at)), len(g.scored))
        seen |= {r["prompt_id"] for r in chosen}
        groups += got
        answers += k * len(chosen)
        log.debug("own answers round %d: %d prompts, %d answers so far", rnd, len(chosen), answers)
    if saved is not None:
        atomic_write_text(saved, "".join(json.dumps(_json_of(g)) + "\n" for g in groups))
    return groups


def _sample_round(player: Player, params: SamplingParams, rows: list[dict], scorer: Scorer, k: int,
                  rnd: int) -> list[Group]:
    prompts = [Prompt(f"{r['prompt_id']}#{j}", r["prompt_text"], str(r.get("category") or ""),
                      int(r.get("level") or 0), r.get("reference"), "train", history=r.get("history") or "")
               for r in rows for j in range(k)]
    # The j-th answer of every prompt comes from its own call and seed: a server seeds each request
    # (vLLM, an OpenAI-compatible API), and one seed for all k copies would give k equal answers.
    by_copy = {j: player.generate(prompts[j::k], replace(params, seed=params.seed + COPY_SEED * j)) for j in range(k)}
    gens = [by_copy[j][i] for i in range(len(rows)) for j in range(k)]
    texts = [g.text if g.ok else "" for g in gens]
    columns = {c: [r.get(c) for r in rows for _ in range(k)] for c in rows[0] if c != "prompt"}
    scored = scored_safely(scorer, [p.text for p in prompts], texts, columns)
    out = []
    for i, r in enumerate(rows):
        part = range(i * k, (i + 1) * k)
        rewards = tuple(None if not gens[j].ok else finite(scored[j][0]) for j in part)
        errors = tuple(gens[j].error if not gens[j].ok else scored[j][1] for j in part)
        out.append(Group(r, tuple(texts[j] for j in part), rewards, errors, rnd))
    return out


def _json_of(g: Group) -> dict:
    return {"row": g.row, "answers": list(g.answers), "rewards": list(g.rewards), "errors": list(g.errors),
            "round": g.round}


def _group_of(d: dict) -> Group:
    return Group(d["row"], tuple(d["answers"]), tuple(d["rewards"]), tuple(d["errors"]), d["round"])
