"""Players: anything that answers prompts. See ``player.Player`` for the contract."""

from flywheel.players.player import Player, SamplingParams
from flywheel.players.registry import create_player, resolve

__all__ = ["Player", "SamplingParams", "create_player", "resolve"]
