"""Turn 2 two ways: on each model's own first answer (the eval battles' turn), and fixed up front
as MT-Bench asks it (the same text and reference for every model). Checked on the prompts the tiny
models actually received, and in a real tiny two-turn run: summary.json, the run's report and the
conversation benchmark give both, per model, with intervals."""

import json

import pytest

from flywheel.config.tree import FlywheelConfig
from flywheel.ground.conversation import decode
from flywheel.ground.store import RunStore
from flywheel.maths.proportions import wilson
from flywheel.worlds.followups import ProceduralAsker, apply, follow_up

ASKERS = [{"name": "ask", "kind": "procedural"}]


def test_the_wilson_interval_holds_its_known_values_and_stays_inside_0_1():
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4) and wilson(10, 10)[1] == pytest.approx(1.0)
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(180, 360)
    assert lo < 0.5 < hi and hi - lo == pytest.approx(2 * 1.96 * 0.5 / 360 ** 0.5, abs=2e-3)  # the normal's, at p = 1/2


def test_the_fixed_second_turn_is_one_question_for_every_model_on_the_prompts_they_received(
        tiny_models_dir, tmp_path, monkeypatch):
    """A fresh run store (nothing cached), the real tiny models: every second-turn prompt a model is
    handed has the fixed text and reference, the same for both models, after that model's own
    first answer, where the eval battles' turn would have had a reference of its own."""
    from flywheel.arena.second_turns import answer_fixed_turns, fix_second_turns
    from flywheel.players.hf import TransformersPlayer
    from flywheel.worlds.world import Roster, world_pools

    received: list[tuple[str, object, str]] = []  # (player, prompt, the text the model read)
    real = TransformersPlayer.generate

    def spy(self, prompts, params):
        received.extend((self.name, p, self.render(p)) for p in prompts)
        return real(self, prompts, params)

    monkeypatch.setattr(TransformersPlayer, "generate", spy)
    tree = {"world": {"models_dir": str(tiny_models_dir), "tasks": {"train_per_cell": 30, "eval_per_cell": 2,
                                                                     "val_per_cell": 2},
                      "conversation": {"turns": 2, "asker": "ask"}}, "askers": ASKERS}
    cfg = FlywheelConfig.model_validate(tree)
    roster = Roster(cfg, RunStore(tmp_path / "run"))
    evals = world_pools(cfg.world).eval
    fixed = fix_second_turns(roster.asker(), evals)
    assert set(fixed) == {p.id for p in evals}  # every task has a reference: every one gets its turn
    for p in evals:
        assert fixed[p.id].text == follow_up(p.text, p.reference, 2, cfg.run.seed)
        assert fixed[p.id].reference == apply(fixed[p.id].text, p.reference)  # from the right first answer
    talks = {m: answer_fixed_turns(roster, roster.store, m, evals, fixed, 0) for m in ("student", "calc")}
    roster.pool.release()
    second = {}  # (model, first user turn) -> (prompt handed over, text read)
    for player, p, text in received:
        if p.history:
            second[player, decode(p.history)[0]["content"]] = (p, text)
    asker, differ = ProceduralAsker(seed=cfg.run.seed), 0
    for p in evals:
        (mine, read_a), (theirs, read_b) = second["student", p.text], second["calc", p.text]
        assert (mine.text, mine.reference) == (theirs.text, theirs.reference) == (fixed[p.id].text,
                                                                                fixed[p.id].reference)
        for m, read in (("student", read_a), ("calc", read_b)):
            own = talks[m][p.id][1]["content"]
            assert read == f"{p.text}{own} {fixed[p.id].text}"  # raw text: its own first answer, then the turn
            assert talks[m][p.id][2] == {"role": "user", "content": fixed[p.id].text,
                                         "reference": fixed[p.id].reference}
        battle = [asker.reference(talks[m][p.id][:2], fixed[p.id].text) for m in ("student", "calc")]
        differ += battle[0] != battle[1]  # the battles' turn: a reference of each side's own
    assert differ > 0  # on those prompts the own-answer comparison asks two questions, the fixed one asks one


