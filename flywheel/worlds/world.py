"""The arena's world: the prompt pools and the roster of players (with target versions)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from flywheel.config.tree import FlywheelConfig, PlayerConfig, TaskSuiteConfig, WorldConfig
from flywheel.ground.chat import template_hash, template_of, uses_chat
from flywheel.ground.records import PlayerVersion, Prompt, stable_id
from flywheel.ground.store import RunStore
from flywheel.learning.allocation import equal, gpu_memory_shares
from flywheel.players import Player, SamplingParams, resolve
from flywheel.players.api import Budget
from flywheel.players.asker import Asker, LLMAsker
from flywheel.players.player import PlayerSetup
from flywheel.players.registry import player_from_config
from flywheel.worlds.followups import ProceduralAsker, RepeatingAsker
from flywheel.worlds.game_pools import game_splits
from flywheel.worlds.prompts import bad_rows_message, ingest
from flywheel.worlds.tasks import build_suite, meaning, take_validation


class Splits(NamedTuple):
    """The three disjoint prompt splits: ``train`` (battles), ``eval`` (reported only) and
    ``validation`` (what steers a run: allocation signals, merge weights)."""

    train: list[Prompt]
    eval: list[Prompt]
    validation: list[Prompt]


@functools.lru_cache(maxsize=4)
def _suite(seed: int, train_per_cell: int, eval_per_cell: int, val_per_cell: int, cats: tuple, levels: tuple) -> Splits:
    train, evals = build_suite(seed, train_per_cell, eval_per_cell, cats, levels)
    train, validation = take_validation(train, val_per_cell)
    return Splits(train, evals, validation)


def prompt_pools(tasks: TaskSuiteConfig) -> Splits:
    """The embedded task suite's three splits."""
    return _suite(tasks.seed, tasks.train_per_cell, tasks.eval_per_cell, tasks.val_per_cell, tuple(tasks.categories),
                  tuple(tasks.levels))


def world_pools(world: WorldConfig) -> Splits:
    """The world's splits: a games world's start positions; else the task suite's splits, the
    user prompt pools added to train. A pool prompt that repeats
    an eval, validation or earlier prompt is dropped, and so is a twin of an eval or validation
    prompt (tasks.meaning); a bad row fails with its file and line
    unless the pool says ``skip_bad``."""
    if world.kind == "games":
        return Splits(*game_splits(world.games))
    train, evals, validation = prompt_pools(world.tasks)
    if not world.prompt_pools:
        return Splits(train, evals, validation)
    seen = {" ".join(p.text.split()) for p in train + evals + validation}
    held = {(p.category, meaning(p.category, p.text)) for p in evals + validation}  # their twins too
    train = list(train)
    for pool in world.prompt_pools:
        got = ingest(pool.path, pool.layout, pool.category, True, seen)
        if got.bad and not pool.skip_bad:
            raise ValueError(f"prompt pool {pool.path}: {bad_rows_message(got.bad)}")
        train += [p for p in got.prompts if (p.category, meaning(p.category, " ".join(p.text.split()))) not in held]
    return Splits(train, evals, validation)


