"""Everything about a config that can be checked before a run directory exists (``flywheel check``,
and ``flywheel run`` before it writes anything): each problem is one line naming the player or
field, never a traceback halfway through a run."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from flywheel.arena.bandit_rewards import GAMES_HAVE_NO_VALIDATION_ANSWERS
from flywheel.config.tree import (
    PROCEDURAL,
    RL_METHODS,
    RUNNER_MODULES,
    FlywheelConfig,
    ModelSpec,
    PlayerConfig,
    runner_needs,
)
from flywheel.games.hanabi import Setup
from flywheel.ground.chat import template_of
from flywheel.ground.tracking import tracking_problems
from flywheel.players.registry import resolve
from flywheel.worlds.realmodels import KNOWN
from flywheel.worlds.world import world_pools
from judges.llm import load_template
from judges.verifier import load_callable

API_KINDS = ("openai", "anthropic")
LOCAL_KINDS = ("transformers", "vllm")


def players(cfg: FlywheelConfig) -> list[tuple[str, PlayerConfig]]:
    """(field path, player) of every player a run builds: targets, opponents and judge models."""
    out = [(f"targets.{i}", p) for i, p in enumerate(cfg.targets)]
    out += [(f"opponents.{i}", p) for i, p in enumerate(cfg.opponents)]
    if cfg.judge.player is not None and cfg.judge.kind in ("llm", "hybrid"):
        out.append(("judge.player", cfg.judge.player))
    if cfg.judge.kind == "panel":
        out += [(f"judge.panel.{i}", p) for i, p in enumerate(cfg.judge.panel)]
    if cfg.judge.kind == "cascade":
        for i, t in enumerate(cfg.judge.cascade.tiers):
            where = f"judge.cascade.tiers.{i}"
            out += [(f"{where}.player", t.player)] if t.player is not None else []
            out += [(f"{where}.panel.{j}", p) for j, p in enumerate(t.panel)]
    out += [(f"askers.{i}", p) for i, p in enumerate(cfg.askers) if p.kind != "procedural"]  # procedural: the world's
    return out


def player_problems(where: str, pc: PlayerConfig, built: frozenset[Path] = frozenset()) -> list[str]:
    """Its kind resolves to a class, its API key is in the environment, its local weights exist
    (a hub id, ``org/name``, is left to the loader; ``built``: the world's tiny models, which a run
    builds before it starts) and, with ``chat: on``, have a chat template."""
    name = f"{where} ({pc.name})"
    try:
        resolve(pc.kind)
    except ValueError as e:
        return [f"{name}: {e}"]
    out = []
    key = pc.api_key_env or ("ANTHROPIC_API_KEY" if pc.kind == "anthropic" else None)
    if pc.kind in API_KINDS and key is None and not pc.base_urls:
        out.append(f"{name}: set api_key_env to the environment variable that holds the key")
    elif key is not None and not os.environ.get(key):
        out.append(f"{name}: environment variable {key} (api_key_env) is not set")
    if pc.path:  # local weights: a local player's, or the training base of a served target
        path = Path(pc.path)
        if not path.exists():
            if path.resolve() in built:
                pass  # one of the world's tiny models: the run builds it before it starts
            elif pc.path.count("/") != 1 or pc.path.startswith((".", "/", "~")):  # not org/name on the hub
                hint = f" (make it: flywheel models add {path.name})" if path.name in KNOWN else ""
                out.append(f"{name}: path {pc.path} does not exist{hint}")
        elif (pc.kind in LOCAL_KINDS or where.startswith("targets.")) and (missing := not_a_model(path)):
            out.append(f"{name}: path {pc.path} holds no model ({missing})")
        elif pc.kind in LOCAL_KINDS and pc.chat == "on" and template_of(path) is None:
            out.append(f"{name}: chat is 'on' but {pc.path} has no chat template (set chat: auto to ask it in raw text)")
    for i, url in enumerate(pc.base_urls):
        if not is_http_url(url):
            out.append(f"{name}: base_urls.{i} {url!r} is not an http(s) URL with a host "
                       "(e.g. http://127.0.0.1:8000/v1)")
    return out


def is_http_url(url: str) -> bool:
    """http(s), with a host, and a port (if any) that is a number."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number)
    except ValueError:  # e.g. an unclosed [ or a port that is not a number
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack")


def not_a_model(path: Path) -> str | None:
    """What a local checkpoint folder lacks (a config, weights), or None when it holds one; read
    without loading anything. A LoRA adapter's folder counts."""
    if not path.is_dir():
        return "a file, not a checkpoint folder"
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        return "no config.json"
    if not any(f.suffix in WEIGHTS and f.is_file() for f in path.iterdir()):
        return f"no weights: no {', '.join('*' + w for w in WEIGHTS[:2])} file"
    return None


def directory_problems(cfg: FlywheelConfig) -> list[str]:
    """Folders a run writes into (created when missing) must not be files."""
    dirs = {"run.root": cfg.run.root, "run.cache_dir": cfg.run.cache_dir, "world.models_dir": cfg.world.models_dir}
    return [f"{field}: {path} is a file, not a directory" for field, path in dirs.items()
            if path is not None and Path(path).exists() and not Path(path).is_dir()]


