"""The flywheel as a Prefect flow: each stage of flywheel/stages/ runs as a Prefect task, and a
round's battle and judgment shards as mapped tasks on the run's task runner. The order of the
stages is flywheel.stages.iteration's; the work lives in flywheel/."""

import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from prefect import Task, flow, tags, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from flows.runners import start_early, task_runner, workers_use_the_temporary_server
from flywheel.config.loading import load_config
from flywheel.config.tree import FlywheelConfig
from flywheel.ground import interrupt, reports
from flywheel.ground.dataset_files import dataset_rows
from flywheel.ground.records import versioned
from flywheel.ground.store import DATASET_KINDS, RunStore
from flywheel.players.server import serving
from flywheel.run.context import Context, close_run, new_run_id, open_run
from flywheel.run.metrics import tracking
from flywheel.run.results import EvalResult, IterationSummary
from flywheel.run.summary import completed_iterations
from flywheel.run.summary import completed_iterations as done_in
from flywheel.stages.iteration import Shard, run_to
from flywheel.worlds.tinymodels import bootstrap

T = TypeVar("T")

# Stages hold the run directory's state on disk, so Prefect's input caching is off; retries
# are safe because every stage is idempotent.
TASK = dict(cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1)
_TASKS: dict[str, Task] = {}


log = logging.getLogger("flywheel")


def run_name_of(prefix: str) -> Callable[[], str]:
    """A task-run name from the run's parameters: ``<prefix>-i<k>[-r<round>][-s<shard>]``
    (``play-i1-r2-s0003``, ``select-i1-r2``, ``train-i1``)."""
    def name() -> str:
        from prefect.runtime import task_run

        params = task_run.parameters
        out = f"{prefix}-i{params.get('k')}"
        if params.get("rnd") is not None:
            out += f"-r{params['rnd']}"
        if params.get("i") is not None:
            out += f"-s{params['i']:04d}"
        return out

    return name


def opaque_to_prefect(arg: Any) -> Any:
    """A stage's argument as Prefect should take it: plain values (the iteration, a round) as they
    are, so that task-run names can read them; anything else (the run's context: its config,
    prompts and store) quoted, so that Prefect does not walk it, object by object, for upstream
    futures before each stage (on the embedded default that walk took a fifth of a run)."""
    return arg if arg is None or isinstance(arg, (int, float, str)) else quote(arg)


def as_task(name: str, fn: Callable[..., Any]) -> Task:
    """The Prefect task of a stage (one per stage name and function), its runs named by
    iteration, round and shard."""
    key = f"{name}:{fn.__module__}.{fn.__qualname__}"
    if key not in _TASKS:
        _TASKS[key] = task(fn, name=name, task_run_name=run_name_of(name.removesuffix("-shard")), **TASK)
    return _TASKS[key]


def build_models(cfg: FlywheelConfig) -> list[str]:
    """Build and pre-train the embedded world's tiny models that the run's players need and
    that are missing (or stale); returns their directories."""
    world = cfg.world
    players = cfg.targets + cfg.opponents
    # Players by name, and players whose path is one of the world's models (three targets
    # trained from one pre-trained student, say).
    names = [p.name for p in players] + [Path(p.path).name for p in players
                                         if p.path and Path(p.path).resolve().parent == Path(world.models_dir).resolve()]
    return [str(p) for p in bootstrap(world, only=names)]


@task(**TASK)
def ensure_models(ctx: Context) -> list[str]:
    """The flow's own check that every model it needs is built (a deployment's run builds them
    here; `flywheel run` has built them while the server started)."""
    return build_models(ctx.cfg)


