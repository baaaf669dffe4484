"""The run's bandits as they stand: a target's ``Selector`` read back from the bandit state the
select stage stored (flywheel/stages/select.py, the state's one writer), and battles counted per
prompt arm or asker. The select stage and summary.json's bandit and asker reports read them."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from flywheel.arena import selection
from flywheel.arena.selection import Selector
from flywheel.ground.records import BattleSpec
from flywheel.run.context import Context


def load_selector(ctx: Context, target: str, k: int, rnd: int) -> Selector:
    """The target's bandit state after the latest round before (k, rnd), or a fresh one; arms
    the pool has gained since (evolved prompts) join it unpulled."""
    askers = ctx.cfg.world.conversation.askers
    state = ctx.store.latest_bandit_state(target, (k, rnd))
    if state is None:
        return Selector.new(ctx.cfg.select, list(ctx.pool_by_cell),
                            selection.opponent_arms(ctx.cfg.select, ctx.roster.opponents), askers)
    sel = Selector.from_state(state)
    sel.add_cells(ctx.cfg.select, list(ctx.pool_by_cell))  # evolved prompts' arms, new since that state
    sel.add_askers(ctx.cfg.select, askers)
    return sel


def battles_per(specs: list[BattleSpec], by: Literal["arm", "asker"]) -> dict[str, int]:
    """How many of ``specs`` each prompt arm (``by="arm"``) or asker (``by="asker"``) has, sorted
    by name."""
    return dict(sorted(Counter(getattr(sp, by) for sp in specs).items()))
