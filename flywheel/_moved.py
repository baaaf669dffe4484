"""Old module paths (before the parts became packages) still import: ``flywheel.store`` is
``flywheel.ground.store``, the same module object. A user's ``module:Class`` or ``module:function``
in a saved config, a user's own code and ``python -m flywheel.train_worker`` keep working; new
code imports the new paths (the import-linter contracts see only those)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "flywheel.records": "flywheel.ground.records",
    "flywheel.store": "flywheel.ground.store",
    "flywheel.config_parts": "flywheel.ground.config_parts",
    "flywheel.config": "flywheel.ground.config",
    "flywheel.chat": "flywheel.ground.chat",
    "flywheel.progress": "flywheel.ground.progress",
    "flywheel.reports": "flywheel.ground.reports",
    "flywheel.interrupt": "flywheel.ground.interrupt",
    "flywheel.ratings": "flywheel.maths.ratings",
    "flywheel.bandits": "flywheel.maths.bandits",
    "flywheel.active_eval": "flywheel.maths.active_eval",
    "flywheel.games.reference": "flywheel.players.reference",
    "flywheel.tasks": "flywheel.worlds.tasks",
    "flywheel.prompts": "flywheel.worlds.prompts",
    "flywheel.tinymodels": "flywheel.worlds.tinymodels",
    "flywheel.realmodels": "flywheel.worlds.realmodels",
    "flywheel.world": "flywheel.worlds.world",
    "flywheel.games.pools": "flywheel.worlds.game_pools",
    "flywheel.selection": "flywheel.arena.selection",
    "flywheel.evaluation": "flywheel.arena.evaluation",
    "flywheel.games.play": "flywheel.arena.games",
    "flywheel.games.scores": "flywheel.arena.game_scores",
    "flywheel.curation": "flywheel.learning.curation",
    "flywheel.training": "flywheel.learning.training",
    "flywheel.merging": "flywheel.learning.merging",
    "flywheel.allocation": "flywheel.learning.allocation",
    "flywheel.games.curation": "flywheel.learning.game_curation",
    "flywheel.train_worker": "flywheel.stages.train_worker",
    "flywheel.cli_data": "flywheel.face.cli_data",
    "flywheel.queries": "flywheel.face.queries",
    "flywheel.checks": "flywheel.face.checks",
    "flywheel.plots": "flywheel.face.plots",
    "flywheel.dataview": "flywheel.face.dataview",
    "flywheel.exports": "flywheel.face.exports",
    "flywheel.hub": "flywheel.face.hub",
    "flywheel.battlelog": "flywheel.face.battlelog",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and hands back the module now at its new one."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module) -> None:
        pass

    def get_code(self, name):
        """``python -m OLD.PATH`` (runpy) runs the module's code from its new place."""
        new = MOVED[name]
        return importlib.util.find_spec(new).loader.get_code(new)

    def is_package(self, name) -> bool:
        return False


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