@contextmanager
def temporary_server_starting() -> Iterator[None]:
    """Where no Prefect server is configured (``PREFECT_API_URL``), start Prefect's temporary one
    in a background thread while the body runs (pre-training the tiny models, on a fresh
    checkout), and wait for it after. A start that fails here is tried again by the flow."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    def start() -> None:
        try:
            SubprocessASGIServer().start()
        except Exception as e:  # noqa: BLE001 - the flow's client starts it again and reports why
            log.debug("the temporary Prefect server did not start early: %s", e)

    starting = threading.Thread(target=start, name="prefect-server-start", daemon=True)
    starting.start()
    try:
        yield
    finally:
        starting.join()


class PrefectRunner:
    """Runs each stage as a Prefect task in the flow, and a round's shards as mapped tasks."""

    def stage(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        ctx, k = args[0], args[1]
        with tags(f"iteration:{k}"):
            result = as_task(name, fn)(*map(opaque_to_prefect, args))
            publication = getattr(fn, "publishes", None)  # declared by the stage (flywheel/run/context.py)
            if publication is not None:
                PUBLISHERS[publication](ctx, k, result)
        return result

    def shards(self, name: str, fn: Shard, run_dir: str, k: int, rnd: int, n: int) -> None:
        if n:
            with tags(f"iteration:{k}"):
                as_task(name, fn).map(unmapped(run_dir), unmapped(k), unmapped(rnd), list(range(n))).result()


def run_key(ctx: Context) -> str:
    """The run's name as an artifact key (lowercase letters, digits and dashes)."""
    return "-".join(filter(None, re.split(r"[^a-z0-9]+", str(ctx.cfg.run.name).lower())))


def announce_datasets(ctx: Context, k: int) -> None:
    """Iteration ``k``'s datasets as Prefect assets (materialized by a task of this flow run), a
    table artifact, and one ``flywheel.dataset.created`` event each, so an automation can start a
    downstream deployment (fine-tuning elsewhere, a Hub push). The event's id is fixed by run,
    iteration and kind: a resumed run sends the same event again, never a second one."""
    from prefect.assets import materialize
    from prefect.events import emit_event

    found = [(kind, ctx.store.dataset_dir(k, kind)) for kind in DATASET_KINDS]
    found = [(kind, d.resolve()) for kind, d in found if d.exists()]
    if not found:
        return
    rows = {kind: dataset_rows(d) for kind, d in found}
    materialize(*[asset_key(d) for _, d in found], by="flywheel")(_materialized).with_options(
        name="datasets", task_run_name=f"datasets-i{k}", **TASK)()
    create_table_artifact(
        table=[{"iteration": k, "dataset": kind, "rows": rows[kind], "path": str(d)} for kind, d in found],
        key=f"datasets-{run_key(ctx)}"[:100], description=f"Datasets of run {ctx.cfg.run.name}, iteration {k}")
    for kind, d in found:
        emit_event(event="flywheel.dataset.created",
                   resource={"prefect.resource.id": f"flywheel.dataset.{ctx.cfg.run.name}.iter{k}.{kind}",
                             "prefect.resource.name": f"{ctx.cfg.run.name} iteration {k} {kind}"},
                   related=[{"prefect.resource.id": asset_key(d), "prefect.resource.role": "asset"}],
                   payload={"run": ctx.cfg.run.name, "run_dir": str(ctx.store.root.resolve()), "iteration": k,
                            "kind": kind, "rows": rows[kind], "path": str(d)},
                   id=uuid.uuid5(uuid.NAMESPACE_URL, f"flywheel:{ctx.store.root.resolve()}:{k}:{kind}"))


def asset_key(path: Path) -> str:
    """A folder's Prefect asset key: ``file://`` and its absolute path (characters asset keys may
    not hold, such as spaces or ``%``, become ``_``; a path too long ends in its hash)."""
    from prefect.types.names import MAX_ASSET_KEY_LENGTH, RESTRICTED_ASSET_CHARACTERS

    key = "file://" + "".join("_" if c in RESTRICTED_ASSET_CHARACTERS else c for c in path.resolve().as_posix())
    if len(key) > MAX_ASSET_KEY_LENGTH:
        key = key[:MAX_ASSET_KEY_LENGTH - 17] + "-" + uuid.uuid5(uuid.NAMESPACE_URL, key).hex[:16]
    return key


def _materialized() -> None:
    """The task that materializes assets: the files are already on disk when it runs."""


def materialize_checkpoints(ctx: Context, k: int) -> None:
    """Iteration ``k``'s trained versions as Prefect assets."""
    from prefect.assets import materialize

    dirs = [ctx.store.model_dir(versioned(t, k)).resolve() for t in ctx.roster.targets]
    dirs = [d for d in dirs if d.exists()]
    if dirs:
        materialize(*[asset_key(d) for d in dirs], by="flywheel")(_materialized).with_options(
            name="checkpoints", task_run_name=f"checkpoints-i{k}", **TASK)()


def publish_iteration(ctx: Context, entry: IterationSummary) -> None:
    """The judge diagnostics and the allocation of an iteration as table artifacts."""
    key, k = run_key(ctx), entry.iteration
    judge = {name: value for name, value in entry.judge.items() if not isinstance(value, (dict, list))}
    if judge:
        create_table_artifact(table=[judge], key=f"judge-{key}"[:100],
                              description=f"Judge diagnostics of run {ctx.cfg.run.name}, iteration {k}")
    if entry.allocation is not None:
        a = entry.allocation
        rows = [{"target": t, "share": a.shares.get(t), "train_steps": a.train_steps.get(t), "battles": a.battles.get(t),
                 "learning_rate": (a.learning_rates or {}).get(t)} for t in a.shares]
        create_table_artifact(table=rows, key=f"allocation-{key}"[:100],
                              description=f"Compute allocation after iteration {k} of run {ctx.cfg.run.name}")


def publish_leaderboard(ctx: Context, k: int, result: EvalResult) -> None:
    """The eval leaderboard as Prefect artifacts (a table and markdown), per run."""
    key = run_key(ctx)
    rows = result.leaderboard
    create_table_artifact(table=rows, key=f"leaderboard-{key}"[:100],
                          description=f"Eval leaderboard of run {ctx.cfg.run.name} after iteration {k}")
    create_markdown_artifact(
        markdown=f"# {ctx.cfg.run.name}: eval leaderboard after iteration {k}\n\n" + reports.markdown_table(rows),
        key=f"leaderboard-md-{key}"[:100], description=f"Eval leaderboard after iteration {k}")


# What the flow publishes once a stage is done, by the name the stage declares (``@stage(...,
# publishes=...)``): Prefect artifacts, assets and events; a stage runs the same without them.
PUBLISHERS: dict[str, Callable[[Context, int, Any], None]] = {
    "leaderboard": lambda ctx, k, result: publish_leaderboard(ctx, k, result),
    "datasets": lambda ctx, k, _: announce_datasets(ctx, k),
    "checkpoints": lambda ctx, k, _: materialize_checkpoints(ctx, k),
}


def run_flywheel(cfg: FlywheelConfig, resume: str | None = None, **kw: Any) -> str:
    """The flywheel flow on the task runner of the run's config (the run directory's own one on
    resume), tagged ``flywheel`` and ``run:<name>`` (its task runs too). A new run gets its name
    here, so that the flow run is named after it."""
    if resume is not None:
        run_cfg = load_config(RunStore(Path(resume)).config_path)
        name = run_cfg.run.name or Path(resume).name
    else:
        run_cfg = cfg = cfg.model_copy(deep=True)
        cfg.run.name = name = cfg.run.name or new_run_id()
    runner = task_runner(run_cfg.run)  # a missing extra: before the server starts and the models are built
    pending = RunStore.pending_server_log(run_cfg.run.root, name)
    # the model server first: if it fails, nothing is written
    with serving(run_cfg.serve, pending) as server, ExitStack() as early:
        with temporary_server_starting():
            start_early(runner, early)
            build_models(run_cfg)
        with tags("flywheel", f"run:{name}"), workers_use_the_temporary_server(run_cfg.run):
            return flywheel.with_options(task_runner=runner)(
                cfg, resume, server_log=str(pending) if server is not None else None, **kw)


def flow_run_name() -> str:
    """``<run>-iter<k>``: the run's name and the last iteration this flow run goes to."""
    from prefect.runtime import flow_run

    params = flow_run.parameters
    cfg = params["config"]
    cfg = cfg if isinstance(cfg, FlywheelConfig) else FlywheelConfig.model_validate(cfg)
    root = Path(params["resume"]) if params.get("resume") else Path(cfg.run.root) / str(cfg.run.name)
    store = RunStore(root)
    done = done_in(store) if store.config_path.exists() else []
    last = cfg.run.iterations if params.get("more") is None else max(done, default=0) + params["more"]
    return f"{cfg.run.name or root.name}-iter{last}"


@flow(name="flywheel", task_runner=ThreadPoolTaskRunner(max_workers=1), flow_run_name=flow_run_name)
def flywheel(config: FlywheelConfig, resume: str | None = None, more: int | None = None,
             lock_wait_s: float = 0.0, server_log: str | None = None) -> str:
    """Run (or resume) a flywheel: a baseline evaluation, then N iterations. Returns the run dir.

    ``config`` is the whole config tree (the Prefect UI shows it as a form and validates it);
    ``more``: instead of run.iterations, run this many iterations beyond those already completed
    when the run's lock is taken (a scheduled trigger adds one); ``server_log``: the log of the
    model server started for the run (``serve``), moved into the run directory."""
    interrupt.rearm()  # `flywheel run`: a SIGTERM stops at once, as Ctrl-C does (flywheel/ground/interrupt.py)
    ctx = open_run(config, Path(resume) if resume else None, lock_wait_s)
    try:
        log.info("run directory: %s", ctx.store.root)
        if server_log and Path(server_log).exists():
            log.info("model server log: %s", ctx.store.adopt_server_log(Path(server_log)))
        done = completed_iterations(ctx.store)
        last = ctx.cfg.run.iterations if more is None else max(done, default=0) + more
        ensure_models(opaque_to_prefect(ctx))
        with tracking(ctx) as track:  # tracking.kind: each finished iteration to an experiment tracker too

            def finished(entry: IterationSummary) -> None:
                log.info("iteration %d: %s", entry.iteration, {m: e.accuracy for m, e in entry.eval.items()})
                publish_iteration(ctx, entry)
                track()

            run_to(ctx, last, PrefectRunner(), finished)
            track()  # what an earlier process finished and could not log
        return str(ctx.store.root)
    finally:
        close_run(ctx)


@flow(name="flywheel-scheduled")
def scheduled_flywheel(config: FlywheelConfig) -> str:
    """One scheduled trigger. ``schedule.mode: continue`` adds one iteration to the run
    ``run.root/run.name`` (creating it on the first trigger); ``fresh`` starts a new run.
    A trigger that finds the run in use waits ``schedule.lock_wait_s``, then refuses."""
    cfg = config.model_copy(deep=True)
    base = cfg.run.name or "scheduled"
    if cfg.schedule.mode == "fresh":
        cfg.run.name = f"{base}-{new_run_id()}-{os.urandom(2).hex()}"
        return run_flywheel(cfg)
    root = Path(cfg.run.root) / base
    cfg.run.name = base
    resume = str(root) if RunStore(root).config_path.exists() else None
    return run_flywheel(cfg, resume, more=1, lock_wait_s=cfg.schedule.lock_wait_s)
