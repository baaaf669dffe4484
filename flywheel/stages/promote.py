"""promote: a target's new version replaces its current one only if it is at least as good on
the validation split (``evaluate.promotion: validation``, Arena Learning's practice); otherwise
the current version keeps playing and is the one trained on next, and the new version stays on
disk, recorded as not promoted. The eval split is never read here."""

from __future__ import annotations

import logging

from flywheel.ground.records import versioned
from flywheel.run.context import Context, stage
from flywheel.run.results import PromoteResult, Promotion

log = logging.getLogger("flywheel")


@stage("promote", PromoteResult)
def promote_versions(ctx: Context, k: int) -> PromoteResult:
    """Decide, per target, whether version ``k`` replaces the version that played in iteration ``k``."""
    rule, margin = ctx.cfg.evaluate.promotion, ctx.cfg.evaluate.promotion_margin
    out = {}
    for t in ctx.roster.targets:
        candidate, incumbent = versioned(t, k), ctx.current_version(t, k)
        new, old = validation_figure(ctx, candidate), validation_figure(ctx, incumbent)
        promoted = rule == "always" or new is None or old is None or new >= old - margin
        out[t] = Promotion(candidate, incumbent, promoted, rule, new, old)
        if not promoted:
            log.info("%s not promoted: validation %.3f < %.3f of %s, which stays", candidate, new, old, incumbent)
    return PromoteResult(out)


def validation_figure(ctx: Context, version: str) -> float | None:
    """A version's validation accuracy (games: win-or-draw rate), from the evaluation of the
    iteration that made it; None where it has none (a run made before the validation split)."""
    ev = ctx.version_eval(version)
    return ev.validation.accuracy if ev is not None and ev.validation is not None else None