def test_a_tiny_two_turn_run_reports_turn_2_both_ways_per_model_with_intervals(tiny_models_dir, tmp_path,
                                                                              monkeypatch, capsys):
    """A real run (the baseline and one iteration of the tiny models): each model's turn 2 on its own
    first answer (the same figure as accuracy_by_turn) and on the fixed turn, each with a 95%
    interval, in summary.json, the run's report and the conversation benchmark, which reproduces
    both from the run's files."""
    from benchmarks.conversations import main, paired_runs
    from flywheel.face.queries import TURNS_HEADING, result_text
    from flywheel.ground.run_view import RunView
    from flywheel.run.context import close_run, open_run
    from flywheel.run.metrics import player_points
    from flywheel.run.results import VersionEval
    from flywheel.stages.iteration import run_to
    from tests.conftest import tiny_tree

    tree = tiny_tree(tmp_path / "no-models", tmp_path / "runs", run__name="talk", run__iterations=1,
                     world__conversation={"turns": 2, "asker": "ask"}, askers=ASKERS,
                     targets=[{"name": "pupil", "path": str(tiny_models_dir / "student")}],
                     opponents=[{"name": "adder", "path": str(tiny_models_dir / "calc")},
                                {"name": "writer", "path": str(tiny_models_dir / "scribe")}])
    ctx = open_run(FlywheelConfig.model_validate(tree))
    try:
        run_to(ctx, 1)
    finally:
        close_run(ctx)
    run = tmp_path / "runs" / "talk"
    summary = json.loads((run / "summary.json").read_text())
    fixed = json.loads((run / "ratings" / "eval-second-turns.json").read_text())
    assert len(fixed) == 36
    for entry in summary["iterations"]:
        evals = {**entry["eval"], **entry["opponents_eval"]}
        assert set(evals) == {f"pupil@{entry['iteration']}", "adder", "writer"}
        # opponents are not held to conversations on the validation split a second time each iteration
        assert entry["eval"][f"pupil@{entry['iteration']}"]["validation"]["prompts"] > 0
        assert not any("validation" in entry["opponents_eval"][o] for o in ("adder", "writer"))
        for m, ev in evals.items():
            own, same = ev["turn2"]["own_answer"], ev["turn2"]["fixed"]
            assert own["accuracy"] == ev["accuracy_by_turn"][1] and own["prompts"] == 36
            assert same["prompts"] == 36
            for acc in (own, same):
                assert 0 <= acc["lower"] <= acc["accuracy"] <= acc["upper"] <= 1 and acc["upper"] > acc["lower"]
        asked = json.loads((run / "ratings" / f"iter-000{entry['iteration']}-second-turns.json").read_text())
        for m in evals:
            assert {pid: c[2]["content"] for pid, c in asked[m].items()} == {pid: t["text"] for pid, t in fixed.items()}
            assert {pid: c[2]["reference"] for pid, c in asked[m].items()} == {
                pid: t["reference"] for pid, t in fixed.items()}
    report = result_text(RunView.open(run)).split(TURNS_HEADING)[1].strip("\n")
    assert report.splitlines()[0].split() == ["model", "turn_1", "turn_2_own_answer", "turn_2_fixed"]
    line = next(x for x in report.splitlines() if x.startswith("pupil@1 "))
    ev = summary["iterations"][1]["eval"]["pupil@1"]["turn2"]
    assert f"{ev['fixed']['accuracy']:.3f} [{ev['fixed']['lower']:.3f}, {ev['fixed']['upper']:.3f}]" in line
    stored = summary["iterations"][1]["eval"]["pupil@1"]
    assert VersionEval.from_json(stored).to_json() == stored  # read back whole
    points: dict[str, float] = {}
    player_points(points, "pupil@1", VersionEval.from_json(stored))  # what the tracker gets
    assert points["eval/pupil@1/turn_2/fixed/upper"] == ev["fixed"]["upper"]
    assert points["eval/pupil@1/turn_2/own_answer/accuracy"] == ev["own_answer"]["accuracy"]
    [paired] = paired_runs(run)
    assert paired.mismatches == () and len(paired.own.ours) == len(paired.fixed.ours) == 36
    monkeypatch.setattr("sys.argv", ["conversations", str(run)])
    main()
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("paired turn-2 difference, own first answer: ")
    assert out[-1].startswith("paired turn-2 difference, fixed second turn: ")
