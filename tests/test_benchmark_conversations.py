"""benchmarks/conversations.py: the paired turn-2 comparisons read back from a run directory (turn 2
on each model's own first answer from the eval battles, the fixed second turn from its own file),
checked against summary.json."""

import json

import pytest

from benchmarks.conversations import main, paired_runs
from flywheel.config.loading import dump_config
from flywheel.config.tree import FlywheelConfig
from flywheel.ground.conversation import encode
from flywheel.ground.records import Battle
from flywheel.ground.store import RunStore
from flywheel.worlds.world import world_pools


def conversation(p, first: str, second: str) -> str:
    return encode([{"role": "user", "content": p.text, "reference": p.reference},
                   {"role": "assistant", "content": first},
                   {"role": "user", "content": "+7=", "reference": "49"}, {"role": "assistant", "content": second}])


def tiny_run(root, ours_turn2: float | None = None, fixed: bool = False):
    """A finished two-iteration run's config, eval battles of iteration 1 and summary.json: on turn 2
    student@1 is right on every even prompt, calc on every fourth (and wrong on turn 1 both). With
    ``fixed``, the fixed second turns too: student@1 right on every third prompt, calc on none, and
    calc asked another second question on the first prompt."""
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
    student = {"accuracy": 0.2, "accuracy_by_turn": [0.0, ours_turn2 or ours]}
    if fixed:
        store.ratings_path("eval-second-turns.json").parent.mkdir(parents=True)
        store.ratings_path("eval-second-turns.json").write_text(json.dumps(
            {p.id: {"text": "+7=", "reference": "49"} for p in evals}))
        asked = {"student@1": {p.id: json.loads(conversation(p, "x", answer(i % 3 == 0))) for i, p in enumerate(evals)},
                 "calc": {p.id: json.loads(conversation(p, "x", "0")) for p in evals}}
        asked["calc"][evals[0].id][2]["reference"] = "50"
        store.ratings_path("iter-0001-second-turns.json").write_text(json.dumps(asked))
        right = round(sum(i % 3 == 0 for i in range(n)) / n, 4)
        student["turn2"] = {"own_answer": {"accuracy": ours, "lower": 0.0, "upper": 1.0, "prompts": n},
                            "fixed": {"accuracy": right, "lower": 0.0, "upper": 1.0, "prompts": n}}
        calc["calc"]["turn2"] = {"own_answer": {"accuracy": theirs, "lower": 0.0, "upper": 1.0, "prompts": n},
                                 "fixed": {"accuracy": 0.0, "lower": 0.0, "upper": 1.0, "prompts": n}}
    store.summary_path.write_text(json.dumps({"iterations": [
        {"iteration": 0, "eval": {"student@0": {"accuracy": 0.0, "accuracy_by_turn": [0.0, 0.0]}},
         "opponents_eval": calc, "current": {"student": "student@0"}},
        {"iteration": 1, "eval": {"student@1": student}, "opponents_eval": calc, "current": {"student": "student@1"}}]}))
    return n


def test_the_paired_comparison_reads_each_prompts_turn_2_and_reproduces_the_summary(tmp_path, capsys, monkeypatch):
    n = tiny_run(tmp_path / "seed0")
    [run] = paired_runs(tmp_path / "seed0")
    assert (run.in_use, run.opponent, run.iteration, run.mismatches, run.fixed) == ("student@1", "calc", 1, (), None)
    own = run.own
    assert len(own.ours) == len(own.theirs) == n and own.discordant == (sum(i % 4 == 2 for i in range(n)), 0)
    assert own.difference.mean == pytest.approx(sum(i % 4 == 2 for i in range(n)) / n)
    assert 0 < own.difference.lower < own.difference.mean < own.difference.upper
    monkeypatch.setattr("sys.argv", ["conversations", str(tmp_path / "seed0")])
    main()
    lines = capsys.readouterr().out.splitlines()
    d = own.difference
    assert lines[-2] == (f"paired turn-2 difference, own first answer: {d.mean:+.3f} (95% CI {d.lower:+.3f} to "
                         f"{d.upper:+.3f}) over 1 runs")
    assert lines[-1] == "paired turn-2 difference, fixed second turn: not recorded in these runs"


def test_the_fixed_second_turn_is_compared_beside_the_own_answer_one_and_a_differing_question_is_loud(
        tmp_path, capsys, monkeypatch):
    n = tiny_run(tmp_path / "seed0", fixed=True)
    [run] = paired_runs(tmp_path / "seed0")
    thirds = sum(i % 3 == 0 for i in range(n))
    assert run.fixed.discordant == (thirds, 0) and run.fixed.difference.mean == pytest.approx(thirds / n)
    assert run.own.difference.mean == pytest.approx(sum(i % 4 == 2 for i in range(n)) / n)  # unchanged beside it
    assert len(run.mismatches) == 1 and "the fixed second turn differs between student@1 and calc" in run.mismatches[0]
    monkeypatch.setattr("sys.argv", ["conversations", str(tmp_path / "seed0")])
    with pytest.raises(SystemExit) as done:
        main()
    got = capsys.readouterr()
    d = run.fixed.difference
    assert done.value.code == 1 and "MISMATCH seed0: prompt " in got.err
    assert got.out.splitlines()[-1] == (f"paired turn-2 difference, fixed second turn: {d.mean:+.3f} (95% CI "
                                        f"{d.lower:+.3f} to {d.upper:+.3f}) over 1 runs")
    assert "student@1 (iteration 1), turn 2 with 95% intervals: own first answer " in got.out


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
