"""``run.task_runner: ray``: a run's battle and judgment shards on a local Ray instance, started as
``flywheel run`` starts it on a fresh machine (with Prefect's temporary server), play the same
battles as the default runner, in Ray's worker processes, on this machine's loopback only; and a
task runner whose extra is not installed is refused in one line before anything is written."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from flywheel.config.tree import RunConfig
from flywheel.ground.store import RunStore
from tests.conftest import stop, tiny_tree
from tests.golden import before_training, digest, weights_digest

GOLDEN = Path(__file__).parent / "fixtures" / "golden.json"


def ray_processes(marker: str) -> list[str]:
    """The processes whose command line names ``marker`` (a Ray instance's temporary folder)."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if marker in line:
            found.append(f"{p.info['pid']}: {line[:200]}")
    return found


def test_a_local_ray_instance_plays_the_same_battles_as_the_default_runner(tiny_models_dir, tmp_path):
    """``flywheel run`` with ``run.task_runner: ray``, ``run.workers: 2``, no Prefect server: its
    shards run in the two workers of a Ray instance on 127.0.0.1 (its own, in a folder of this
    test's), which report to the run's temporary Prefect server and are gone with the run. The
    default runner's battles are the golden ``flow`` run's (tests/test_flow.py checks its run
    against them): iteration 1's train battles, verdicts and datasets, and iteration 0's
    evaluation, which the shipped pre-trained models alone made, must be the same."""
    pytest.importorskip("prefect_ray")
    from flows.runners import LOCAL_RAY_ENV

    tree = tiny_tree(tiny_models_dir, tmp_path / "runs", run__name="ray", run__iterations=1, run__shard_size=6,
                     run__task_runner="ray", run__workers=2)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(tree))
    # Ray's own folder, short (its socket paths must fit in 107 characters), in no one else's /tmp/ray.
    ray_tmp = Path(tempfile.mkdtemp(prefix="flywheel-ray-"))
    env = {k: v for k, v in os.environ.items() if k not in LOCAL_RAY_ENV and k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), RAY_TMPDIR=str(ray_tmp),
               RAY_AUTH_TOKEN=secrets.token_hex(32))  # the instance's token, not written to ~/.ray/auth_token
    proc = subprocess.Popen([sys.executable, "-m", "flywheel.face.cli", "run", str(recipe), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-4000:]
        logs = ray_tmp / "ray" / "session_latest" / "logs"
        gcs = (logs / "gcs_server.out").read_text(errors="replace")
        ray_workers = {int(m) for m in re.findall(r"python-core-worker-\w+_(\d+)\.log", " ".join(os.listdir(logs)))}
        for _ in range(40):  # Ray's processes end with the run
            if not (left := ray_processes(str(ray_tmp))):
                break
            time.sleep(0.25)
        assert not left, left
    finally:
        if proc.poll() is None or ray_processes(str(ray_tmp)):
            stop(proc)  # a timeout, or Ray left behind: the run and whatever it started
        shutil.rmtree(ray_tmp, ignore_errors=True)

    # one instance, on 127.0.0.1: every Ray process binds the node's address, never 0.0.0.0
    assert set(re.findall(r"Registering new node\..*node_address=([^\s,]+)", gcs)) == {"127.0.0.1"}, gcs[-2000:]
    # the workers talked to the run's temporary Prefect server, and started none of their own
    assert err.count("Starting temporary server") == 1, err[-4000:]

    run = RunStore(Path(json.loads(out)["run_dir"]))
    shards = sorted(f.name for f in (run.root / "battles").glob("iter-0001-train-*.parquet"))
    assert len(shards) == 4 * 2 and shards[:2] == [f"iter-0001-train-r1-s000{i}.parquet" for i in (0, 1)]
    pids = {int(u["worker"].rpartition(":")[2]) for u in run.read_jsonl("usage.jsonl")
            if u["iteration"] == 1 and u["phase"] == "train"}
    assert len(pids) == 2 and pids <= ray_workers, (pids, ray_workers)  # two Ray workers (run.workers), not the flow
    assert proc.pid not in pids

    golden = json.loads(GOLDEN.read_text())["flow"]
    assert weights_digest(tiny_models_dir) == golden["weights"], ("the shipped tiny models are stale: python -m "
                                                                  "tests.golden --models")
    got = before_training(digest(run.root))
    assert got["log"]["1/train"][0] == 48 and got == before_training(golden)  # same battles, answers, verdicts


NO_DASK = "error: run.task_runner dask needs prefect-dask: pip install 'flywheel[dask]'"
NO_RAY = "error: run.task_runner ray needs prefect-ray and ray: pip install 'flywheel[ray]'"


@pytest.mark.parametrize("kind,missing,line", [("dask", ("prefect_dask",), NO_DASK),
                                               ("ray", ("prefect_ray", "ray"), NO_RAY), ("ray", ("ray",), NO_RAY)],
                         ids=["dask", "ray", "ray-without-prefect-ray"])
def test_a_task_runner_without_its_extra_is_one_error_line_exit_2_and_no_run_directory(tmp_path, monkeypatch,
                                                                                       kind, missing, line):
    """`flywheel run` and `flywheel check` name the extra before anything is written; the flow
    (a deployment's run, or a caller of run_flywheel) says the same if it gets that far."""
    from typer.testing import CliRunner

    from flows.runners import LOCAL_RAY_ENV, task_runner
    from flywheel.face.cli import app

    for module in missing:  # as if not installed: its import fails, find_spec finds nothing
        monkeypatch.setitem(sys.modules, module, None)
    for key in [*LOCAL_RAY_ENV, "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL",
                "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL"]:
        monkeypatch.delenv(key, raising=False)  # what the command sets in this process is undone after the test
    root = tmp_path / "runs"
    for command in ("run", "check"):
        got = CliRunner().invoke(app, [command, "--set", f"run.task_runner={kind}", "--set", f"run.root={root}"])
        assert got.exit_code == 2 and got.stderr.splitlines() == [line], got.output
    assert not root.exists()
    with pytest.raises(RuntimeError) as refused:
        task_runner(RunConfig(task_runner=kind))
    assert f"error: {refused.value}" == line
