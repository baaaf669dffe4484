"""Where a run's shards run (``run.task_runner``): Prefect's thread pool in the flow's process, a
Dask cluster or a Ray instance, local or at ``run.runner_address``; what starts with them and
what their workers need to reach the flow's Prefect server."""

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from prefect.task_runners import ThreadPoolTaskRunner

from flywheel.config.tree import RunConfig, runner_needs

# A local Ray instance (no run.runner_address) is this machine's alone: Ray's switch for a one-node
# instance (the Windows and macOS default) binds and advertises 127.0.0.1 only; token
# authentication, Ray's default for a local instance, set explicitly so that Ray does not warn
# about it on every run; no usage statistics; and a shard, which asks Ray for no GPU, sees the
# machine's GPUs as a Dask worker does (older Ray versions hid them from such tasks). Ray reads
# some of them as it is imported, which task_runner does as it makes the runner; a variable
# already set wins.
LOCAL_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
                 "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}


def local_ray(workers: int) -> dict[str, Any]:
    """``ray.init``'s arguments for a new Ray instance on this machine: ``workers`` CPUs (a shard
    takes one, so that many shards at once), no dashboard, never an instance already running
    (``address: local``; a bare ``ray.init()`` joins the last one started here). Sets
    ``LOCAL_RAY_ENV`` for it."""
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    return {"address": "local", "num_cpus": workers, "include_dashboard": False}


def start_early(runner: Any, stack: ExitStack) -> None:
    """Start a new local Ray instance now, on ``stack`` (seconds, while Prefect's temporary server
    starts): the flow's runner, a copy of ``runner``, then joins it rather than start one after,
    and ``stack`` shuts it down after the flow. Its workers import what a shard runs meanwhile.
    Any other runner starts with the flow."""
    init = getattr(runner, "init_kwargs", {})
    if init.get("address") == "local":
        import ray

        stack.enter_context(runner)
        warming = ray.remote(num_cpus=1)(warm)
        for _ in range(init["num_cpus"]):  # one a CPU, so each worker; Ray keeps them for the shards
            warming.remote()


def warm() -> None:
    """A Ray worker's imports for a shard (the stages, Prefect's task engine, torch), done while
    the flow starts rather than in the first shard; the flow's own module, light beside them, comes
    with the first shard."""
    import prefect.task_engine  # noqa: F401

    import flywheel.stages.iteration  # noqa: F401


def task_runner(run: RunConfig):
    """The task runner a run's config asks for (``run.task_runner``), imported lazily; a missing
    extra says which (``flywheel run`` finds it before it starts: flywheel/face/checks.py)."""
    kind, address, workers = run.task_runner, run.runner_address, run.workers
    if kind == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError:
            raise RuntimeError(runner_needs(kind)) from None
        if address:
            return DaskTaskRunner(address=address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True,
                                              "dashboard_address": None})
    if kind == "ray":
        init = {} if address else local_ray(workers)  # its environment, before Ray is imported
        try:
            import ray  # noqa: F401 - prefect-ray imports it lazily: a missing Ray would fail only as the flow starts
            from prefect_ray import RayTaskRunner
        except ImportError:
            raise RuntimeError(runner_needs(kind)) from None
        return RayTaskRunner(address=address, init_kwargs=init)
    return ThreadPoolTaskRunner(max_workers=workers)


@contextmanager
def workers_use_the_temporary_server(run: RunConfig) -> Iterator[None]:
    """Where the flow talks to Prefect's temporary server and its shards run in processes the run
    starts on this machine (a local Dask cluster or Ray instance), name that server's URL in the
    flow's settings while the body runs: the workers get the flow's settings with each shard and
    talk to it too, rather than each start (and keep until it exits) a temporary server of its own.
    Workers elsewhere (``run.runner_address``) cannot reach it: they need ``PREFECT_API_URL``."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if run.task_runner == "default" or run.runner_address or PREFECT_API_URL.value():
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    if not server.running:  # it did not start early: the flow's client starts it, the workers their own
        yield
        return
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield
