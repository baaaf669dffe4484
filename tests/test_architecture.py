"""The architecture's rules are import-linter contracts (pyproject.toml, [tool.importlinter]): the
tree keeps them, and a deliberately bad import breaks the one it should."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"}  # one contract a line
    return subprocess.run([str(LINT), "--no-cache", "--config", str(root / "pyproject.toml")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def copy_tree(dst: Path) -> Path:
    for part in ("flywheel", "judges", "flows"):
        shutil.copytree(ROOT / part, dst / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def test_the_tree_keeps_every_contract():
    p = lint(ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert " broken" in p.stdout and "0 broken" in p.stdout


@pytest.mark.parametrize("module, bad_import, contract", [
    # the face reaching into a stage for its leaderboard helpers (as queries.py once did)
    ("flywheel/face/queries.py", "from flywheel.stages import rate", "The CLI asks queries"),
    # the config checking a judge template itself (as config_parts.py once did)
    ("flywheel/config/parts.py", "import judges.llm", "Config and records know no judge"),
    # the config reading the ground it stands below
    ("flywheel/config/parts.py", "from flywheel.ground.records import Prompt", "The parts, top to bottom"),
    # maths reading the store
    ("flywheel/maths/bandits.py", "from flywheel.ground.store import RunStore", "Maths is pure"),
    # a stage importing Prefect
    ("flywheel/stages/rate.py", "import prefect", "Stages run without Prefect"),
    # a judge reaching into the trainer for its reward types (as judges/rewards.py once did)
    ("judges/verifier.py", "from flywheel.learning.rl import Scorer", "A judge does not need the trainer"),
])
def test_a_bad_import_breaks_its_contract(tmp_path, module, bad_import, contract):
    root = copy_tree(tmp_path)
    path = root / module
    path.write_text(path.read_text() + f"\n{bad_import}  # deliberately bad\n")
    p = lint(root)
    assert p.returncode != 0, p.stdout
    broken = [line for line in p.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), p.stdout


def test_the_command_and_the_watchdog_run_from_their_own_module_paths():
    """The console script and ``python -m`` name the command's own module, the watchdog a run spawns
    runs from its own, and ``import flywheel`` installs no alias of an old module path."""
    import importlib.util
    import tomllib

    import flywheel  # noqa: F401 - importing the package must not install an import hook

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"flywheel": "flywheel.face.cli:main"}
    assert importlib.util.find_spec("flywheel.store") is None  # the flat layout's path is gone
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "--help"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0 and "bootstrap" in p.stdout, p.stderr
    p = subprocess.run([sys.executable, "-m", "flywheel.ground.interrupt"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, p.stderr


def test_the_flow_publishes_what_each_stage_declares_and_keys_on_no_stage_name():
    """A stage declares what the flow publishes after it (``@stage(..., publishes=...)``); the flow
    has a publisher for each declaration and none left over, and tests no stage name itself."""
    import importlib
    import inspect
    import pkgutil

    import flows.flywheel_flow as flow
    import flywheel.stages as stages

    declared = {}
    for info in pkgutil.iter_modules(stages.__path__):
        module = importlib.import_module(f"flywheel.stages.{info.name}")
        for name, fn in inspect.getmembers(module, callable):
            if getattr(fn, "publishes", None) and fn.__module__ == module.__name__:
                declared[f"{info.name}.{name}"] = fn.publishes
    assert declared == {"evaluate.evaluate_versions": "leaderboard", "curate.curate_datasets": "datasets",
                        "train.train_targets": "checkpoints"}
    assert set(flow.PUBLISHERS) == set(declared.values())
    assert 'name == "' not in inspect.getsource(flow.PrefectRunner)


# The run directory's own files and folders: only the store (flywheel/ground/store.py) spells them.
RUN_FILES = {"config.yaml", "summary.json", "manifest.json", "usage.jsonl", "spend.jsonl", "tracking.json"}
RUN_FOLDERS = {"battles", "judgments", "quarantine", "bandits", "ratings", "models", "reward-models", "cache",
               "server-logs"}
PATH_OWNERS = {"flywheel/ground/store.py"}
# A dataset folder's own manifest (curation.py writes it inside iter-000k/sft), not the run's.
NOT_RUN_PATHS = {("flywheel/learning/curation.py", "manifest.json")}


def spelled_run_paths(source: str) -> list[tuple[int, str]]:
    """(line, string) of each run-directory path ``source`` spells in code: a string constant that
    is one of the run's own files, or a run folder (or ``iter-...``) joined onto a path with ``/``,
    ``Path(...)``, ``joinpath`` or ``os.path.join``. Docstrings, comments and messages that mention
    such a path are longer strings, so they pass."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in RUN_FILES:
            found.append((node.lineno, node.value))
        parts: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.right]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            parts = list(node.args) if name in ("Path", "PurePath", "joinpath", "join") else []
        for part in parts:
            if isinstance(part, ast.JoinedStr) and part.values and isinstance(part.values[0], ast.Constant):
                part = part.values[0]  # f"iter-{k:04d}/sft": its leading text
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                continue
            head = part.value.split("/")[0]
            if head in RUN_FOLDERS or head.startswith("iter-"):
                found.append((part.lineno, part.value))
    return found


