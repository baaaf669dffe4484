"""``RunView``: a command that reads a run opens it once, shares what its queries read, writes
nothing into it, and says in one line (exit 2) when the folder holds no run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flywheel.config.loading import dump_config, load_config
from flywheel.face.cli import app
from flywheel.ground import run_view
from flywheel.ground.atomic import atomic_write_text
from flywheel.ground.records import Battle, Judgment
from flywheel.ground.store import RunStore


def judged_run(root: Path) -> Path:
    """A run directory with its config.yaml and 30 judged eval battles of iteration 1, nothing else."""
    store = RunStore(root)
    atomic_write_text(store.config_path, dump_config(load_config(None, ["run.name=r"])))
    models = ("student@1", "calc", "scribe")
    battles = [Battle(battle_id=str(i), iteration=1, phase="eval", prompt_id=f"p{i}", prompt="q",
                      category=("add", "rev")[i % 2], level=1, reference=None, model_a=models[i % 3],
                      model_b=models[(i + 1) % 3], response_a="x", response_b="y") for i in range(30)]
    store.append_battles(battles)
    store.append_judgments([Judgment(battle_id=str(i), judge="verifier", winner=("model_a", "model_b", "tie")[i % 3])
                            for i in range(30)], iteration=1, phase="eval")
    return root


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_the_report_opens_the_run_once_and_reads_its_config_and_battle_log_once(tmp_path, monkeypatch):
    """The page's win matrix and its categories (win rates per category: the run has no
    accuracies) both need the judged eval battles: the command's one view reads them once."""
    run = judged_run(tmp_path / "run")
    counts = {"stores": 0, "configs": 0, "battle reads": 0}

    def counted(key, original):
        def call(*args, **kwargs):
            counts[key] += 1
            return original(*args, **kwargs)
        return call

    monkeypatch.setattr(RunStore, "__init__", counted("stores", RunStore.__init__))
    monkeypatch.setattr(run_view, "load_config", counted("configs", run_view.load_config))
    monkeypatch.setattr(RunStore, "battles", counted("battle reads", RunStore.battles))
    got = CliRunner().invoke(app, ["report", str(run), "--html", str(tmp_path / "r.html")])
    assert got.exit_code == 0, got.output
    assert counts == {"stores": 1, "configs": 1, "battle reads": 1}


def test_reading_a_run_writes_nothing_into_it(tmp_path):
    run = judged_run(tmp_path / "run")
    before = files_of(run)
    for args in (["elo", str(run), "--lc-baseline", "calc"], ["elo", str(run), "--style-control"],
                 ["report", str(run), "--html", str(tmp_path / "r.html")], ["data", "ls", str(run)],
                 ["data", "export", str(run), "--format", "arena", "--out", str(tmp_path / "a.jsonl")]):
        got = CliRunner().invoke(app, args)
        assert got.exit_code == 0, (args, got.output)
    assert files_of(run) == before


@pytest.mark.parametrize("args", [["elo"], ["elo", "--history"], ["elo", "--judge"], ["elo", "--style-control"],
                                  ["elo", "--lc-baseline", "calc"], ["arms"], ["data", "ls"],
                                  ["data", "export", "--format", "arena-hard"],
                                  ["data", "push", "--repo", "a/b", "--dry-run"]])
def test_each_command_that_reads_a_run_says_so_in_one_line_where_there_is_none(tmp_path, args):
    got = CliRunner().invoke(app, [*args, str(tmp_path)])
    assert got.exit_code == 2 and got.output == f"error: {tmp_path}: not a run directory (no config.yaml)\n"
    assert list(tmp_path.iterdir()) == []
