"""Shared fixtures: a tiny embedded world built once per session, and tiny run configs."""

from __future__ import annotations

import functools
import inspect
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# Torch runs on one thread here and in every process the tests start: the tiny models' operations are
# too small to split, and beside a pytest worker per core a second thread only waits for a core the
# other processes hold (two to three times the CPU time on a busy 2-core machine). The golden runs
# alone train at the machine's own count (machine_threads).
for key, value in {
    "OMP_NUM_THREADS": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    # The session's one Prefect server (SQLite) serves every worker's runs at once; on 2 busy cores
    # its database can stay locked past the client's 5 retries (62 s), which answer 503 to a task's
    # tag-concurrency call and fail a run. 7 retries wait up to 254 s before giving up.
    "PREFECT_CLIENT_MAX_RETRIES": "7",
}.items():
    os.environ.setdefault(key, value)

import yaml  # noqa: E402

from flywheel.config.loading import load_config
from flywheel.config.tree import FlywheelConfig, ModelSpec

TINY_MODELS = [
    {"name": "student", "steps": 20, "n_embd": 32},
    {"name": "calc", "categories": ["add", "sub", "mul"], "steps": 60, "n_embd": 32},
    {"name": "scribe", "categories": ["rev", "sort", "count"], "steps": 60, "n_embd": 32},
    {"name": "generalist", "steps": 40, "n_embd": 32},
]

# The suite of the tiny runs; the session's models are pre-trained on it (a model built on another
# suite would be rebuilt by a run: its fingerprint would not match).
TINY_TASKS = {"train_per_cell": 30, "eval_per_cell": 2, "val_per_cell": 2}


# The four models as pre-trained once (``python -m tests.golden --models`` rewrites them): shipped,
# so that runs from them, and the golden digests, are the same on every machine whatever its
# floating point would have pre-trained.
# The modules that take longest (whole runs: Prefect servers, killed and resumed runs, real models),
# with roughly the seconds each takes alone on a quiet 2-core machine: collected first.
LONG_MODULES = {"test_flow": 150, "test_resume": 120, "test_api_flywheel": 70, "test_served": 70, "test_schedule": 55,
                "test_realmodels": 50, "test_ray": 40, "test_rate_cli": 40, "test_rl": 37, "test_onpolicy": 33,
                "test_chat": 20, "test_training": 18, "test_games_flow": 18, "test_rl_conversations": 18,
                "test_config": 12, "test_promotion": 12, "test_tracking": 2}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long modules first, dealt out among the pytest workers. ``--dist worksteal`` hands each
    worker a contiguous share of the collection (with three workers, a third each, in order), then
    moves the end of the busiest worker's queue to a worker that runs dry. Each share starts on its
    long modules (each module, longest first, to the least loaded share) and ends on short tests, so
    the workers start on the long runs together, and what moves is short tests, not half a module
    whose module-scoped run would then be made a second time."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))

    def module(item: pytest.Item) -> str:
        return item.module.__name__.rpartition(".")[2] if item.module else ""

    by_module: dict[str, list[pytest.Item]] = {name: [] for name in LONG_MODULES}
    short = [item for item in items if module(item) not in by_module]
    for item in items:
        if module(item) in by_module:
            by_module[module(item)].append(item)
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0] * workers
    for name, cost in LONG_MODULES.items():  # longest first
        least = load.index(min(load))
        shares[least] += by_module[name]
        load[least] += cost
    left = len(items)
    for i, share in enumerate(shares):
        size = left // (workers - i)
        left -= size
        take = max(0, size - len(share))
        share += short[:take]
        short = short[take:]
    shares[-1] += short
    items[:] = [item for share in shares for item in share]  # each module keeps its own order


FIXTURE_MODELS = Path(__file__).parent / "fixtures" / "tiny-models"


@functools.cache
def machine_thread_count() -> int:
    """The threads torch takes on this machine when OMP_NUM_THREADS does not say (a fresh process asked)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout)


@contextmanager
def machine_threads() -> Iterator[None]:
    """Torch at the machine's own thread count in this process for the block: the golden runs
    (tests/fixtures/golden.json) were trained so, and a sum split over other threads rounds otherwise."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(machine_thread_count())
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tiny_world(models_dir: Path):
    from flywheel.config.tree import WorldConfig

    return WorldConfig(models_dir=models_dir, models=[ModelSpec(**m) for m in TINY_MODELS], tasks=TINY_TASKS)


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory) -> Path:
    """The embedded world's four models, pre-trained for a few steps (real, just small): a copy of
    the shipped fixture; a model whose fingerprint no longer matches the code is pre-trained anew
    (and the golden tests then say the fixture is stale)."""
    import shutil

    from flywheel.worlds.tinymodels import bootstrap

    d = tmp_path_factory.mktemp("models")
    shutil.copytree(FIXTURE_MODELS, d, dirs_exist_ok=True)
    bootstrap(tiny_world(d))
    return d


