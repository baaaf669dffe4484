"""Scheduled flywheel runs: a real Prefect server on 127.0.0.1; `flywheel schedule --interval`
serving the deployment, and `--work-pool` with a real process worker; scheduled runs that
complete and each add one iteration to the run; a pool that does not exist refused; and the run
lock that keeps overlapping triggers from corrupting a run directory."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from flywheel.config.tree import FlywheelConfig
from flywheel.ground.store import RunLockedError, RunStore
from flywheel.run.context import open_run
from tests.conftest import start_prefect_server, stop, tiny_tree

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")
PREFECT = str(Path(sys.executable).parent / "prefect")
HTTP_S = 60  # a read of the Prefect server, which on a loaded 2-core machine can take over 10 s to answer


def flow_runs(api: str, deployment_id: str) -> list[dict]:
    return httpx.post(f"{api}/flow_runs/filter", json={"sort": "START_TIME_ASC", "deployments": {
        "id": {"any_": [deployment_id]}}}, timeout=HTTP_S).json()


def test_scheduled_runs_complete_served_here_and_from_a_work_pool_by_a_real_worker(tiny_models_dir, tmp_path, cli_env,
                                                                                   prefect_api):
    """On one real Prefect server, at once: `flywheel schedule --interval` serving its deployment
    from its own process, and `flywheel schedule --work-pool` registering one that a real `prefect
    worker` process on a process pool runs, from this checkout (registered from another folder)."""
    server = None
    if prefect_api is None:  # the session's server where it came up (the runs listed are these deployments' only)
        (tmp_path / "server").mkdir()
        server, prefect_api = start_prefect_server(tmp_path / "server", cli_env)
    api = prefect_api
    # A loaded machine (the suite's other workers on 2 cores) can keep the SQLite-backed test server
    # answering 503 for longer than Prefect's 5 client retries; a crashed run from that is not the
    # flywheel's, so its processes retry for longer.
    env = {**cli_env, "PREFECT_API_URL": api, "PREFECT_UI_ENABLED": "false", "PREFECT_WORKER_QUERY_SECONDS": "2",
           "PREFECT_WORKER_PREFETCH_SECONDS": "5", "PREFECT_CLIENT_MAX_RETRIES": "10"}
    served, pooled, pool = f"test-{tmp_path.name}", f"wp-{tmp_path.name}", f"pool-{tmp_path.name}"[:60]
    procs: list[subprocess.Popen] = []
    deps: dict[str, dict] = {}
    triggered: dict[str, int] = {}  # per run: the flow runs of its deployment that started

    def start(args: list[str], log: str) -> None:
        procs.append(subprocess.Popen(args, env=env, stdout=(tmp_path / log).open("w"), stderr=subprocess.STDOUT,
                                      start_new_session=True, cwd=tmp_path))

    def logs() -> str:
        return "".join((tmp_path / f).read_text()[-2000:] for f in ("serve.log", "worker.log") if (tmp_path / f).exists())

    try:
        for name, run in ((served, "nightly"), (pooled, "pooled")):
            tree = tiny_tree(tiny_models_dir, tmp_path / "runs", run__name=run, run__iterations=50,
                             rating__bootstrap_rounds=5)
            (tmp_path / f"{run}.yaml").write_text(yaml.safe_dump(tree))
        subprocess.run([PREFECT, "work-pool", "create", pool, "--type", "process"], env=env, check=True,
                       capture_output=True, timeout=120)
        made = subprocess.run([FLYWHEEL, "schedule", str(tmp_path / "pooled.yaml"), "--interval", "10", "--name",
                               pooled, "--work-pool", pool], env=env, capture_output=True, text=True, timeout=180,
                              cwd=tmp_path, check=False)
        assert made.returncode == 0, made.stderr[-3000:]
        assert f"registered with work pool {pool}" in made.stdout
        start([FLYWHEEL, "schedule", str(tmp_path / "nightly.yaml"), "--interval", "5", "--name", served], "serve.log")
        start([PREFECT, "worker", "start", "--pool", pool], "worker.log")
        completed: dict[str, list[dict]] = {}
        deadline = time.monotonic() + 420
        while len(completed) < 2:
            assert all(p.poll() is None for p in procs), logs()
            assert time.monotonic() < deadline, logs()
            time.sleep(3)
            for name in (served, pooled):
                try:
                    got = httpx.get(f"{api}/deployments/name/flywheel-scheduled/{name}", timeout=HTTP_S)
                    if got.status_code != 200:
                        continue
                    deps[name] = got.json()
                    runs = flow_runs(api, deps[name]["id"])
                except httpx.TimeoutException:  # the loaded server answers late: ask again, within the deadline
                    continue
                assert not [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")], logs()
                if done := [r for r in runs if r["state_type"] == "COMPLETED"]:
                    completed[name] = done
        assert deps[served]["schedules"][0]["schedule"]["interval"] == 5.0
        assert deps[served]["parameters"]["config"]["run"]["name"] == "nightly"
        assert deps[pooled]["entrypoint"] == "flows/flywheel_flow.py:scheduled_flywheel"
        assert deps[pooled]["schedules"][0]["schedule"]["interval"] == 10.0
        assert completed[pooled][0]["work_pool_name"] == pool  # the worker ran it
    finally:
        for p in procs:
            stop(p)
        for name, run in ((served, "nightly"), (pooled, "pooled")):
            try:
                triggered[run] = sum(r["start_time"] is not None for r in flow_runs(api, deps[name]["id"]))
            except (KeyError, httpx.HTTPError):  # the test failed before: that failure is the one to see
                pass
        for dep in deps.values():  # the shared server schedules no more runs of them
            httpx.delete(f"{api}/deployments/{dep['id']}", timeout=HTTP_S)
        httpx.delete(f"{api}/work_pools/{pool}", timeout=HTTP_S)
        if server is not None:
            stop(server)
    # The first trigger made the run and one iteration (schedule.mode continue), not run.iterations
    # (50: a trigger that ran them all would pass no deadline, nor the bound below); each later trigger (one finished while the other deployment's first ran, or while
    # stopping) added one more to the same run.
    for run in ("nightly", "pooled"):
        summary = json.loads((tmp_path / "runs" / run / "summary.json").read_text())
        iterations = [e["iteration"] for e in summary["iterations"]]
        assert iterations == list(range(len(iterations))) and 2 <= len(iterations) <= 1 + triggered[run], \
            (iterations, triggered)
        assert not any((tmp_path / "runs").glob(f"{run}-*"))


def test_a_work_pool_that_does_not_exist_is_refused_before_anything_is_registered(tmp_path, cli_env, prefect_api):
    if prefect_api is None:
        pytest.skip("the session's Prefect server did not come up")
    env = {**cli_env, "PREFECT_API_URL": prefect_api}
    got = subprocess.run([FLYWHEEL, "schedule", "--interval", "60", "--name", "nowhere", "--work-pool", "no-such-pool",
                          "--set", f"run.root={tmp_path / 'runs'}"], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert got.returncode == 2, got.stderr
    assert got.stderr.strip().splitlines() == [
        "error: --work-pool no-such-pool: no such work pool on the Prefect server "
        + "(create it: prefect work-pool create no-such-pool --type process)"]
    assert httpx.get(f"{prefect_api}/deployments/name/flywheel-scheduled/nowhere", timeout=HTTP_S).status_code == 404
    assert not (tmp_path / "runs").exists()


def test_an_overlapping_trigger_waits_or_refuses_and_changes_nothing(tiny_models_dir, tmp_path):
    cfg = FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, tmp_path / "runs", run__name="busy"))
    ctx = open_run(cfg)  # the first trigger holds the run
    root = ctx.store.root
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    with pytest.raises(RunLockedError, match=r"in use by another flywheel process \(waited 0.3 s\); nothing was changed"):
        open_run(cfg, resume=root, lock_wait_s=0.3)
    with pytest.raises(FileExistsError):
        open_run(cfg, lock_wait_s=0.3)  # a second "first" trigger does not recreate the run
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == before
    # A trigger allowed to wait gets the run as soon as the first lets go.
    threading.Timer(0.5, ctx.store.unlock).start()
    t0 = time.monotonic()
    second = open_run(cfg, resume=root, lock_wait_s=30)
    assert 0.4 < time.monotonic() - t0 < 10
    second.store.unlock()
    RunStore(root).lock()  # and it is free again afterwards

