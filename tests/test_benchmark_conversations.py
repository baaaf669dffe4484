"""benchmarks/conversations.py: the paired turn-2 comparison read back from a run directory's eval
battles, checked against summary.json."""

import json

import pytest

from benchmarks.conversations import main, paired_runs
from flywheel.ground.config import FlywheelConfig
from flywheel.ground.config_io import dump_config
from flywheel.ground.conversation import encode
from flywheel.ground.records import Battle
from flywheel.ground.store import RunStore
from flywheel.worlds.world import world_pools


def conversation(p, first: str, second: str) -> str:
    return encode([{"role": "user", "content": p.text, "reference": p.reference},
                   {"role": "assistant", "content": first},
                   {"role": "user", "content": "+7=", "reference": "49"}, {"role": "assistant", "content": second}])


def tiny_run(root, ours_turn2: float | None = None):
    """A finished two-iteration run's config, eval battles of iteration 1 and summary.json: on turn 2
    student@1 is right on every even prompt, calc on every fourth (and wrong on turn 1 both)."""
    tasks = {"train_per_cell": 2, "eval_per_cell": 2, "val_per_cell": 1}
    cfg = FlywheelConfig.model_validate({"world": {"tasks": tasks, "conversation": {"turns": 2, "asker": "ask"}},
                                         "askers": [{"name": "ask", "kind": "procedural"}]})
    store = RunStore(root)
    root.mkdir(parents=True)
    store.config_path.write_text(dump_config(cfg))
    evals = world_pools(cfg.world).eval
    answer = lambda right: "49" if right else "0"  # noqa: E731
    store.append_battles([Battle(f"b{i}", 1, "eval", p.id, p.text, p.category, p.level, p.reference, "calc",
                                 "student@1", "", "", conversation_a=conversation(p, "x", answer(i % 4 == 0)),
                                 conversation_b=conversation(p, "x", answer(i % 2 == 0)))
                          for i, p in enumerate(evals)])
    n = len(evals)
    ours, theirs = round(sum(i % 2 == 0 for i in range(n)) / n, 4), round(sum(i % 4 == 0 for i in range(n)) / n, 4)
    calc = {"calc": {"accuracy": 0.1, "accuracy_by_turn": [0.0, theirs]}}
    store.summary_path.write_text(json.dumps({"iterations": [
        {"iteration": 0, "eval": {"student@0": {"accuracy": 0.0, "accuracy_by_turn": [0.0, 0.0]}},
         "opponents_eval": calc, "current": {"student": "student@0"}},
        {"iteration": 1, "eval": {"student@1": {"accuracy": 0.2, "accuracy_by_turn": [0.0, ours_turn2 or ours]}},
         "opponents_eval": calc, "current": {"student": "student@1"}}]}))
    return n


def test_the_paired_comparison_reads_each_prompts_turn_2_and_reproduces_the_summary(tmp_path, capsys, monkeypatch):
    n = tiny_run(tmp_path / "seed0")
    [run] = paired_runs(tmp_path / "seed0")
    assert (run.in_use, run.opponent, run.iteration, run.mismatches) == ("student@1", "calc", 1, ())
    assert len(run.ours) == len(run.theirs) == n and run.discordant == (sum(i % 4 == 2 for i in range(n)), 0)
    assert run.difference.mean == pytest.approx(sum(i % 4 == 2 for i in range(n)) / n)
    assert 0 < run.difference.lower < run.difference.mean < run.difference.upper
    monkeypatch.setattr("sys.argv", ["conversations", str(tmp_path / "seed0")])
    main()
    last = capsys.readouterr().out.splitlines()[-1]
    d = run.difference
    assert last == f"paired turn-2 difference: {d.mean:+.3f} (95% CI {d.lower:+.3f} to {d.upper:+.3f}) over 1 runs"


def test_a_summary_the_battles_do_not_reproduce_is_a_loud_mismatch_and_a_missing_run_one_error_line(
        tmp_path, capsys, monkeypatch):
    tiny_run(tmp_path / "seed0", ours_turn2=0.9)
    [run] = paired_runs(tmp_path / "seed0")
    assert len(run.mismatches) == 1 and run.mismatches[0].startswith("student@1: ")
    assert "0.9 in summary.json (iteration 1)" in run.mismatches[0]
    monkeypatch.setattr("sys.argv", ["conversations", str(tmp_path / "seed0")])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 1 and "MISMATCH seed0: student@1" in capsys.readouterr().err
    monkeypatch.setattr("sys.argv", ["conversations", str(tmp_path / "nowhere")])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2 and err == f"error: {tmp_path / 'nowhere'}: not a run directory (no config.yaml)\n"