def tiny_tree(models_dir: Path, runs_root: Path, **over) -> dict:
    """A config tree for a fast real run: 2 iterations, 48 battles, 4 training steps."""
    tree = {
        "run": {"root": str(runs_root), "iterations": 2, "shard_size": 16},
        "world": {"models_dir": str(models_dir), "models": TINY_MODELS,
                  "tasks": dict(TINY_TASKS)},
        "select": {"battles_per_iteration": 48},
        "rating": {"bootstrap_rounds": 20},
        "train": {"steps": 4, "batch_size": 8},
    }
    for dotted, value in over.items():
        node = tree
        keys = dotted.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return tree


def gaps_run(models_dir: Path, runs_root: Path, name: str, **over) -> tuple[Path, dict[str, float], dict[str, float]]:
    """A tiny run of one iteration (``over``: its config) with, per category, student@0's
    validation accuracy and the best opponent's: the figures train.gap_mix and train.rl.gap_pick
    weigh by. Returns (the run's folder, student@0's, the best opponent's)."""
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.evaluate import validation_accuracy
    from flywheel.stages.iteration import run_to

    ctx = open_run(FlywheelConfig.model_validate(tiny_tree(models_dir, runs_root, run__name=name, run__iterations=1,
                                                           **over)))
    try:
        run_to(ctx, 1)
        own = ctx.version_eval("student@0").validation.accuracy_by_category
        best = {c: max(validation_accuracy(ctx, o, 1)[1][c] for o in ctx.roster.opponents) for c in own}
    finally:
        close_run(ctx)
    return runs_root / name, own, best


@pytest.fixture
def tiny_config(tiny_models_dir, tmp_path):
    """A factory: ``tiny_config(**overrides)`` -> (FlywheelConfig, path of its YAML)."""

    def make(**over) -> tuple[FlywheelConfig, Path]:
        path = tmp_path / "recipe.yaml"
        path.write_text(yaml.safe_dump(tiny_tree(tiny_models_dir, tmp_path / "runs", **over)))
        return load_config(path), path

    return make


@dataclass(frozen=True)
class Ran:
    """What a shell gets from a command: its exit status and both streams."""

    returncode: int
    stdout: str
    stderr: str


