"""Experiment tracking (``tracking.kind: mlflow``): a store that cannot be written, or MLflow
missing, is one error line before any run directory exists. A real tracked run, killed and
resumed, is read back through MLflow's own client in tests/test_served.py (the production path:
served models, a tracker, a server that dies)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("mlflow")


def test_a_tracker_store_that_cannot_be_written_is_one_error_line_exit_2_and_no_run_directory(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    root = tmp_path / "runs"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    proc = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", "--set", f"run.root={root}",
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
    from flywheel.config.tree import TrackingConfig
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
