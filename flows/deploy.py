"""Deployments of the scheduled flywheel (``flywheel schedule``): served by this process, or
registered with a Prefect work pool whose workers (``prefect worker start --pool P``) run each
trigger in a process of their own, from this checkout."""

from __future__ import annotations

from pathlib import Path

from flywheel.config.tree import FlywheelConfig

# The folder that holds flows/ and flywheel/: a work pool's worker runs the entrypoint from here.
SOURCE = Path(__file__).resolve().parents[1]
ENTRYPOINT = "flows/flywheel_flow.py:scheduled_flywheel"


class DeploymentError(Exception):
    """The deployment cannot be made as asked (a work pool that does not exist, say)."""


def when(cron: str | None, interval: float | None) -> dict:
    """The schedule as ``deploy``/``serve`` take it; a cron line is checked here."""
    if cron is None:
        return {"interval": interval}
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except ValueError as e:
        raise DeploymentError(f"--cron {cron!r}: {e}") from None
    return {"cron": cron}


def parameters(cfg: FlywheelConfig) -> dict:
    """The deployment's parameters: the whole config, its folders made absolute (a trigger runs
    in another process, and a worker's in another folder)."""
    cfg = cfg.model_copy(deep=True)
    cfg.run.root = Path(cfg.run.root).resolve()
    cfg.world.models_dir = str(Path(cfg.world.models_dir).resolve())
    return {"config": cfg.model_dump(mode="json")}


def check_pool(pool: str) -> None:
    """Raise DeploymentError if the Prefect server has no such pool."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            raise DeploymentError(f"--work-pool {pool}: no such work pool on the Prefect server "
                                  f"(create it: prefect work-pool create {pool} --type process)") from None


def deploy_to_pool(cfg: FlywheelConfig, name: str, pool: str, schedule: dict) -> str:
    """Register the deployment with ``pool``, its code pulled from this checkout; returns its id.
    One run of it at a time: a trigger that comes while one runs waits its turn."""
    from prefect import Flow
    from prefect.client.schemas.objects import ConcurrencyLimitConfig

    check_pool(pool)
    flow = Flow.from_source(source=str(SOURCE), entrypoint=ENTRYPOINT)
    return str(flow.deploy(name, work_pool_name=pool, parameters=parameters(cfg), build=False, push=False,
                           print_next_steps=False, **schedule,
                           concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy="ENQUEUE"),
                           # the worker's flow runs send the stage logs (logger "flywheel") to the UI
                           job_variables={"env": {"PREFECT_LOGGING_EXTRA_LOGGERS": "flywheel"}}))


def serve_here(cfg: FlywheelConfig, name: str, schedule: dict) -> None:
    """Serve the deployment from this process until it is stopped (one run at a time)."""
    from prefect.deployments.runner import EntrypointType

    from flows.flywheel_flow import scheduled_flywheel  # lazy: torch

    scheduled_flywheel.serve(name=name, parameters=parameters(cfg), limit=1,
                             entrypoint_type=EntrypointType.MODULE_PATH, **schedule)