@pytest.mark.parametrize("code, spelled", [
    ('cfg = load_config(run_dir / "config.yaml")', ["config.yaml"]),
    ('done = read_json(os.path.join(run_dir, "summary.json"))', ["summary.json"]),
    ('n = len(list((ctx.store.root / "quarantine").glob(f"{why}-*")))', ["quarantine"]),
    ('files = sorted(Path(root, "judgments").glob("*.parquet"))', ["judgments"]),
    ('d = root.joinpath("ratings/history.json")', ["ratings/history.json"]),
    ('d = root / f"iter-{k:04d}" / "sft"', ["iter-"]),
    ('store.append_jsonl("usage.jsonl", row)', ["usage.jsonl"]),
    ('"""Reads ``run_dir / "config.yaml"`` and summary.json."""\n'
     'raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml)")  # judgments/ too', []),
    ('cfg = load_config(store.config_path); shards = store.log_files("judgments")', []),
])
def test_the_path_scan_finds_a_spelled_run_path_and_nothing_else(code, spelled):
    assert [s for _, s in spelled_run_paths(code)] == spelled


def test_only_the_store_spells_a_path_in_the_run_directory():
    """``RunStore`` names every path inside a run directory (config.yaml, summary.json, the logs,
    quarantine/ ...); no other module of flywheel/, flows/ or judges/ joins one itself."""
    found = []
    for part in ("flywheel", "flows", "judges"):
        for path in sorted((ROOT / part).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in PATH_OWNERS:
                continue
            found += [f"{rel}:{line}: {s!r}" for line, s in spelled_run_paths(path.read_text(encoding="utf-8"))
                      if (rel, s) not in NOT_RUN_PATHS]
    assert not found, "spelled outside flywheel/ground/store.py (ask the RunStore for it):\n" + "\n".join(found)


# -- records by keyword ---------------------------------------------------------------------------
# A call that passes this many arguments by position breaks silently, in order, when a field is
# added; the ones left hash their values in order (the order is the id itself).
MANY_POSITIONAL = 7
ORDERED_BY_DESIGN = {"stable_id"}


def positional_calls(source: str) -> list[tuple[int, str]]:
    """(line, callee) of each call in ``source`` with MANY_POSITIONAL or more positional arguments."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            if sum(not isinstance(a, ast.Starred) for a in node.args) >= MANY_POSITIONAL:
                found.append((node.lineno, ast.unparse(node.func)))
    return found


def test_the_positional_scan_finds_a_long_positional_call_and_not_a_keyword_one():
    assert positional_calls("Battle(1, 2, 3, 4, 5, 6, 7)") == [(1, "Battle")]
    assert positional_calls("Battle(1, 2, 3, 4, 5, 6, g=7)") == []


def test_records_and_calls_take_many_arguments_by_keyword():
    found = [f"{path.relative_to(ROOT)}:{line}: {callee}"
             for folder in ("flywheel", "flows", "judges") for path in sorted((ROOT / folder).rglob("*.py"))
             for line, callee in positional_calls(path.read_text()) if callee not in ORDERED_BY_DESIGN]
    assert found == [], found
