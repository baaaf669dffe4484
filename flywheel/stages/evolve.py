"""evolve: after an iteration's battles, rewrite prompts of the arms that yielded most into new
ones (``select.evolve``), which join the train pool as new arms from the next iteration. The
prompts and their lineage are written whole to ``evolved/iter-000k.jsonl`` before the stage's
result; a run killed between the two keeps the file it wrote (a player evolver would not write
the same prompts twice), so a resumed run has the same evolved pool."""

from __future__ import annotations

from flywheel.arena.battles import generate_cached
from flywheel.arena.evolved_prompts import EvolveRequest, arm_yields, choose_parents, evolve, top_arms
from flywheel.config.tree import PROCEDURAL
from flywheel.ground.records import Prompt
from flywheel.run.context import Context, stage
from flywheel.run.results import EvolveResult
from flywheel.worlds.evolution import HeldOut


def player_asker(ctx: Context, k: int):
    """The player evolver's calls, through the generation cache and usage log (phase ``evolve``)."""
    player = ctx.cfg.select.evolve.evolver

    def ask(prompts: list[Prompt]) -> list[str | None]:
        gens = generate_cached(ctx.roster, ctx.store, player, prompts, k, "evolve")
        return [gens[p.id].text if gens[p.id].ok else None for p in prompts]

    return ask


@stage("evolve", EvolveResult)
def evolve_prompts(ctx: Context, k: int) -> EvolveResult:
    """Evolve prompts from iteration ``k``'s judged train battles (once: the file on disk is kept)."""
    cfg = ctx.cfg.select.evolve
    judged = ctx.store.judged(k, "train")
    yields, yielded = arm_yields(judged, ctx.roster.targets)
    arms = top_arms(yields, cfg.arms)
    parents = choose_parents(judged, arms, yielded, ctx.prompts, cfg.per_iteration)
    refused = None
    if ctx.store.evolved_path(k).exists():
        made = ctx.store.evolved(k)
    else:
        earlier = [e for e in ctx.evolved if e.iteration != k]
        req = EvolveRequest(
            parents=parents, cfg=cfg, k=k, seed=ctx.cfg.run.seed, lineage={e.id: e for e in earlier},
            train_texts=frozenset(" ".join(p.text.split()) for p in ctx.train_pool + [e.prompt() for e in earlier]),
            held=HeldOut.of(ctx.eval_split + ctx.validation, cfg.near_duplicate),
            max_level=cfg.max_level or max(ctx.cfg.world.tasks.levels))
        out = evolve(req, None if cfg.evolver == PROCEDURAL else player_asker(ctx, k))
        made, refused = out.prompts, dict(sorted(out.refused.items()))
        ctx.store.write_evolved(k, made)
    methods: dict[str, int] = {}
    for e in made:
        methods[e.method] = methods.get(e.method, 0) + 1
    return EvolveResult(cfg.evolver, {a: round(yields[a].rate, 4) for a in arms}, len(parents),
                        dict(sorted(methods.items())), refused)
