"""The experiment tracker a run reports to (``tracking.kind``): MLflow, imported only when a run
asks for it. A tracker gets copies: the run directory stays the record. One MLflow run per
flywheel run, its id kept in the run directory (``RunStore.tracking_path``), so a resumed run goes
on in the same MLflow run; each iteration is logged once, its metrics at their steps, then the
marker metric ``iteration`` at step k, which says the iteration is in (a crash between the two
logs it again)."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

from flywheel.config.tree import TrackingConfig
from flywheel.ground.atomic import atomic_write_json, read_json
from flywheel.ground.store import RunStore

log = logging.getLogger("flywheel")

NEEDS = "tracking.kind mlflow needs mlflow: pip install 'flywheel[tracking]'"
MARKER = "iteration"  # logged last at step k: iteration k is in the tracker


class TrackingError(RuntimeError):
    """The tracker cannot be used (not installed, its store cannot be opened)."""


class Point(NamedTuple):
    """One metric value: its name (``eval/student/accuracy``), value and step."""

    key: str
    value: float
    step: int


class Tracker(Protocol):
    """What a run needs of a tracker."""

    uri: str

    def logged(self) -> set[int]:
        """The iterations the tracker has whole."""
        ...

    def log_iteration(self, k: int, points: list[Point]) -> None:
        """Log iteration ``k``'s points, then its marker."""
        ...

    def close(self, status: str) -> None:
        """End the tracker's run: ``FINISHED`` or ``FAILED``."""
        ...


def store_uri(tc: TrackingConfig, runs_root: Path) -> str:
    """``tracking.uri``, else the SQLite store ``<run.root>/mlflow.db``; a relative SQLite path made
    absolute (a resumed run may start elsewhere)."""
    uri = tc.uri or f"sqlite:///{Path(runs_root) / 'mlflow.db'}"
    path = sqlite_path(uri)
    return f"sqlite:///{path.resolve()}" if path is not None and str(path) != ":memory:" else uri


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///path`` URI (``:memory:`` for an in-memory one); None for
    another kind of URI."""
    if not uri.startswith("sqlite:"):
        return None
    path = uri.removeprefix("sqlite:").removeprefix("///").partition("?")[0]
    return Path(path) if path and not path.startswith("//") else Path(":memory:")


def tracking_problems(tc: TrackingConfig, runs_root: Path) -> list[str]:
    """Why the tracker of ``tc`` could not be used, checked without writing anything: MLflow is
    installed, and a local store (SQLite, or a file store where MLflow allows one) can be written."""
    if tc.kind == "none":
        return []
    if importlib.util.find_spec("mlflow") is None:
        return [NEEDS]
    uri = store_uri(tc, runs_root)
    where = f"tracking.uri {uri}" + ("" if tc.uri else " (the default)")
    parts = urlsplit(uri)
    if parts.scheme == "sqlite":
        path = sqlite_path(uri)
        if path is None or str(path) == ":memory:":
            return [f"{where}: an in-memory store keeps nothing; name a file (sqlite:///path/mlflow.db)"]
        why = cannot_write(path, directory=False)
    elif parts.scheme in ("", "file"):
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in ("true", "1"):
            return [f"{where}: MLflow 3 refuses file stores (MLFLOW_ALLOW_FILE_STORE=true allows one); "
                    + "use sqlite:///path/mlflow.db"]
        why = cannot_write(Path(parts.path if parts.scheme else uri), directory=True)
    elif parts.scheme in ("http", "https"):
        why = None if parts.hostname else "no host"
    else:
        why = None  # a database server, Databricks, ...: MLflow's to check when the run opens it
    return [f"{where}: cannot be written ({why})"] if why else []


def cannot_write(path: Path, directory: bool) -> str | None:
    """Why ``path`` (a file, or a folder) could not be created or written, or None."""
    if path.exists():
        if path.is_dir() != directory:
            return f"{path} is a {'file' if directory else 'directory'}"
        if not directory and path.stat().st_size and not is_sqlite(path):
            return f"{path} is not an SQLite database"
        return None if os.access(path, os.W_OK) else f"{path} is not writable"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a directory"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{parent} is not writable"


def is_sqlite(path: Path) -> bool:
    """Whether ``path`` starts as an SQLite database does."""
    with path.open("rb") as f:
        return f.read(16) == b"SQLite format 3\x00"


def metric_name(key: str) -> str:
    """``key`` as MLflow takes a name: other characters than letters, digits, ``_ - . : /`` and
    spaces become ``_``; no empty, ``.`` or ``..`` part."""
    parts = [re.sub(r"[^\w.\- :]", "_", p) for p in key.split("/") if p]
    return "/".join("_" if p in (".", "..") else p for p in parts)[:250]


def flat_params(tree: dict[str, Any] | list[Any], prefix: str = "") -> dict[str, str]:
    """A config tree as MLflow params: dotted keys (list items by index), values as YAML would
    write a scalar (``4``, ``true``, ``null``; strings as they are)."""
    out: dict[str, str] = {}
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, dict | list) and value:
            out.update(flat_params(value, f"{name}."))
        else:
            out[metric_name(name)] = (value if isinstance(value, str) else json.dumps(value))[:6000]
    return out


class MlflowTracker:
    """One MLflow run, through MLflow's client (no global active run): safe beside TRL's or a
    user's own MLflow use in the same process."""

    def __init__(self, client: Any, run_id: str, uri: str) -> None:
        self.client, self.run_id, self.uri = client, run_id, uri

    def logged(self) -> set[int]:
        return {int(m.step) for m in self.client.get_metric_history(self.run_id, MARKER)}

    def log_iteration(self, k: int, points: list[Point]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        unique = {(metric_name(p.key), p.step): float(p.value) for p in points}
        metrics = [Metric(key, value, now, step) for (key, step), value in unique.items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics a call
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])
        self.client.log_metric(self.run_id, MARKER, k, timestamp=now, step=k)

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status)


