"""Players: anything that answers prompts. See ``base.Player`` for the contract."""

from flywheel.players.base import Player, SamplingParams
from flywheel.players.registry import create_player, resolve

__all__ = ["Player", "SamplingParams", "create_player", "resolve"]