def flywheel_cli(*args: object, env: dict[str, str] | None = None) -> Ran:
    """``flywheel ARGS`` in this process (typer's CliRunner, with ``env`` over the environment), as
    ``flywheel.face.cli.main`` runs it: a damaged file is one error line, exit 2; any other exception
    the command leaves unhandled fails the test with its traceback. For the commands that read and
    refuse; the runs themselves are started as processes (``python -m flywheel.face.cli``)."""
    from typer.testing import CliRunner

    from flywheel.face.cli import QUIET_ENV, app
    from flywheel.face.cli_data import USAGE, damaged_file

    result = CliRunner().invoke(app, [str(a) for a in args], env={**QUIET_ENV, **(env or {})})
    error = result.exception
    if error is not None and not isinstance(error, SystemExit):
        damaged = damaged_file(error)
        if damaged is None:
            raise error
        return Ran(USAGE, result.stdout, result.stderr + f"error: {damaged}\n")
    return Ran(result.exit_code, result.stdout, result.stderr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_prefect_server(home: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """``prefect server start`` on a free port of 127.0.0.1 (its own process group; its log in
    ``home/server.log``), not waited for: (the process, the API URL)."""
    port = free_port()
    # The scheduler keeps at most 5 runs of a deployment ahead (Prefect's default: up to 100). The
    # schedule test's deployments trigger every 5 and 10 s and its worker asks every 2 s: with 100 ahead,
    # the late runs piled up, the worker tried each of them again and again (106 submissions, each put
    # back to scheduled by the deployment's concurrency limit of 1) and, in one session, the shared SQLite
    # server answered the other workers' flows minutes late and the test passed its deadline.
    env = {**env, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false",
           "PREFECT_SERVER_SERVICES_SCHEDULER_MAX_RUNS": "5"}
    env.pop("PREFECT_API_URL", None)
    env.pop(SHARED_PREFECT_API, None)
    prefect = str(Path(sys.executable).parent / "prefect")
    log = (home / "server.log").open("w")
    server = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return server, f"http://127.0.0.1:{port}/api"


def answers(api: str, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Whether the Prefect server at ``api`` answers /health within ``timeout_s`` (while ``alive``)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def start_prefect_server(home: Path, env: dict[str, str], timeout_s: float = 180) -> tuple[subprocess.Popen, str]:
    """``launch_prefect_server``, then wait until /health answers; raises if it does not within
    ``timeout_s``."""
    server, api = launch_prefect_server(home, env)
    if not answers(api, timeout_s, lambda: server.poll() is None):
        stop(server)
        raise AssertionError((home / "server.log").read_text()[-2000:])
    return server, api


def stop(proc: subprocess.Popen) -> None:
    """Stop a process and everything it started (its own session), and check they are gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(0.5)
    proc.wait(timeout=15)
    for _ in range(30):  # children die soon after their group is signalled
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    raise AssertionError(f"processes of group {proc.pid} are still running")


# With pytest workers (-n), the controller starts one Prefect server for them all as the session
# begins (each worker starting its own cost ~10 s of CPU apiece) and names it to them here.
SHARED_PREFECT_API, SHARED_PREFECT_PID = "FLYWHEEL_TESTS_PREFECT_API", "FLYWHEEL_TESTS_PREFECT_PID"


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return  # a worker, or no workers: the session fixture starts a server where a test needs one
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="flywheel-tests-prefect-"))
    try:
        server, api = launch_prefect_server(home, dict(os.environ))
    except OSError as e:  # no server to share: each worker's fixture starts its own
        warnings.warn(f"the shared Prefect server did not start: {e}", stacklevel=1)
        return
    config.stash[_SHARED_SERVER] = (server, home)
    os.environ[SHARED_PREFECT_API] = api  # the workers, started after this, inherit both
    os.environ[SHARED_PREFECT_PID] = str(server.pid)


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_SHARED_SERVER, None)
    if shared is not None:
        import shutil

        try:
            stop(shared[0])
        except AssertionError as e:  # a process left behind is worth a warning, not a failed session
            warnings.warn(str(e), stacklevel=1)
        finally:
            shutil.rmtree(shared[1], ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_SHARED_SERVER = pytest.StashKey[tuple[subprocess.Popen, Path]]()


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    """One Prefect server for every ``flywheel`` subprocess of the session (the workers' shared one,
    or one of its own): without it each run starts (and stops) a temporary server of its own, ~10 s
    a run here. None where it does not come up: the runs then start their own, as a user's would."""
    shared = os.environ.get(SHARED_PREFECT_API)
    if shared is not None:
        pid = int(os.environ[SHARED_PREFECT_PID])
        yield shared if answers(shared, 120, lambda: _running(pid)) else None
        return
    try:
        server, api = start_prefect_server(tmp_path_factory.mktemp("prefect-server"), dict(os.environ), 120)
    except AssertionError:
        yield None
        return
    yield api
    stop(server)


@contextmanager
def on_server(api: str | None) -> Iterator[None]:
    """In-process flows report to ``api``, the session's Prefect server, for the block (a
    temporary server of their own, ~10 s to start here, where the session's did not come up);
    what the flows logged and announced is sent before the block ends."""
    import prefect.context
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.utilities.asyncutils import run_coro_as_sync

    if api is None:
        from prefect.testing.utilities import prefect_test_harness

        with prefect_test_harness(server_startup_timeout=120):
            yield
        return

    async def drain() -> None:
        for pending in (APILogWorker.instance().drain(), EventsWorker.drain_all()):
            if inspect.isawaitable(pending):
                await pending

    with temporary_settings(updates={PREFECT_API_URL: api}), \
            prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
        try:
            yield
        finally:
            run_coro_as_sync(drain())


@pytest.fixture(scope="module")
def harness(prefect_api) -> Iterator[None]:
    """The module's in-process flows report to the session's Prefect server."""
    with on_server(prefect_api):
        yield


@pytest.fixture
def cli_env(tmp_path, prefect_api) -> dict[str, str]:
    """Environment for running the ``flywheel`` command in a subprocess, isolated and offline,
    talking to the session's Prefect server."""
    env = dict(os.environ)
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    env.setdefault("HF_HOME", str(tmp_path / "hf"))
    env.pop("PREFECT_API_URL", None)
    if prefect_api is not None:
        env["PREFECT_API_URL"] = prefect_api
    return env
