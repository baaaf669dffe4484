"""The stages of one flywheel iteration as plain functions over a run directory.

Each stage reads its inputs from the run directory and writes its outputs there; its small JSON
result is stored as ``iter-000k/stages/<stage>.json``. A stage whose result file exists is done
and is not run again; a stage that was cut short runs again and skips every record already on
disk (battles, judgments, generations). That is what makes ``--resume`` lose nothing and count
nothing twice. The Prefect flow in ``flows/`` wraps each stage as a task.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from flywheel import merging, reports
from flywheel.allocation import allocate
from flywheel.arena import generate_cached, judge_pending, judge_shard, play, play_shard, read_plan, write_plan
from flywheel.config import FlywheelConfig, dump_config
from flywheel.evaluation import SUBSET_RULES, accuracy, eval_subsets
from flywheel.curation import DPO_COLUMNS, SFT_COLUMNS, curate, dataset_card, save_dataset
from flywheel.ratings import leaderboard, online_elo
from flywheel.records import Battle, BattleSpec, Prompt, stable_id
from flywheel import selection
from flywheel.selection import Selector, arm_of, seat
from flywheel.store import RunStore, atomic_write_json, atomic_write_text, iter_name, read_json
from flywheel.training import is_main_process, train_version
from flywheel.world import Roster, split_version, versioned, world_pools
from judges.base import PairwiseJudge

log = logging.getLogger("flywheel")



@dataclass
class Context:
    """What every stage needs: the config, the run directory and the roster."""

    cfg: FlywheelConfig
    store: RunStore
    roster: Roster = field(init=False)
    train_pool: list[Prompt] = field(init=False)
    eval_split: list[Prompt] = field(init=False)
    validation: list[Prompt] = field(init=False)

    def __post_init__(self) -> None:
        self.roster = Roster(self.cfg, self.store)
        self.train_pool, self.eval_split, self.validation = world_pools(self.cfg.world)

    @functools.cached_property
    def prompts(self) -> dict[str, Prompt]:
        return {p.id: p for p in self.train_pool + self.eval_split + self.validation}

    @functools.cached_property
    def judge(self) -> PairwiseJudge:
        from judges.build import build_judge

        return build_judge(self.cfg.judge, self.roster, self.store.judge_outputs if self.cfg.judge.cache else None)

    @functools.cached_property
    def correct(self) -> Callable[[str | None, Prompt], bool]:
        """Whether a response answers a prompt: the configured verifier's check (with its
        final-answer extraction), which eval accuracy and the eval subsets use."""
        from judges.build import build_verifier

        verifier = build_verifier(self.cfg.judge.verifier)
        return lambda response, prompt: verifier.correct(response, prompt.reference)

    @functools.cached_property
    def pool_by_cell(self) -> dict[str, list[Prompt]]:
        cells: dict[str, list[Prompt]] = {}
        for p in self.train_pool:
            cells.setdefault(arm_of(p), []).append(p)
        return dict(sorted(cells.items()))


# -- opening a run ------------------------------------------------------------------------------
def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def open_run(cfg: FlywheelConfig, resume: Path | None = None, lock_wait_s: float = 0.0) -> Context:
    """Create a run directory (config.yaml, manifest.json) or reopen one for ``--resume``.

    On resume the run's own config.yaml is the config; the run directory is locked either way
    (waiting up to ``lock_wait_s`` for another process to finish with it)."""
    if resume is not None:
        from flywheel.config import load_config

        if not (resume / "config.yaml").exists():
            raise FileNotFoundError(f"{resume} is not a run directory (no config.yaml)")
        cfg = load_config(resume / "config.yaml")
        store = RunStore(resume, cfg.run.cache_dir)
        store.lock(lock_wait_s)
        return _register(Context(cfg, store))
    run_id = cfg.run.name or new_run_id()
    root = Path(cfg.run.root) / run_id
    if (root / "config.yaml").exists():
        raise FileExistsError(f"{root} already exists; use --resume {root} to continue it")
    cfg = cfg.model_copy(deep=True)
    cfg.run.name = run_id
    store = RunStore(root, cfg.run.cache_dir)
    store.lock(lock_wait_s)
    if (root / "config.yaml").exists():  # created by another process while this one waited
        store.unlock()
        raise FileExistsError(f"{root} already exists; use --resume {root} to continue it")
    ctx = Context(cfg, store)
    atomic_write_text(root / "config.yaml", dump_config(cfg))
    atomic_write_json(root / "manifest.json", _manifest(ctx))
    return _register(ctx)


def _register(ctx: Context) -> Context:
    _CONTEXTS[str(ctx.store.root.resolve())] = ctx
    return ctx


def _manifest(ctx: Context) -> dict[str, Any]:
    versions = {}
    for pkg in ("flywheel", "torch", "transformers", "trl", "datasets", "prefect", "peft", "numpy"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    eval_hash = stable_id(*sorted(p.text for p in ctx.eval_split))
    val_hash = stable_id(*sorted(p.text for p in ctx.validation))
    train_hash = stable_id(*sorted(p.text for p in ctx.train_pool))
    return {
        "run_id": ctx.cfg.run.name,
        "created": datetime.now(timezone.utc).isoformat(),
        "packages": versions,
        "seeds": {"run": ctx.cfg.run.seed, "world": ctx.cfg.world.seed, "tasks": ctx.cfg.world.tasks.seed},
        "inputs": {"train_pool": {"prompts": len(ctx.train_pool), "hash": train_hash},
                   "eval_split": {"prompts": len(ctx.eval_split), "hash": eval_hash},
                   "validation_split": {"prompts": len(ctx.validation), "hash": val_hash}},
        "players": {n: ctx.roster.path(n) for n in ctx.roster.targets + ctx.roster.opponents},
        "timings": {},
    }


# -- stage bookkeeping --------------------------------------------------------------------------
def stage_result(store: RunStore, k: int, stage: str) -> dict[str, Any] | None:
    return read_json(store.stage_path(k, stage))


def _stage(base: str, per_round: bool = False) -> Callable:
    """Run the stage unless its result is on disk; store the result and the stage's timing.
    A ``per_round`` stage takes the round number after ``k`` and is recorded as ``<base>-r<n>``."""

    def wrap(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        @functools.wraps(fn)
        def run(ctx: Context, k: int, *args: Any) -> dict[str, Any]:
            name = f"{base}-r{args[0]}" if per_round else base
            done = stage_result(ctx.store, k, name)
            if done is not None:
                return done
            t0 = time.perf_counter()
            result = fn(ctx, k, *args)
            atomic_write_json(ctx.store.stage_path(k, name), result)
            manifest = read_json(ctx.store.root / "manifest.json", {})
            manifest.setdefault("timings", {})[f"{iter_name(k)}/{name}"] = round(time.perf_counter() - t0, 3)
            atomic_write_json(ctx.store.root / "manifest.json", manifest)
            return result

        return run

    return wrap


def current_version(ctx: Context, target: str, k: int) -> str:
    """The version of ``target`` that plays in iteration ``k`` (trained in iteration k-1)."""
    return versioned(target, k - 1)


# -- the stages ---------------------------------------------------------------------------------
def round_budget(total: int, rounds: int, rnd: int) -> int:
    """Battles in round ``rnd`` (1-based) when ``total`` are split over ``rounds``."""
    return total // rounds + (1 if rnd <= total % rounds else 0)


def _bandit_path(ctx: Context, target: str, k: int, rnd: int) -> Path:
    return ctx.store.root / "bandits" / f"{iter_name(k)}-r{rnd}-{target}.json"


def load_selector(ctx: Context, target: str, k: int, rnd: int) -> Selector:
    """The target's bandit state after the latest round before (k, rnd), or a fresh one."""
    before = []
    for path in (ctx.store.root / "bandits").glob("iter-*-r*-*.json"):
        m = re.fullmatch(r"iter-(\d+)-r(\d+)-(.+)\.json", path.name)
        if m and m[3] == target and (int(m[1]), int(m[2])) < (k, rnd):  # names may contain dashes
            before.append(((int(m[1]), int(m[2])), path))
    if before:
        return Selector.from_state(read_json(max(before)[1]))
    return Selector.new(ctx.cfg.select, list(ctx.pool_by_cell), ctx.roster.opponents)


