"""Experiment tracking (``tracking.kind: mlflow``): a tiny real run's figures read back through
MLflow's own client equal summary.json's; a resumed run goes on in the same MLflow run and logs no
iteration twice; a store that cannot be written, or MLflow missing, is one error line before any
run directory exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_a_tracked_run_logs_each_iteration_once_to_one_mlflow_run_and_a_resume_goes_on_in_it(harness, tiny_config,
                                                                                               tmp_path):
    from mlflow.tracking import MlflowClient

    from flows.flywheel_flow import run_flywheel
    from flywheel.ground.store import RunStore

    uri = f"sqlite:///{tmp_path / 'tracker' / 'mlflow.db'}"
    cfg, _ = tiny_config(run__name="tracked", run__iterations=1, rating__bootstrap_rounds=5,
                         tracking={"kind": "mlflow", "uri": uri})
    store = RunStore(Path(run_flywheel(cfg)))
    client = MlflowClient(uri)
    run_id = json.loads(store.tracking_path.read_text())["run_id"]

    def history(key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))

    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "tracked"
    assert run.data.tags["flywheel.run_dir"] == str(store.root.resolve())
    assert run.data.params["train.steps"] == "4" and run.data.params["tracking.kind"] == "mlflow"
    base, first = json.loads(store.summary_path.read_text())["iterations"]
    assert history("eval/student/accuracy") == [(0, base["eval"]["student@0"]["accuracy"]),
                                                (1, first["eval"]["student@1"]["accuracy"])]
    assert history("eval/calc/accuracy/add")[-1] == (1, first["opponents_eval"]["calc"]["accuracy_by_category"]["add"])
    student = first["eval"]["student@1"]
    assert [history(f"elo/student{part}")[-1] for part in ("", "/lower", "/upper")] == \
        [(1, student["elo"]), (1, student["elo_ci"][0]), (1, student["elo_ci"][1])]
    assert history("validation/student/accuracy")[-1] == (1, student["validation"]["accuracy"])
    arm = first["bandit"]["student"][0]
    assert history(f"bandit/student/{arm['arm']}/share") == [(1, arm["share"])]
    assert history("judge/judged") == [(0, base["judge"]["judged"]), (1, first["judge"]["judged"])]
    assert history("cost/usd") == [(0, 0.0), (1, 0.0)]
    assert history("train/student/loss") == [(1, store.stage_json(1, "train")["student"]["loss"])]
    assert [s for s, _ in history("trainer/student/sft/loss")] == [1, 2, 3, 4]  # the trainer's logged steps

    run_flywheel(cfg, str(store.root), more=1)  # one more iteration: the same MLflow run, nothing twice
    assert json.loads(store.tracking_path.read_text())["run_id"] == run_id
    assert history("iteration") == [(0, 0), (1, 1), (2, 2)]
    assert [s for s, _ in history("eval/student/accuracy")] == [0, 1, 2]
    assert [s for s, _ in history("trainer/student/sft/loss")] == [1, 2, 3, 4, 5, 6, 7, 8]  # the target's steps
    experiment = client.get_experiment_by_name("flywheel")
    assert [r.info.run_id for r in client.search_runs([experiment.experiment_id])] == [run_id]
    assert client.get_run(run_id).info.status == "FINISHED"


def test_a_tracker_store_that_cannot_be_written_is_one_error_line_exit_2_and_no_run_directory(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    root = tmp_path / "runs"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    proc = subprocess.run([sys.executable, "-m", "flywheel.cli", "run", "--set", f"run.root={root}",
                           "--set", "tracking.kind=mlflow", "--set", f"tracking.uri=sqlite:///{a_file}/mlflow.db"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"error: tracking.uri sqlite:///{a_file}/mlflow.db: cannot be written "
                                   f"({a_file} is a file, not a directory)")
    assert not root.exists()


def test_tracking_without_mlflow_installed_names_the_extra(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed
    root = tmp_path / "runs"
    ran = CliRunner().invoke(app, ["run", "--set", f"run.root={root}", "--set", "tracking.kind=mlflow"])
    assert ran.exit_code == 2
    assert ran.stderr.strip() == "error: tracking.kind mlflow needs mlflow: pip install 'flywheel[tracking]'"
    assert not root.exists()


def test_the_store_check_writes_nothing_and_names_why_a_store_cannot_be_used(tmp_path, monkeypatch):
    from flywheel.ground.config import TrackingConfig
    from flywheel.ground.tracking import tracking_problems

    def check(uri: str | None) -> list[str]:
        return tracking_problems(TrackingConfig(kind="mlflow", uri=uri), tmp_path / "runs")

    text = tmp_path / "notes.db"
    text.write_text("not a database")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    assert check(None) == [] and check(f"sqlite:///{tmp_path}/new/deeper/mlflow.db") == []
    assert check("http://127.0.0.1:5000") == [] and check("postgresql://db/mlflow") == []
    assert check(f"sqlite:///{text}") == [f"tracking.uri sqlite:///{text}: cannot be written ({text} is not an SQLite "
                                         + "database)"]
    assert check(f"sqlite:///{tmp_path}") == [f"tracking.uri sqlite:///{tmp_path}: cannot be written ({tmp_path} is a "
                                              + "directory)"]
    assert "MLflow 3 refuses file stores" in check(f"file://{tmp_path}/mlruns")[0]
    assert "in-memory" in check("sqlite://")[0]
    assert not list(tmp_path.glob("runs")) and not list(tmp_path.glob("new"))  # nothing made
    assert tracking_problems(TrackingConfig(), tmp_path) == []  # off by default