def template_problems(cfg: FlywheelConfig) -> list[str]:
    """The judge template (a built-in name or a file) loads, and ``aggregate: mean`` has a scores
    template. The judges own templates; the config models only hold the name."""
    panels = [("judge", cfg.judge.template, cfg.judge.kind == "panel" and cfg.judge.aggregate == "mean")]
    if cfg.judge.kind == "cascade":
        panels += [(f"judge.cascade.tiers.{i}", t.template or cfg.judge.template, t.kind == "panel" and
                    t.aggregate == "mean") for i, t in enumerate(cfg.judge.cascade.tiers) if t.kind in ("llm", "panel")]
    for where, template, mean in panels:
        try:
            _, fmt = load_template(template)
        except ValueError as e:
            return [f"{where}.template: {e}"]
        if mean and fmt != "scores":
            return [f"{where}.aggregate: mean needs a scores template ({where}.template, e.g. wizardarena)"]
    return []


def uses_rl(cfg: FlywheelConfig) -> bool:
    """Whether some iteration of the run trains with GRPO."""
    return bool(cfg.train.methods(max(cfg.run.iterations, len(cfg.train.schedule))) & set(RL_METHODS))


# The columns every RL prompt row carries (flywheel/stages/rl_prompts.py), handed to a user's reward
# function as keyword arguments, besides prompts and completions.
REWARD_COLUMNS = ("prompt_text", "reference", "prompt_id", "category", "level", "baseline", "baseline_model")