@_stage("select", per_round=True)
def select(ctx: Context, k: int, rnd: int, budgets: dict[str, int]) -> dict[str, Any]:
    """Choose one round of train battles (prompt cells x opponents) for every target."""
    cfg = ctx.cfg.select
    specs: list[BattleSpec] = read_plan(ctx.store, k, rnd) or []
    if not specs:
        earlier = read_plan(ctx.store, k) or []
        for t in ctx.roster.targets:
            n = round_budget(budgets[t], cfg.rounds, rnd)
            version = current_version(ctx, t, k)
            used = {s.prompt_id for s in earlier if version in (s.model_a, s.model_b)}
            rates = {}
            if cfg.opponents == "pfsp":
                rates = selection.opponent_win_rates(ctx.store.battles(None, "train"), ctx.store.judgments(None, "train"),
                                                     t, list(ctx.pool_by_cell), ctx.roster.opponents)
            specs += selection.plan_round(load_selector(ctx, t, k, rnd), cfg, ctx.pool_by_cell, version, n, k, rnd,
                                          ctx.cfg.run.seed, used, rates)
        write_plan(ctx.store, k, rnd, specs)
    arms: dict[str, int] = {}
    for sp in specs:
        arms[sp.arm] = arms.get(sp.arm, 0) + 1
    return {"battles": len(specs), "policy": cfg.policy, "arms": dict(sorted(arms.items()))}


