"""Answers of a player to prompts, through the run's generation cache (usage goes to usage.jsonl)."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import replace
from pathlib import Path

from flywheel.ground.records import Generation, Prompt, stable_id
from flywheel.ground.store import RunStore
from flywheel.players.api import stopped_by_budget
from flywheel.worlds.world import Roster

log = logging.getLogger("flywheel")


def generate_cached(
    roster: Roster, store: RunStore, player: str, prompts: list[Prompt], iteration: int = 0, phase: str = "train"
) -> dict[str, Generation]:
    """Answers of ``player`` to ``prompts`` by prompt id; only uncached prompts are generated.
    Failed generations are returned (with their error) but never cached. Usage goes to usage.jsonl."""
    params = roster.params(player)
    key = generation_keys(roster, player, prompts)
    cache = store.generations.get_many(key.values())
    out = {p.id: Generation(player, p.id, cache[key[p.id]]) for p in prompts if key[p.id] in cache}
    todo = list({p.id: p for p in prompts if p.id not in out}.values())
    gens: list[Generation] = []
    player_obj = roster.player(player) if todo else None
    before = _usage(player_obj)
    if player_obj is not None:
        # the pooled object may be shared by arena names with the same weights: label by this one
        gens = [replace(g, player=player) for g in player_obj.generate(todo, params)]
        if len(gens) != len(todo):
            raise RuntimeError(f"player {player} returned {len(gens)} generations for {len(todo)} prompts")
        store.generations.put((key[g.prompt_id], g.text) for g in gens if g.ok)
        out.update({g.prompt_id: g for g in gens})
    if prompts:
        after = _usage(player_obj)
        row = {"iteration": iteration, "phase": phase, "player": player,
               "worker": f"{socket.gethostname()}:{os.getpid()}",  # mapped shards run on any process
               "generated": len(todo), "cached": len(prompts) - len(todo), "failed": sum(1 for g in gens if not g.ok)}
        row.update({k: round(after[k] - before.get(k, 0), 6) for k in after})
        store.append_usage(row)
        log.debug("%s: %d generated, %d cached, %d failed", player, len(todo), row["cached"], row["failed"])
    check_failures(player, gens, len(prompts), roster.cfg.run.max_failed_calls, store.root)
    return out


class CallsFailed(RuntimeError):
    """More of a batch's calls stayed failed than ``run.max_failed_calls``: nothing of it is used."""


def check_failures(player: str, gens: list[Generation], asked: int, limit: float, run_dir: Path) -> None:
    """Raise CallsFailed when more than ``limit`` of the ``asked`` answers (cached ones too) are
    among ``gens`` that failed (calls the budget stopped aside). The answers that passed are cached
    already, so a resumed run asks only the rest."""
    failed = [g for g in gens if not g.ok and not stopped_by_budget(g.error)]
    if failed and len(failed) > limit * asked:
        raise CallsFailed(f"{player}: {len(failed)} of {asked} answers failed after retries ({failed[0].error}); "
                          f"above run.max_failed_calls {limit:g}, the run stops with nothing of them counted; "
                          f"once the server answers again, go on with: flywheel run --resume {run_dir}")


def cached_answers(roster: Roster, store: RunStore, player: str, prompts: list[Prompt]) -> dict[str, str]:
    """Answers of ``player`` to ``prompts`` that the generation cache holds, by prompt id; nothing is
    generated or logged (a prompt never answered, or whose call failed, is absent)."""
    key = generation_keys(roster, player, prompts)
    cache = store.generations.get_many(key.values())
    return {p.id: cache[key[p.id]] for p in prompts if key[p.id] in cache}


def generation_keys(roster: Roster, player: str, prompts: list[Prompt]) -> dict[str, str]:
    """The generation cache's key of each prompt's answer by ``player``, by prompt id (in a
    conversation, the earlier turns are part of it)."""
    params = roster.params(player)
    ident = roster.identity(player)
    return {p.id: stable_id(player, ident, p.text if not p.history else f"{p.history}\x1e{p.text}",
                            params.max_new_tokens, params.temperature or 0.0, params.seed)
            for p in prompts}


def _usage(player) -> dict[str, float]:
    usage = getattr(player, "usage", None)
    return usage.to_dict() if usage is not None else {}
