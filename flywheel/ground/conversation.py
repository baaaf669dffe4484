"""Conversations: several user turns, each answered in turn, kept in flat rows as JSON.

A conversation is a list of messages ``{"role": "user" | "assistant", "content": str}`` in
alternating order, user first (a ``system`` message may open it). In a battle log a user message
may also carry ``reference``: the checkable answer to that turn, which the verifier reads
(``judges/verifier.py``). Records keep conversations as JSON strings (``Prompt.turns`` and
``Prompt.history``, ``Battle.conversation_a`` / ``_b``, ``SFTExample.history``), empty for a
single-turn prompt, so single-turn rows and logs written before conversations read unchanged.
"""

from __future__ import annotations

import json
from typing import Any

Message = dict[str, Any]


def encode(messages: list[Message]) -> str:
    """A conversation as its JSON column value ("" for none)."""
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":")) if messages else ""


def decode(value: str | list | None) -> list[Message]:
    """A conversation column back as messages (an empty value: none)."""
    if not value:
        return []
    return list(value) if isinstance(value, list) else json.loads(value)


def plain(messages: list[Message]) -> list[dict[str, str]]:
    """The messages as a chat model reads them: role and content only (no ``reference``)."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def user_turns(text: str, turns: str) -> list[str]:
    """Every user turn of a prompt: its text, then the later turns it gives up front."""
    return [text, *decode(turns)]


def check_roles(messages: list[Message]) -> None:
    """Raise ValueError, naming the turn, unless ``messages`` is a conversation: an optional system
    message first, then user and assistant turns in turn (user first), none of them empty."""
    body = messages[1:] if messages and _role(messages[0]) == "system" else messages
    for i, m in enumerate(body, 1):
        want = "user" if i % 2 else "assistant"
        role = _role(m)
        if role not in ("user", "assistant"):
            raise ValueError(f"turn {i}: role {role!r} (expected {want})")
        if role != want:
            raise ValueError(f"turn {i}: {_a(role)} turn where {_a(want)} turn belongs")
        content = m.get("content", m.get("value")) if isinstance(m, dict) else None
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"turn {i} ({role}) is empty")
    if not body:
        raise ValueError("no user turn")


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeio' else 'a'} {word}"  # a user, an assistant


ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "bot": "assistant",
         "chatgpt": "assistant", "model": "assistant", "system": "system"}


def _role(m: Any) -> str:
    """A message's role in OpenAI's names (ShareGPT's ``from: human / gpt`` too)."""
    if not isinstance(m, dict):
        return "?"
    raw = str(m.get("role", m.get("from", ""))).lower()
    return ROLES.get(raw, raw)


def normalized(messages: list[Any]) -> list[Message]:
    """ShareGPT or OpenAI messages as ``{"role", "content"}`` (after ``check_roles``)."""
    return [{"role": _role(m), "content": m.get("content", m.get("value"))} for m in messages]


def first_differing_turn(a: list[Message], b: list[Message]) -> int | None:
    """The index of the first assistant message where two conversations differ (their shared
    history is everything before it), or None if their assistant turns are all the same."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x["role"] == "assistant" and x["content"] != y["content"]:
            return i
    return None