# -- shards: the units that mapped tasks play and judge, on any worker ---------------------------
_CONTEXTS: dict[str, Context] = {}


def worker_context(run_dir: str) -> Context:
    """The Context of a run directory in this process: the flow's own one (registered by
    open_run), or one a worker builds from the run's config.yaml (without taking the lock,
    which the flow process holds)."""
    key = str(Path(run_dir).resolve())
    if key not in _CONTEXTS:
        from flywheel.config import load_config

        cfg = load_config(Path(run_dir) / "config.yaml")
        _CONTEXTS[key] = Context(cfg, RunStore(Path(run_dir), cfg.run.cache_dir))
    return _CONTEXTS[key]


def shard_name(k: int, rnd: int, i: int) -> str:
    return f"{iter_name(k)}-train-r{rnd}-s{i:04d}"


def shard_count(ctx: Context, k: int, rnd: int) -> int:
    """How many shards round ``rnd``'s plan has (``run.shard_size`` battles each)."""
    n = len(read_plan(ctx.store, k, rnd) or [])
    return -(-n // ctx.cfg.run.shard_size)


def play_round_shard(run_dir: str, k: int, rnd: int, i: int) -> int:
    """Play shard ``i`` of round ``rnd``'s plan into ``battles/<shard name>.parquet``, unless that
    file exists. Returns the battles played now. A shard is written whole or not at all, and its
    battles (their ids carry the round and the plan index) go to no other file, so nothing else of
    the log is read: the cost of a shard does not grow with the iteration."""
    ctx = worker_context(run_dir)
    name, size = shard_name(k, rnd, i), ctx.cfg.run.shard_size
    if ctx.store.shard_exists("battles", name):
        return 0
    todo = (read_plan(ctx.store, k, rnd) or [])[i * size:(i + 1) * size]
    play_shard(ctx.roster, ctx.store, todo, ctx.prompts, name)
    return len(todo)


def judge_round_shard(run_dir: str, k: int, rnd: int, i: int) -> int:
    """Judge the battles of shard ``i`` of round ``rnd`` into ``judgments/<shard name>.parquet``
    (their judgments go to no other file, so only this shard's battles are read)."""
    ctx = worker_context(run_dir)
    name = shard_name(k, rnd, i)
    if ctx.store.shard_exists("judgments", name):
        return 0
    todo = [b for b in ctx.store.read_shard("battles", name, Battle) if b.ok]
    judge_shard(ctx.judge, ctx.store, todo, k, "train", name)
    return len(todo)


@_stage("battle", per_round=True)
def battle(ctx: Context, k: int, rnd: int) -> dict[str, Any]:
    """Play every shard of the round not on disk yet (none after the flow's mapped shard tasks;
    run alone, this plays them here)."""
    new = sum(play_round_shard(str(ctx.store.root), k, rnd, i) for i in range(shard_count(ctx, k, rnd)))
    specs = read_plan(ctx.store, k, rnd) or []
    ids = {s.battle_id for s in specs}
    return {"planned": len(specs), "logged": sum(1 for b in ctx.store.battles(k, "train") if b.battle_id in ids),
            "played_here": new}


@_stage("judge", per_round=True)
def judge(ctx: Context, k: int, rnd: int) -> dict[str, Any]:
    """Judge every shard of the round not judged yet (as ``battle``), then feed the round's
    rewards to the bandits."""
    new = sum(judge_round_shard(str(ctx.store.root), k, rnd, i) for i in range(shard_count(ctx, k, rnd)))
    js = ctx.store.judgments(k, "train")
    update_bandits(ctx, k, rnd, js)
    counts: dict[str, int] = {}
    for j in js.values():
        key = j.winner or "invalid"
        counts[key] = counts.get(key, 0) + 1
    return {"judged": len(js), "judged_here": new, "outcomes": counts}


def update_bandits(ctx: Context, k: int, rnd: int, judgments: dict) -> None:
    """Update each target's bandits with round (k, rnd)'s rewards, once (the saved state marks it)."""
    round_ids = {s.battle_id for s in read_plan(ctx.store, k, rnd) or []}
    every = ctx.store.battles(k, "train")
    battles = [b for b in every if b.battle_id in round_ids]
    for t in ctx.roster.targets:
        path = _bandit_path(ctx, t, k, rnd)
        if path.exists():
            continue
        sel = load_selector(ctx, t, k, rnd)
        previous = {}
        if ctx.cfg.select.reward == "progress" and k > 1:
            previous = selection.arm_scores(ctx.store.battles(k - 1, "train"), ctx.store.judgments(k - 1, "train"), t)
        mine = [b for b in battles if t in (b.model_a.split("@")[0], b.model_b.split("@")[0])]
        earlier = [b for b in every if b.battle_id not in round_ids and t in (b.model_a.split("@")[0], b.model_b.split("@")[0])]
        yielded = set(p for p, _ in _lost_prompts(earlier, judgments, t))
        sel.update(selection.feedback(ctx.cfg.select.reward, mine, judgments, t, previous, yielded))
        atomic_write_json(path, sel.state())


def _lost_prompts(battles, judgments, target: str):
    for b in battles:
        j = judgments.get(b.battle_id)
        if j is not None and j.valid and b.ok and selection.target_score(b, j, target) == 0.0:
            yield b.prompt, b.battle_id


def bandit_report(ctx: Context, k: int) -> dict[str, list[dict[str, Any]]]:
    """Per target and prompt arm: this iteration's battles and share, bandit pulls and value."""
    specs = read_plan(ctx.store, k) or []
    out = {}
    for t in ctx.roster.targets:
        mine = [s for s in specs if split_version(s.model_a)[0] == t or split_version(s.model_b)[0] == t]
        counts: dict[str, int] = {}
        for sp in mine:
            counts[sp.arm] = counts.get(sp.arm, 0) + 1
        sel = load_selector(ctx, t, k, 10**9)
        out[t] = [{**st, "battles": counts.get(st["arm"], 0),
                   "share": round(counts.get(st["arm"], 0) / max(len(mine), 1), 4)} for st in sel.prompt.stats()]
    return out


@dataclass(frozen=True)
class RatedBattle:
    model_a: str
    model_b: str
    winner: str
    category: str
    prompt_id: str


def rated_battles(store: RunStore, k: int | None, phase: str) -> list[RatedBattle]:
    """Judged battles with a valid verdict (failed and invalid ones never count)."""
    js = store.judgments(k, phase)
    return [RatedBattle(b.model_a, b.model_b, js[b.battle_id].winner, b.category, b.prompt_id)  # type: ignore[arg-type]
            for b in store.battles(k, phase) if b.battle_id in js and js[b.battle_id].valid]


def columns(rows: list[RatedBattle]) -> tuple[list[str], list[str], list[str]]:
    return [r.model_a for r in rows], [r.model_b for r in rows], [r.winner for r in rows]


def _rated(ctx: Context, k: int | None, phase: str) -> tuple[list[str], list[str], list[str]]:
    return columns(rated_battles(ctx.store, k, phase))


@_stage("rate")
def rate(ctx: Context, k: int) -> dict[str, Any]:
    """Bradley-Terry and online Elo over this iteration's arena battles; per-arm target win rates."""
    a, b, w = _rated(ctx, k, "train")
    rc = ctx.cfg.rating
    board = leaderboard(a, b, w, rc.bootstrap_rounds, rc.ci, ctx.cfg.run.seed + k, rc.scale, rc.base, rc.init, prior=rc.prior)
    online = online_elo(a, b, w, k_factor=rc.online_k, scale=rc.scale, base=rc.base, init=rc.init)
    js = ctx.store.judgments(k, "train")
    arms: dict[str, list[float]] = {}
    for bt in ctx.store.battles(k, "train"):
        j = js.get(bt.battle_id)
        if j is None or not j.valid:
            continue
        target_is_a = split_version(bt.model_a)[0] in ctx.roster.targets
        score = {"model_a": 1.0, "model_b": 0.0}.get(j.winner, 0.5)
        arms.setdefault(bt.arm, []).append(score if target_is_a else 1 - score)
    out = {"leaderboard": [r.to_dict() for r in board], "online_elo": {m: round(x, 2) for m, x in online.items()},
           "target_score_by_arm": {arm: round(sum(v) / len(v), 4) for arm, v in sorted(arms.items())}}
    atomic_write_json(ctx.store.root / "ratings" / f"{iter_name(k)}-arena.json", out)
    return out


@_stage("curate")
def curate_stage(ctx: Context, k: int) -> dict[str, Any]:
    """Turn this iteration's judged battles into SFT and DPO datasets on disk."""
    eval_texts = {p.text for p in ctx.eval_split}
    held_out = eval_texts | {p.text for p in ctx.validation}  # neither split may reach training data
    battles = ctx.store.battles(k, "train")
    no_train = held_out | {" ".join(t.split()) for t in held_out}  # whitespace variants too
    cur = curate(battles, ctx.store.judgments(k, "train"), ctx.roster.targets, no_train, ctx.cfg.curate)
    d = ctx.store.iter_dir(k)
    contestants = sorted({m for b in battles for m in (b.model_a, b.model_b)})
    players = {"targets": [m for m in contestants if "@" in m], "opponents": [m for m in contestants if "@" not in m]}
    lineage = {
        "run_id": ctx.cfg.run.name, "iteration": k, "judge": ctx.judge.name, **players,
        "battle_log": sorted(str(p.relative_to(ctx.store.root)) for p in (ctx.store.root / "battles").glob(f"{iter_name(k)}-train-*.parquet")),
        "judgment_log": sorted(str(p.relative_to(ctx.store.root)) for p in (ctx.store.root / "judgments").glob(f"{iter_name(k)}-train-*.parquet")),
        "battles": len(battles), "curate": ctx.cfg.curate.model_dump(), "dropped": cur.dropped,
        "eval_split_hash": stable_id(*sorted(eval_texts)), "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    # Chat targets are trained in conversations: the datasets are conversational when any target chats.
    chat = any(ctx.roster.is_chat(t) for t in ctx.roster.targets)
    systems = {t: ctx.roster.config(t).system_prompt for t in ctx.roster.targets} if chat else None
    n_sft = save_dataset(cur.sft, SFT_COLUMNS, d / "sft", dataset_card("sft", k, cur.sft, ctx.judge.name, ctx.cfg.curate,
                                                                        cur.dropped, players, chat),
                         {"kind": "sft", **lineage}, systems)
    n_dpo = save_dataset(cur.dpo, DPO_COLUMNS, d / "dpo", dataset_card("dpo", k, cur.dpo, ctx.judge.name, ctx.cfg.curate,
                                                                        cur.dropped, players, chat),
                         {"kind": "dpo", **lineage}, systems)
    return {"sft_examples": n_sft, "dpo_pairs": n_dpo, "dropped": cur.dropped}


def _training_data(ctx: Context, k: int, kind: str, target: str):
    from datasets import concatenate_datasets, load_from_disk

    iters = range(1, k + 1) if (kind == "sft" and ctx.cfg.train.replay) else [k]
    # In memory: trainers map() the data, and must not leave cache files inside the run's datasets.
    parts = [load_from_disk(str(ctx.store.iter_dir(i) / kind), keep_in_memory=True) for i in iters]
    if ctx.cfg.allocate.sharing != "cooperative":  # cooperative: every target's winning traces
        parts = [p.select([i for i, t in enumerate(p["target"]) if t == target]) for p in parts]
    parts = [shape_for(p, ctx.roster.is_chat(target), ctx.roster.config(target).system_prompt) for p in parts if len(p)]
    return concatenate_datasets(parts).shuffle(seed=ctx.cfg.run.seed + k) if parts else None


def shape_for(data, chat: bool, system: str | None):
    """Rows of either format as the target reads them: conversations asked with its own system
    prompt (a chat target; pooled rows may come from another target's battles), or plain text."""
    from flywheel.chat import TEXT_COLUMNS, as_text, assistant, messages

    def row(r: dict) -> dict:
        out = {"prompt": messages(as_text(r["prompt"]), system) if chat else as_text(r["prompt"])}
        for c in TEXT_COLUMNS[1:]:
            if c in r:
                out[c] = assistant(as_text(r[c])) if chat else as_text(r[c])
        return out

    cols = [c for c in TEXT_COLUMNS if c in data.column_names]
    return data.select_columns(cols).map(row, remove_columns=cols, keep_in_memory=True)


@_stage("train")
def train(ctx: Context, k: int, steps: dict[str, int]) -> dict[str, Any]:
    """Fine-tune every target's current version into the next one with TRL: in this process, or
    through ``accelerate launch`` (``train.launcher``), one target at a time."""
    if ctx.cfg.train.launcher == "accelerate":
        return {t: _launch_training(ctx, k, t, steps[t]) for t in ctx.roster.targets}
    return {t: train_target(ctx, k, t, steps[t]) for t in ctx.roster.targets}


def train_target(ctx: Context, k: int, t: str, steps: int) -> dict[str, Any]:
    """Train target ``t``'s version k from version k-1 on iteration k's curated data."""
    new = versioned(t, k)
    target_dir = ctx.store.model_dir(new)
    sft = _training_data(ctx, k, "sft", t)
    dpo = _training_data(ctx, k, "dpo", t)
    pc = ctx.roster.config(t)
    tc = ctx.cfg.train if pc.learning_rate is None else ctx.cfg.train.model_copy(update={"learning_rate": pc.learning_rate})
    if pc.serve_lora:  # the version is an adapter on the base weights, served by vLLM
        previous = ctx.store.model_dir(current_version(ctx, t, k)) if k > 1 else None
        res = train_version(ctx.roster.path(versioned(t, 0)), target_dir, sft, dpo, tc, steps,
                            ctx.cfg.run.seed + k, adapter=str(previous) if previous else None, keep_adapter=True)
        if is_main_process() and ctx.cfg.allocate.sharing != "federated":  # federated: loaded once merged
            ctx.roster.build(pc, t).load_lora_adapter(new, str(target_dir.resolve()))  # type: ignore[attr-defined]
    else:
        res = train_version(ctx.roster.path(current_version(ctx, t, k)), target_dir, sft, dpo, tc, steps,
                            ctx.cfg.run.seed + k)
    return {"version": new, "steps": res.steps, "loss": res.loss, "examples": res.examples,
            "served_as": new if pc.serve_lora else None}


@_stage("merge")
def merge_stage(ctx: Context, k: int) -> dict[str, Any]:
    """``allocate.sharing: federated``: merge the just-trained versions of same-architecture
    targets, weighted by their latest eval accuracy (flywheel/merging.py). The trained
    checkpoints move to ``models/.premerge/`` first and are only read from there, so a rerun
    after a kill writes the same merged files."""
    a = ctx.cfg.allocate
    if a.sharing != "federated":
        return {"groups": []}
    premerge = ctx.store.root / "models" / ".premerge"
    premerge.mkdir(parents=True, exist_ok=True)
    sources, outputs = {}, {}
    for t in ctx.roster.targets:
        v = versioned(t, k)
        sources[t], outputs[t] = premerge / v, ctx.store.model_dir(v)
        if not sources[t].exists():
            outputs[t].rename(sources[t])
    before = (stage_result(ctx.store, k - 1, "evaluate") or {}).get("eval", {})
    report = []
    for group in merging.groups(sources):
        acc = {t: standing(before.get(current_version(ctx, t, k), {}), "accuracy") or 0.0 for t in group}
        weights = merging.performance_weights(acc, a.merge_temperature)
        merging.merge_group({t: sources[t] for t in group}, weights, a.merge_strength, {t: outputs[t] for t in group})
        report.append({"targets": group, "weights": {t: round(w, 6) for t, w in weights.items()},
                       "accuracy_before": acc})
    for t in ctx.roster.targets:
        pc = ctx.roster.config(t)
        if pc.serve_lora and is_main_process():  # the served adapter is the merged one
            ctx.roster.build(pc, t).load_lora_adapter(versioned(t, k), str(outputs[t].resolve()))  # type: ignore[attr-defined]
    return {"groups": report, "strength": a.merge_strength}


def _launch_training(ctx: Context, k: int, t: str, steps: int) -> dict[str, Any]:
    """``accelerate launch`` the training of one target (flywheel/train_worker.py); its main
    process writes the result next to the stage results."""
    import shutil
    import subprocess
    import sys

    result = ctx.store.stage_path(k, f"train-{t}")
    if result.exists():
        return read_json(result)
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        raise RuntimeError("train.launcher accelerate: the accelerate command is not installed")
    from flywheel.training import Hardware, precision

    hw = Hardware.detect()
    mixed = {"bf16": "bf16", "fp16": "fp16"}.get(precision(ctx.cfg.train, hw), "no")
    cmd = [accelerate, "launch", "--num_processes", str(ctx.cfg.train.num_processes), "--num_machines", "1",
           "--mixed_precision", mixed, "--dynamo_backend", "no"]
    cmd += [] if hw.cuda else ["--cpu"]
    cmd += ["-m", "flywheel.train_worker", str(ctx.store.root), str(k), t, str(steps)]
    log.info("training %s@%d: %s", t, k, " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"accelerate launch for {t}@{k} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return read_json(result)


@_stage("evaluate")
def evaluate(ctx: Context, k: int) -> dict[str, Any]:
    """Every target's newest version answers the held-out eval split and battles each opponent;
    accuracy per category, and Bradley-Terry Elo with CIs over all eval battles so far."""
    versions = [versioned(t, k) for t in ctx.roster.targets]
    specs = []
    for v in versions:
        for opp in ctx.roster.opponents:
            for p in ctx.eval_split:
                key = stable_id("eval", v, opp, p.id)
                a, b = seat(key, v, opp)
                specs.append(BattleSpec(key, k, "eval", p.id, a, b, arm_of(p)))
    play(ctx.roster, ctx.store, specs, ctx.prompts, ctx.cfg.run.shard_size)
    judge_pending(ctx.judge, ctx.store, k, "eval", ctx.cfg.run.shard_size)
    a, b, w = _rated(ctx, None, "eval")
    rc = ctx.cfg.rating
    board = leaderboard(a, b, w, rc.bootstrap_rounds, rc.ci, ctx.cfg.evaluate.bootstrap_seed, rc.scale, rc.base, rc.init, prior=rc.prior)
    by_model = {r.model: r for r in board}
    responses: dict[str, dict[str, str]] = {}
    for bt in ctx.store.battles(k, "eval"):
        responses.setdefault(bt.model_a, {})[bt.prompt_id] = bt.response_a
        responses.setdefault(bt.model_b, {})[bt.prompt_id] = bt.response_b
    subsets = _subset_boards(ctx, k, {m: responses.get(m, {}) for m in ctx.roster.opponents})
    evals: dict[str, Any] = {}
    for m in versions + ctx.roster.opponents:
        acc, by_cat = accuracy(responses.get(m, {}), ctx.eval_split, ctx.correct)
        r = by_model.get(m)
        evals[m] = {"accuracy": acc, "accuracy_by_category": by_cat,
                    "elo": r.rating if r else None, "elo_ci": [r.lower, r.upper] if r else None,
                    "elo_by_subset": {name: next((x["rating"] for x in rows if x["model"] == m), None)
                                      for name, rows in subsets.items()}}
    for v in versions:  # local targets: the loss on the reference answers too (reported)
        if ctx.roster.config(v).kind == "transformers":
            evals[v]["eval_loss"] = ctx.roster.player(v).reference_loss(ctx.eval_split)  # type: ignore[attr-defined]
        evals[v]["validation"] = validate(ctx, v, k)
    rows = [r.to_dict() for r in board]
    atomic_write_json(ctx.store.root / "ratings" / f"{iter_name(k)}.json", rows)
    atomic_write_text(ctx.store.root / "ratings" / f"{iter_name(k)}.md",
                      f"# Eval leaderboard after iteration {k}\n\n" + reports.markdown_table(rows) + "\n")
    history = read_json(ctx.store.root / "ratings" / "history.json", {})
    history[str(k)] = rows
    atomic_write_json(ctx.store.root / "ratings" / "history.json", history)
    return {"eval": evals, "leaderboard": rows}


def validate(ctx: Context, version: str, k: int) -> dict[str, Any]:
    """A target version's accuracy on the validation split (and, for local transformers targets,
    the loss of its reference answers): what steers the run, never the eval split."""
    answers = generate_cached(ctx.roster, ctx.store, version, ctx.validation, k, "validation")
    acc, by_cat = accuracy({pid: g.text for pid, g in answers.items() if g.ok}, ctx.validation, ctx.correct)
    out: dict[str, Any] = {"prompts": len(ctx.validation), "accuracy": acc, "accuracy_by_category": by_cat}
    if ctx.roster.config(version).kind == "transformers":
        out["loss"] = ctx.roster.player(version).reference_loss(ctx.validation)  # type: ignore[attr-defined]
    return out


def standing(evaluation: dict[str, Any], measure: str) -> float | None:
    """A version's standing for steering: its validation ``accuracy``, or minus its validation
    ``loss``. Run directories made before the validation split existed have only the eval
    split's figures, and those are used for them."""
    val = evaluation.get("validation")
    if val is None:
        value = evaluation.get("accuracy" if measure == "accuracy" else "eval_loss")
    else:
        value = val.get(measure)
    if value is None:
        return None
    return value if measure == "accuracy" else -value


def _subset_boards(ctx: Context, k: int, reference_answers: dict[str, dict[str, str]]) -> dict[str, list[dict]]:
    """Elo on the eval split's diverse and hard subsets and their mix (WizardArena's test sets).
    The subsets are fixed the first time (from the opponents' answers) and kept in ratings/."""
    path = ctx.store.root / "ratings" / "eval-subsets.json"
    subsets = read_json(path)
    if subsets is None:
        subsets = {"rules": SUBSET_RULES, "prompt_ids": eval_subsets(ctx.eval_split, reference_answers, ctx.correct)}
        atomic_write_json(path, subsets)
    every = rated_battles(ctx.store, None, "eval")
    rc = ctx.cfg.rating
    boards = {}
    for name, ids in subsets["prompt_ids"].items():
        chosen = set(ids)
        rows = [r for r in every if r.prompt_id in chosen]
        boards[name] = [x.to_dict() for x in leaderboard(*columns(rows), rc.bootstrap_rounds, rc.ci,
                                                         ctx.cfg.evaluate.bootstrap_seed, rc.scale, rc.base, rc.init, prior=rc.prior)]
    atomic_write_json(ctx.store.root / "ratings" / f"{iter_name(k)}-subsets.json", boards)
    return boards


def category_boards(store: RunStore, cfg: FlywheelConfig, phase: str = "eval") -> dict[str, list[dict]]:
    """Eval leaderboards per task category, over all of a run's eval battles."""
    rc = cfg.rating
    by_cat: dict[str, list[RatedBattle]] = {}
    for r in rated_battles(store, None, phase):
        by_cat.setdefault(r.category, []).append(r)
    return {c: [x.to_dict() for x in leaderboard(*columns(rows), rc.bootstrap_rounds, rc.ci,
                                                 cfg.evaluate.bootstrap_seed, rc.scale, rc.base, rc.init, prior=rc.prior)]
            for c, rows in sorted(by_cat.items())}


@_stage("allocate")
def allocate_stage(ctx: Context, k: int) -> dict[str, Any]:
    """Share the next iteration's training steps and battles among the targets, from each
    target's gain in eval accuracy (or drop in eval loss, ``allocate.signal``) per unit of
    compute (see flywheel/allocation.py)."""
    progress: dict[str, list[float]] = {t: [] for t in ctx.roster.targets}
    compute: dict[str, list[float]] = {t: [] for t in ctx.roster.targets}
    for i in range(k + 1):
        ev = (stage_result(ctx.store, i, "evaluate") or {}).get("eval", {})
        tr = (stage_result(ctx.store, i, "train") or {}) if i > 0 else {}
        for t in ctx.roster.targets:
            value = standing(ev.get(versioned(t, i), {}), ctx.cfg.allocate.signal)
            if value is not None:
                progress[t].append(value)
                steps = tr.get(t, {}).get("steps", 0)
                compute[t].append(steps * (_n_params(ctx, t) if ctx.cfg.allocate.compute == "params" else 1))
    previous = (stage_result(ctx.store, k - 1, "allocate") or {}).get("shares") if k > 0 else None
    alloc = allocate(ctx.cfg.allocate, ctx.roster.targets, ctx.cfg.train.steps,
                     ctx.cfg.select.battles_per_iteration, progress, compute, previous)
    return alloc.to_dict()


@functools.lru_cache(maxsize=64)
def _params_at(path: str) -> int:
    from safetensors import safe_open

    total = 0
    with safe_open(str(Path(path) / "model.safetensors"), "pt") as f:
        for name in f.keys():
            total += int(np.prod(f.get_slice(name).get_shape()))
    return total


def _n_params(ctx: Context, target: str) -> int:
    """Parameters of a target (its base weights), for compute measured as steps x parameters."""
    return _params_at(ctx.roster.path(versioned(target, 0)))


# -- the summary --------------------------------------------------------------------------------
def record_iteration(ctx: Context, k: int, wall_s: float) -> dict[str, Any]:
    """Append iteration ``k`` to summary.json (replacing an entry a killed run left behind)."""
    # select, battle and judge run per round (select-r1, ...); the plans and logs cover them.
    res = {s: stage_result(ctx.store, k, s) or {} for s in ("curate", "train", "merge", "evaluate", "allocate")}
    specs = read_plan(ctx.store, k) or []
    arms: dict[str, int] = {}
    for sp in specs:
        arms[sp.arm] = arms.get(sp.arm, 0) + 1
    entry = {
        "iteration": k,
        "battles": len(specs),
        "failed_battles": sum(1 for b in ctx.store.battles(k, "train") if not b.ok),
        "sft_examples": res["curate"].get("sft_examples", 0),
        "dpo_pairs": res["curate"].get("dpo_pairs", 0),
        "train_steps": {t: res["train"].get(t, {}).get("steps", 0) for t in ctx.roster.targets},
        "eval": {m: v for m, v in res["evaluate"].get("eval", {}).items() if "@" in m},
        "opponents_eval": {m: v for m, v in res["evaluate"].get("eval", {}).items() if "@" not in m},
        "allocation": res["allocate"],
        "merge": res["merge"],
        "arms": dict(sorted(arms.items())),
        "usage": usage_summary(ctx.store, k),
        "judge": judge_report(ctx, k),
        "bandit": bandit_report(ctx, k) if k > 0 else {},
        "wall_s": round(wall_s, 2),
    }
    path = ctx.store.root / "summary.json"
    summary = read_json(path) or {"run_id": ctx.cfg.run.name, "targets": ctx.roster.targets, "iterations": []}
    summary["iterations"] = [e for e in summary["iterations"] if e["iteration"] != k] + [entry]
    summary["iterations"].sort(key=lambda e: e["iteration"])
    atomic_write_json(path, summary)
    return entry


def judge_report(ctx: Context, k: int) -> dict[str, Any]:
    """Iteration ``k``'s judge diagnostics: invalid verdicts, position flips, length bias,
    self-preference and (for panels) agreement, over its train and eval battles."""
    from judges.build import build_verifier
    from judges.diagnostics import diagnose

    verifier = build_verifier(ctx.cfg.judge.verifier)
    return diagnose(ctx.store.battles(k), ctx.store.judgments(k), ctx.judge.model, verifier, ctx.judge.name)


def usage_summary(store: RunStore, k: int) -> dict[str, dict[str, float]]:
    """Per player, this iteration's generations, failures, API calls, retries, tokens and cost."""
    out: dict[str, dict[str, float]] = {}
    for row in store.read_jsonl("usage.jsonl"):
        if row.get("iteration") != k:
            continue
        acc = out.setdefault(row["player"], {})
        for key, v in row.items():
            if key not in ("iteration", "phase", "player") and isinstance(v, int | float):
                acc[key] = round(acc.get(key, 0) + v, 6)
    return dict(sorted(out.items()))


def summary(store: RunStore) -> dict[str, Any]:
    return read_json(store.root / "summary.json") or {}


def completed_iterations(store: RunStore) -> list[int]:
    return [e["iteration"] for e in summary(store).get("iterations", [])]

