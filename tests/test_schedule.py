"""Scheduled flywheel runs: a real Prefect server on 127.0.0.1, `flywheel schedule --interval`
serving the deployment, scheduled runs that complete and each add one iteration to the run; and
the run lock that keeps overlapping triggers from corrupting a run directory."""

import json
import subprocess
import sys
import threading
import time

import httpx
import pytest
import yaml

from flywheel.ground.config import FlywheelConfig
from flywheel.ground.store import RunLockedError, RunStore
from flywheel.stages.context import open_run
from tests.conftest import start_prefect_server, stop, tiny_tree


def test_an_interval_schedule_served_on_a_real_server_runs_the_flywheel(tiny_models_dir, tmp_path, cli_env, prefect_api):
    # The session's server where it came up (the runs listed are this deployment's only), else one of its own.
    server = None
    if prefect_api is None:
        (tmp_path / "server").mkdir()
        server, prefect_api = start_prefect_server(tmp_path / "server", cli_env)
    api = prefect_api
    env = {**cli_env, "PREFECT_API_URL": api, "PREFECT_UI_ENABLED": "false"}
    name = f"test-{tmp_path.name}"
    serve = None
    dep: dict = {}
    try:
        tree = tiny_tree(tiny_models_dir, tmp_path / "runs", run__name="nightly", run__iterations=5, rating__bootstrap_rounds=5)
        path = tmp_path / "nightly.yaml"
        path.write_text(yaml.safe_dump(tree))
        serve_log = (tmp_path / "serve.log").open("w")
        serve = subprocess.Popen([sys.executable, "-m", "flywheel.cli", "schedule", str(path), "--interval", "5",
                                  "--name", name], env=env, stdout=serve_log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        completed: list[dict] = []
        deadline = time.monotonic() + 420
        while not completed:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(3)
            got = httpx.get(f"{api}/deployments/name/flywheel-scheduled/{name}", timeout=10)
            if got.status_code != 200:
                continue
            dep = got.json()
            runs = httpx.post(f"{api}/flow_runs/filter", json={"sort": "START_TIME_ASC", "deployments": {
                "id": {"any_": [dep["id"]]}}}, timeout=10).json()
            failed = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
            assert not failed, (tmp_path / "serve.log").read_text()[-3000:]
            completed = [r for r in runs if r["state_type"] == "COMPLETED"]
        assert all(r["deployment_id"] == dep["id"] for r in completed)
        assert dep["schedules"][0]["schedule"]["interval"] == 5.0
        assert dep["parameters"]["config"]["run"]["name"] == "nightly"
    finally:
        if serve is not None:
            stop(serve)
        if dep.get("id"):  # the shared server schedules no more runs of it
            httpx.delete(f"{api}/deployments/{dep['id']}", timeout=10)
        if server is not None:
            stop(server)
    # The first trigger made the run and one iteration (schedule.mode continue), not run.iterations;
    # a later trigger (if one finished while stopping) added one more to the same run.
    summary = json.loads((tmp_path / "runs" / "nightly" / "summary.json").read_text())
    assert [e["iteration"] for e in summary["iterations"]] in ([0, 1], [0, 1, 2])
    assert not any((tmp_path / "runs").glob("nightly-*"))


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