class PlayerPool:
    """The players a run has loaded, by what their answers depend on (kind and identity): one
    model in memory however many arena names share its weights. ``release()`` closes them all
    (after a version is replaced on disk, or a vLLM engine must restart with a new share)."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[str, str], Player] = {}

    def get(self, key: tuple[str, str], build: Callable[[], Player]) -> Player:
        if key not in self._loaded:
            self._loaded[key] = build()
        return self._loaded[key]

    def release(self) -> None:
        for p in self._loaded.values():
            p.close()
        self._loaded.clear()


def model_asked(pc: PlayerConfig, path: str | None) -> str | None:
    """The model name an API player is asked for: its ``model``, else (openai, a server that loads
    checkpoints by path, as transformers serve does) the absolute path of its weights: a target's
    version, its checkpoint folder."""
    return pc.model or (str(Path(path).resolve()) if pc.kind == "openai" and path else None)


@dataclass
class Roster:
    """Maps arena names (``calc``, ``student@2``) to player configs, paths and loaded players."""

    cfg: FlywheelConfig
    store: RunStore
    _by_name: dict[str, PlayerConfig] = field(init=False)
    budget: Budget = field(init=False)
    pool: PlayerPool = field(init=False, default_factory=PlayerPool)
    gpu_shares: dict[str, float] | None = field(init=False, default=None)
    _askers: dict[str, Asker] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._by_name = {p.name: p for p in self.cfg.targets + self.cfg.opponents}
        # one ledger for every process of the run (a Dask worker's roster too); a resumed run reads it again
        self.budget = Budget(self.cfg.budget.max_usd, ledger=self.store.spend_ledger())

    @property
    def targets(self) -> list[str]:
        return [p.name for p in self.cfg.targets]

    @property
    def opponents(self) -> list[str]:
        return [p.name for p in self.cfg.opponents]

    def config(self, player: str) -> PlayerConfig:
        return self._by_name[PlayerVersion.parse(player).name]

    def path(self, player: str) -> str:
        """Local weights of a player version (a target's training base)."""
        base, k = PlayerVersion.parse(player)
        if k:  # a trained version lives in the run directory
            return str(self.store.model_dir(player))
        pc = self._by_name[base]
        return pc.path or str(Path(self.cfg.world.models_dir) / base)

    def identity(self, player: str) -> str:
        """What the player's answers depend on, for the generation cache: its weights (and how it
        is asked: chat template, system prompt, stop strings), or for an API player its model,
        endpoints, system prompt and stop strings (a served target version is its own LoRA model)."""
        pc = self.config(player)
        if pc.kind in ("openai", "anthropic"):
            base = f"{pc.kind}:{self.api_model(player)}@{','.join(pc.base_urls)}"
        else:
            base = f"{pc.kind}:{self.path(player)}"
            if self.is_chat(player):
                base += f"|chat:{template_hash(template_of(self.path(player)))}"
        if pc.system_prompt:
            base += f"|system:{stable_id(pc.system_prompt)}"
        if pc.stop:
            base += f"|stop:{stable_id(*pc.stop)}"
        return base

    def is_chat(self, player: str) -> bool:
        """Whether the player is asked (and, as a target, trained) in conversations: by its chat
        setting and the tokenizer of its weights (flywheel/ground/chat.py), which TRL trains with and a
        vLLM server serves with; an API player without local weights always chats."""
        pc = self.config(player)
        if pc.kind not in ("transformers", "vllm") and not pc.path:
            return True
        return uses_chat(template_of(self.path(player)), pc.chat, player)

    def api_model(self, player: str) -> str | None:
        pc = self.config(player)
        k = PlayerVersion.parse(player).k
        return player if (pc.serve_lora and k) else model_asked(pc, self.path(player))

    def params(self, player: str) -> SamplingParams:
        pc = self.config(player)
        return SamplingParams(pc.max_new_tokens, pc.temperature, self.cfg.run.seed, tuple(pc.stop))

    def player(self, player: str) -> Player:
        """The loaded player for an arena name (loaded once into the pool; arena names that share
        weights share it, so a player object's own ``name`` is whichever loaded it first)."""
        pc = self.config(player)
        return self.pool.get((pc.kind, self.identity(player)), lambda: self.build(pc, player))

    def asker(self, name: str = "") -> Asker | None:
        """The asker named ``name`` (built once), by default the first that ``world.conversation.asker``
        names (the one eval and validation conversations use); None where none is named."""
        named = self.cfg.world.conversation.askers
        if not named:
            return None
        name = name or named[0]
        if name not in self._askers:
            pc = next(p for p in self.cfg.askers if p.name == name)
            if pc.kind == "procedural":
                self._askers[name] = (RepeatingAsker(name) if pc.procedure == "repeat"
                                      else ProceduralAsker(name, self.cfg.run.seed))
            else:
                self._askers[name] = LLMAsker(self.build(pc, name), SamplingParams(
                    pc.max_new_tokens, pc.temperature, self.cfg.run.seed, tuple(pc.stop)))
        return self._askers[name]

    def player_class(self, player: str) -> type[Player]:
        """The class of a player's kind (for its capabilities), without loading it."""
        return resolve(self.config(player).kind)

    def build(self, pc: PlayerConfig, name: str) -> Player:
        """A new player from its config through its kind's ``from_config`` (arena players, and
        the judge's model)."""
        if PlayerVersion.parse(name).name not in self._by_name:  # the judge's model, an asker
            return player_from_config(pc, name, outside_setup(pc, name, self.budget, self.cfg.run.seed))
        setup = PlayerSetup(path=self.path(name), model=self.api_model(name), budget=self.budget,
                            seed=self.cfg.run.seed, chat=self.is_chat(name),
                            gpu_memory_utilization=self.gpu_memory(name) if pc.kind == "vllm" else None)
        return player_from_config(pc, name, setup)

    def hand_in(self, shares: dict[str, float] | None) -> None:
        """The GPU-memory fractions of in-process vLLM targets now in force, handed in by the
        allocate stage (``allocate.gpu_memory``; None: equal shares). Engines built afterwards use
        them; the caller releases the pool so that running engines restart with theirs."""
        self.gpu_shares = shares

    def gpu_memory(self, player: str) -> float:
        """An in-process vLLM engine's GPU-memory fraction: with ``allocate.gpu_memory``, its
        target's share handed in by the allocate stage (equal shares before any); otherwise the
        player's own setting."""
        pc = self.config(player)
        base = PlayerVersion.parse(player).name
        alloc = self.cfg.allocate
        if alloc.gpu_memory is None or base not in self.targets:
            return pc.gpu_memory_utilization
        shares = self.gpu_shares or gpu_memory_shares(alloc, equal(self.targets))
        return shares[base]


def outside_setup(pc: PlayerConfig, name: str, budget: Budget, seed: int) -> PlayerSetup:
    """How a model outside the arena (the judge's, an asker) is set up: asked as its own path
    reads, where it has one."""
    chat = uses_chat(template_of(pc.path), pc.chat, name) if pc.kind == "openai" and pc.path else True
    return PlayerSetup(path=pc.path, model=model_asked(pc, pc.path), budget=budget, seed=seed, chat=chat,
                       gpu_memory_utilization=pc.gpu_memory_utilization if pc.kind == "vllm" else None)


@dataclass
class JudgeRoster:
    """Builds a judge's models without a run (``flywheel judge-agreement``): no run directory and no
    spending ledger; ``budget.max_usd`` caps what this process spends. ``release()`` closes them."""

    cfg: FlywheelConfig
    budget: Budget = field(init=False)
    built: list[Player] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.budget = Budget(self.cfg.budget.max_usd)

    def build(self, pc: PlayerConfig, name: str) -> Player:
        player = player_from_config(pc, name, outside_setup(pc, name, self.budget, self.cfg.run.seed))
        self.built.append(player)
        return player

    def release(self) -> None:
        for p in self.built:
            p.close()
        self.built.clear()
