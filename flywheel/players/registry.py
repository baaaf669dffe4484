"""Player kinds by name, resolved lazily (``"module:Class"``), so optional back ends are only
imported when a config asks for them. A user class is named the same way: ``my_pkg.mod:MyPlayer``.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from flywheel.players.player import Player

PLAYER_KINDS: dict[str, str] = {
    "transformers": "flywheel.players.hf:TransformersPlayer",
    "openai": "flywheel.players.openai_player:OpenAIPlayer",
    "anthropic": "flywheel.players.anthropic_player:AnthropicPlayer",
    "vllm": "flywheel.players.vllm_player:VLLMPlayer",
    "random": "flywheel.players.reference:RandomMover",
    "minimax": "flywheel.players.reference:MinimaxPlayer",
    "cautious": "flywheel.players.reference:CautiousPartner",
    "reference-answer": "flywheel.players.scripted:ReferenceTeacher",
    "wrong-answer": "flywheel.players.scripted:WrongTeacher",
}


def resolve(kind: str, registry: dict[str, str] = PLAYER_KINDS) -> type:
    """The class for a registered kind or a ``module:Class`` path; typos get a suggestion."""
    target = registry.get(kind)
    if target is None:
        if ":" not in kind:
            close = difflib.get_close_matches(kind, list(registry), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown kind {kind!r}{hint} (known: {', '.join(sorted(registry))})")
        target = kind
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"kind {kind!r}: cannot import {module_name!r}: {e}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"kind {kind!r}: {module_name!r} has no attribute {attr!r}") from None


def create_player(kind: str, name: str, **kwargs: Any) -> Player:
    """A player of ``kind`` from constructor arguments."""
    return _checked(kind, resolve(kind)(name=name, **kwargs))


def player_from_config(pc: Any, name: str, setup: Any) -> Player:
    """A player from its ``PlayerConfig`` through its kind's ``from_config`` (``setup``: a
    ``PlayerSetup``, what the run resolved for it)."""
    return _checked(pc.kind, resolve(pc.kind).from_config(pc, name, setup))


def _checked(kind: str, player: Any) -> Player:
    if not isinstance(player, Player):
        raise TypeError(f"kind {kind!r} built {type(player).__name__}, which is not a Player")
    return player
