"""The config tree from and to YAML: recipes, ``--set`` overrides, section aliases. Unknown keys
and bad values fail at load time with the field's dotted path in the message (``ConfigError``),
before anything is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from flywheel.config.tree import FlywheelConfig


class ConfigError(ValueError):
    """A config that cannot be used; the message names the offending field path(s)."""


def _format_error(err: ValidationError) -> str:
    """One line for one error (``invalid config: train.steps: ...``; a whole-config rule names its
    fields itself), else one indented line per error."""
    lines = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"{path}: {msg}" if path else msg)
    return "invalid config: " + lines[0] if len(lines) == 1 else "invalid config:\n  " + "\n  ".join(lines)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node: Any = tree
    for i, key in enumerate(keys[:-1]):
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise ConfigError(f"--set {dotted}: no list item {key!r}")
            node = node[int(key)]
            continue
        if not isinstance(node.get(key, {}), dict | list):
            raise ConfigError(f"--set {dotted}: {'.'.join(keys[: i + 1])} is not a section")
        node = node.setdefault(key, {})
    last = keys[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"--set {dotted}: no list item {last!r}")
        node[int(last)] = value
    else:
        node[last] = value


def parse_overrides(pairs: list[str]) -> list[tuple[str, Any]]:
    """``key.path=value`` strings to (path, value); values are parsed as YAML scalars/lists."""
    out = []
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r}: expected dotted.key=value")
        key, raw = pair.split("=", 1)
        if not key.strip():
            raise ConfigError(f"--set {pair!r}: empty key")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        key = key.strip()
        head, dot, rest = key.partition(".")
        out.append((SECTION_ALIASES.get(head, head) + dot + rest, value))
    return out


# Other names a section answers to, in YAML and in --set: ``bandit.policy`` is ``select.policy``.
SECTION_ALIASES = {"bandit": "select"}


def _resolve_aliases(tree: dict[str, Any], where: str) -> dict[str, Any]:
    tree = dict(tree)
    for alias, name in SECTION_ALIASES.items():
        if alias in tree:
            if name in tree:
                raise ConfigError(f"{where}: '{alias}' is another name for '{name}'; give one of them")
            tree[name] = tree.pop(alias)
    return tree


class RepeatedKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping (plain YAML keeps the last and drops the first silently)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key repeated in one mapping, naming it and its line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may come more than once
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise RepeatedKeyError(f"key {key!r} at line {line} repeats the one at line {seen[key]} in the "
                                           "same mapping; give it once")
                seen[key] = line
            except TypeError:  # an unhashable key: the base class says so
                break
        return super().construct_mapping(node, deep)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> FlywheelConfig:
    """Load YAML (or the embedded default when ``path`` is None), apply ``--set`` overrides."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        except UnicodeDecodeError as e:
            raise ConfigError(f"{p}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                              "save it as UTF-8") from None
        except RepeatedKeyError as e:
            raise ConfigError(f"{p}: {e}") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{p}: not valid YAML{where}: {e}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections")
        tree = _resolve_aliases(loaded, str(p))
    if overrides:
        # Materialise defaults first so that --set can reach into default lists and sections.
        tree = _merge(FlywheelConfig().model_dump(mode="json", exclude_unset=False), tree)
        for key, value in parse_overrides(overrides):
            _set_dotted(tree, key, value)
    try:
        return FlywheelConfig.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_format_error(e)) from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def dump_config(cfg: FlywheelConfig) -> str:
    """The resolved config as YAML (what a run writes to config.yaml)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