def open_tracker(tc: TrackingConfig, store: RunStore, runs_root: Path, run_name: str,
                 params: dict[str, str]) -> Tracker | None:
    """The run's tracker (None with ``tracking.kind: none``): the MLflow run named in the run
    directory, set running again, or a new one in ``tracking.experiment`` (its id then written to
    the run directory), tagged with the run's name and directory; params it lacks are logged."""
    if tc.kind == "none":
        return None
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise TrackingError(NEEDS) from None
    saved = read_json(store.tracking_path) or {}
    uri = saved.get("uri") or store_uri(tc, runs_root)
    client = MlflowClient(uri)
    run = None
    if saved.get("run_id"):
        try:
            run = client.get_run(saved["run_id"])
            client.update_run(run.info.run_id, status="RUNNING")
        except MlflowException:
            log.warning("tracking: MLflow run %s is not in %s; a new one starts", saved["run_id"], uri)
            run = None
    if run is None:
        experiment = _experiment(client, tc.experiment, uri)
        run = client.create_run(experiment, run_name=run_name,
                                tags={"flywheel.run": run_name, "flywheel.run_dir": str(store.root.resolve())})
        atomic_write_json(store.tracking_path, {"kind": tc.kind, "uri": uri, "experiment": tc.experiment,
                                                "run_id": run.info.run_id})
    _log_params(client, run, params)
    log.info("tracking: MLflow run %s in %s", run.info.run_id, uri)
    return MlflowTracker(client, run.info.run_id, uri)


def _experiment(client: Any, name: str, uri: str) -> str:
    """The id of experiment ``name``, created (or restored) when needed; a SQLite store's
    experiment keeps any artifacts beside the database, not in the working directory."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage == "deleted":
            client.restore_experiment(found.experiment_id)
        return found.experiment_id
    db = sqlite_path(uri)
    artifacts = str(db.parent / "mlartifacts") if db is not None else None
    try:
        return client.create_experiment(name, artifact_location=artifacts)
    except MlflowException:  # made by another run meanwhile
        return client.get_experiment_by_name(name).experiment_id


def _log_params(client: Any, run: Any, params: dict[str, str]) -> None:
    """The params the run does not have yet (a param once logged cannot change: a resumed run's
    ``run.iterations`` keeps its first value)."""
    from mlflow.entities import Param

    missing = [Param(k, v) for k, v in params.items() if k not in run.data.params]
    for i in range(0, len(missing), 100):  # MLflow takes at most 100 params a call
        client.log_batch(run.info.run_id, params=missing[i:i + 100])