def cannot_score(fn) -> str | None:
    """Why ``fn`` cannot be called as a reward, ``fn(prompts=..., completions=..., **columns)``
    (TRL's contract), or None where it can."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: found out when it is called
    try:
        sig.bind(prompts=[], completions=[], **{c: [] for c in REWARD_COLUMNS})
    except TypeError as e:
        return (f"cannot take a reward's arguments ({e}): a reward function is called as "
                "f(prompts, completions, **columns) and returns one float or None per completion")
    return None


def leave_out_problems(cfg: FlywheelConfig) -> list[str]:
    """``train.rl.leave_out`` names categories of the train prompts (the task suite's, and the
    prompt pools' rows) and leaves some. A games world has none, and learns from no own answers."""
    out = cfg.train.rl.leave_out
    if not out or cfg.world.kind != "tasks":
        return []
    try:
        cats = sorted({p.category for p in world_pools(cfg.world).train})
    except (OSError, ValueError):
        return []  # reported by the prompt pools' own check
    if bad := [c for c in out if c not in cats]:
        return [f"train.rl.leave_out: {bad} are not categories of the train prompts {cats}"]
    if set(cats) <= set(out):
        return ["train.rl.leave_out leaves out every category of the train prompts: none is left to learn from"]
    return []


def reward_model_problems(cfg: FlywheelConfig) -> list[str]:
    """A reward model named by path (a GRPO reward, or the judge) holds a model."""
    paths = {"train.rl.reward_model": cfg.train.rl.reward_model if uses_rl(cfg) else None,
             "judge.reward_model": getattr(cfg.judge, "reward_model", None) if cfg.judge.kind == "reward_model" else None}
    out = []
    for field, path in paths.items():
        if path is None:
            continue
        if not Path(path).exists():
            out.append(f"{field}: {path} does not exist (a reward model a run trained: <run>/reward-models/<target>@<k>)")
        elif missing := not_a_model(Path(path)):
            out.append(f"{field}: {path} holds no model ({missing})")
    return out


def evolve_problems(cfg: FlywheelConfig) -> list[str]:
    """``select.evolve``: prompts to evolve (not a games world), and an evolver that is the
    procedural one or a configured player whose prompts the judge can decide."""
    ev = cfg.select.evolve
    if not ev.enabled:
        return []
    if cfg.world.kind == "games":
        return ["select.evolve: a games world plays start positions; it has no prompts to evolve"]
    names = [p.name for p in cfg.targets + cfg.opponents]
    if ev.evolver != PROCEDURAL and ev.evolver not in names:
        return [f"select.evolve.evolver: {ev.evolver!r} is not a configured player; name a target or an opponent "
                f"({', '.join(names)}) or {PROCEDURAL}"]
    if ev.evolver != PROCEDURAL and cfg.judge.kind == "verifier":
        return [f"select.evolve.evolver: {ev.evolver}'s prompts have no reference answer, which judge.kind verifier "
                "needs; use judge.kind hybrid (or llm), or the procedural evolver"]
    return []


def teaching_problems(cfg: FlywheelConfig) -> list[str]:
    """``select.teaching``: prompts with reference answers to teach (not a games world), and
    teachers that are configured opponents."""
    tc = cfg.select.teaching
    if not tc.enabled:
        return []
    if cfg.world.kind == "games":
        return ["select.teaching: a games world plays positions without reference answers; it has no lessons to "
                "verify"]
    names = [p.name for p in cfg.opponents]
    if not names and not tc.teachers:
        return ["select.teaching: no opponent to teach; configure opponents or turn teaching off"]
    for i, t in enumerate(tc.teachers):
        if t not in names:
            return [f"select.teaching.teachers.{i}: {t!r} is not a configured opponent; name one of "
                    f"{', '.join(names) or '(none)'}"]
    return []


def tiny_model_problems(cfg: FlywheelConfig) -> list[str]:
    """A games world's tiny models (``world.models``) read ``ModelSpec.positions`` characters: its
    positions must be terse, and a Hanabi view of the configured size must fit with a move and
    ``<eos>``."""
    if cfg.world.kind != "games" or not cfg.world.models:
        return []
    own = "or world.models: [] and models of your own (targets and opponents with a path)"
    if cfg.world.games.prompt == "verbose":
        return [f"world.games.prompt: verbose describes positions in English for instruct LLMs, but the tiny models "
                f"(world.models) read {ModelSpec.positions} characters; use terse, {own}"]
    if "hanabi" not in cfg.world.games.games:
        return []
    hc = cfg.world.games.hanabi
    setup = Setup(hc.players, hc.colours, hc.ranks, hc.hand, hc.hints, hc.lives)
    need = setup.longest_view + len("p1") + 1  # a move and <eos>
    if need <= ModelSpec.positions:
        return []
    return [f"world.games.hanabi: a view of {hc.players} seats with {hc.colours} colours and hands of {hc.hand} is "
            f"up to {setup.longest_view} characters, {need} with a move, but the tiny models (world.models) read "
            f"{ModelSpec.positions}; use fewer seats, colours or cards in a hand, {own}"]


def installed(module: str) -> bool:
    """Whether the top-level ``module`` can be imported, found without importing it (Ray takes
    seconds, and sets itself up as it loads); a ``None`` in ``sys.modules`` counts as missing."""
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def runner_problems(cfg: FlywheelConfig) -> list[str]:
    """``run.task_runner`` dask or ray has its extra installed (else the flow would find out only
    once the Prefect server is up and the models are built)."""
    kind = cfg.run.task_runner
    if kind in RUNNER_MODULES and not all(installed(m) for m in RUNNER_MODULES[kind]):
        return [runner_needs(kind)]
    return []


def judge_functions(cfg: FlywheelConfig) -> dict[str, str | None]:
    """field -> the ``module:name`` of each function or class the judge loads (None: none there)."""
    functions = {"judge.custom": cfg.judge.custom if cfg.judge.kind == "custom" else None,
                 "judge.verifier.function": cfg.judge.verifier.function if cfg.judge.verifier.match == "callable" else None}
    if cfg.judge.kind == "cascade":
        functions |= {f"judge.cascade.tiers.{i}.custom": t.custom for i, t in enumerate(cfg.judge.cascade.tiers)}
    return functions


def function_problems(functions: dict[str, str | None]) -> list[str]:
    """Each named function loads (a reward function also takes a reward's arguments)."""
    out = []
    for field, spec in functions.items():
        if spec:
            try:
                fn = load_callable(spec)
            except ValueError as e:
                out.append(f"{field}: {e}")
                continue
            if field == "train.rl.reward" and (why := cannot_score(fn)):
                out.append(f"{field}: {spec} {why}")
    return out


def judge_problems(cfg: FlywheelConfig) -> list[str]:
    """The judge's own problems (its models, template, functions, reward model), for a command that
    runs the judge alone (``flywheel judge-agreement``)."""
    out = [line for where, pc in players(cfg) if where.startswith("judge.") for line in player_problems(where, pc)]
    out += template_problems(cfg)
    out += [line for line in reward_model_problems(cfg) if line.startswith("judge.")]
    return out + function_problems(judge_functions(cfg))


def problems(cfg: FlywheelConfig) -> list[str]:
    """Every problem of ``cfg`` found without running anything; empty when it is ready to run."""
    out = directory_problems(cfg) + runner_problems(cfg)
    built = frozenset(Path(cfg.world.models_dir).resolve() / m.name for m in cfg.world.models)
    out += [line for where, pc in players(cfg) for line in player_problems(where, pc, built)]

    rl = cfg.train.rl if uses_rl(cfg) else None
    functions = judge_functions(cfg)
    functions["train.rl.reward"] = rl.reward if rl and rl.reward not in ("verifier", "judge", "reward_model") else None
    out += template_problems(cfg)
    out += reward_model_problems(cfg)
    out += function_problems(functions)
    out += leave_out_problems(cfg)
    if cfg.world.kind == "games" and cfg.select.reward == "validation-progress":
        out.append(GAMES_HAVE_NO_VALIDATION_ANSWERS)
    out += evolve_problems(cfg)
    out += teaching_problems(cfg)
    out += tiny_model_problems(cfg)
    if cfg.world.prompt_pools:
        try:
            world_pools(cfg.world)
        except (OSError, ValueError) as e:
            out.append(str(e))
    out += tracking_problems(cfg.tracking, Path(cfg.run.root))
    return out
