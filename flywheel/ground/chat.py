"""Chat templates, the one place that decides how a local model is asked.

A local model is asked through its tokenizer's chat template when it has one (``chat: auto``),
always (``on``: a model without one is an error) or never (``off``: raw text). What it is asked
is also what it is trained on: a chat target's SFT and DPO rows are conversational (TRL's
``[{"role": ..., "content": ...}]`` format), with its system prompt.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from flywheel.ground.conversation import decode, plain

log = logging.getLogger("flywheel")


class ChatTemplateMissing(ValueError):
    """``chat: on`` for a model whose tokenizer has no chat template."""


def messages(text: str, system: str | None = None, history: list[dict] | None = None) -> list[dict[str, str]]:
    """The conversation that asks ``text`` (after ``system``, when there is one, and the earlier
    turns of a conversation, ``history``)."""
    return ([{"role": "system", "content": system}] if system else []) + plain(history or []) + [
        {"role": "user", "content": text}]


RAW_TURN_SEP = " "  # raw text: between one turn's answer and the next user turn


def raw_prompt(text: str, system: str | None = None, history: list[dict] | None = None) -> str:
    """What a model without a chat template reads: the system prompt, a blank line, the prompt. In
    a conversation each earlier user turn is followed at once by its answer (the text the model
    continued it with), and turns are separated by one space: ``17+25=42 +7=``."""
    earlier = "".join(m["content"] + (RAW_TURN_SEP if m["role"] == "assistant" else "") for m in history or [])
    return f"{system}\n\n{earlier}{text}" if system else earlier + text


def prompt_as_read(text: str, history: list[dict], chat: bool, system: str | None) -> str | list[dict[str, str]]:
    """A prompt as a target trains on it: the conversation that asks it, after its system prompt
    and earlier turns (a chat target: TRL applies its chat template as the player does), or the
    raw text of its earlier turns and itself (``raw_prompt``; the system prompt is left out)."""
    return messages(text, system, history) if chat else raw_prompt(text, None, history)


def history_of(prompt) -> list[dict]:
    """The earlier messages of a ``Prompt`` (its ``history`` decoded; none when it is asked
    alone): a conversation's earlier turns, or a teacher's one-shot example."""
    return decode(getattr(prompt, "history", ""))


def assistant(text: str) -> list[dict[str, str]]:
    """An answer as one assistant turn (TRL's conversational completion / chosen / rejected)."""
    return [{"role": "assistant", "content": text}]


# Dataset columns that hold text, or conversations when a target chats.
TEXT_COLUMNS = ("prompt", "completion", "chosen", "rejected")


def template_of(path: str | Path) -> str | None:
    """The chat template saved with a checkpoint (``chat_template.jinja`` or the tokenizer
    config's ``chat_template``), read without loading anything; None if it has none."""
    folder = Path(path)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = folder / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, str):
            return template
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            return named.get("default")
    return None


def uses_chat(template: str | None, setting: str, player: str) -> bool:
    """Whether a local player is asked through its chat template (see the module docstring)."""
    if setting == "off":
        return False
    if template is None:
        if setting == "on":
            raise ChatTemplateMissing(f"player {player}: chat is 'on' but its tokenizer has no chat template "
                                      "(set chat: auto to ask it in raw text)")
        return False
    return True


_NOTED: set[str] = set()


def note_raw_text(player: str) -> None:
    """Say once per process (a run reloads its players every iteration) that ``player`` is asked
    in raw text."""
    if player not in _NOTED:
        _NOTED.add(player)
        log.info("player %s: no chat template; it is asked in raw text", player)


def template_hash(template: str | None) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()[:12] if template else "raw"


def cut_at_stop(text: str, stop: tuple[str, ...] | list[str]) -> str:
    """``text`` up to the first stop string (not included)."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    return text[:cut]


def split_prompt(value, history: str = "") -> tuple[str, list[dict]]:
    """(last user turn, earlier messages) of a dataset row's prompt: a conversation (its system
    prompt left out), or text with the row's ``history`` column."""
    if isinstance(value, str):
        return value, decode(history)
    turns = [m for m in value if m.get("role") != "system"]
    return turns[-1]["content"], plain(turns[:-1])


def as_text(value) -> str:
    """A prompt or answer of either format as plain text: a string as it is, or the content of
    a conversation's user / assistant turns (the system prompt left out)."""
    if isinstance(value, str):
        return value
    return "\n".join(m["content"] for m in value if m.get("role") != "system")
