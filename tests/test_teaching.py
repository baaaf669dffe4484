"""Teaching (select.teaching): the teacher's reward is the student's lift, a one-shot example is a
user/assistant exchange before the question, the teacher bandits learn the best teacher of each
cell with a scripted student, the lessons with the largest lift become the student's SFT rows, a
killed teaching round resumes with nothing lost or doubled, and a teacher that is no configured
opponent is one error line before a run directory exists."""

from __future__ import annotations

import json

import pytest

from flywheel.arena import teaching
from flywheel.arena.teaching import LessonPlan, TeachingRound
from flywheel.config.tree import FlywheelConfig
from flywheel.ground.chat import history_of, messages, raw_prompt
from flywheel.ground.records import Generation, Lesson, Prompt
from flywheel.ground.store import RunStore


def _config(root, **teach) -> FlywheelConfig:
    """A run of the scripted student, taught by an always-right, a never-right and an arithmetic-only
    teacher on a small task suite (no model is loaded)."""
    return FlywheelConfig.model_validate({
        "run": {"root": str(root), "name": "teach", "iterations": 1},
        "world": {"models_dir": str(root / "models"), "tasks": {"train_per_cell": 8, "eval_per_cell": 2,
                                                                "val_per_cell": 1}},
        "targets": [{"name": "student", "kind": "tests.scripted:ScriptedStudent"}],
        "opponents": [{"name": "oracle", "kind": "reference-answer"}, {"name": "liar", "kind": "wrong-answer"},
                      {"name": "calc", "kind": "tests.scripted:ArithmeticTeacher"}],
        "select": {"teaching": {"enabled": True, "rounds": 6, "lessons": 36, "sft": 10, **teach}},
    })


@pytest.fixture
def ctx(tmp_path):
    from flywheel.run.context import close_run, open_run

    c = open_run(_config(tmp_path / "runs"))
    yield c
    close_run(c)


def test_the_teachers_reward_is_the_students_lift_from_the_example():
    example = Prompt("e", "3+5=", "add", 1, "8")
    sibling = Prompt("s", "4+2=", "add", 1, "6")
    plan = LessonPlan("l1", "add/L1", "t", example, sibling)
    this = TeachingRound("student@0", 1, 1, 1, 0)
    correct = lambda text, p: text == p.reference  # noqa: E731
    gen = lambda text: Generation("x", "", text)  # noqa: E731
    cases = {("6", "7"): (1.0, 1.0), ("6", "6"): (0.0, 0.5), ("7", "7"): (0.0, 0.5), ("7", "6"): (-1.0, 0.0)}
    for (with_, without), (lift, reward) in cases.items():
        lesson = teaching.grade(plan, this, gen("8"), gen(without), gen(with_), correct)
        assert (lesson.lift, teaching.reward(lesson.lift)) == (lift, reward)
        assert lesson.example_correct and lesson.correct_with == (with_ == "6")
    failed = teaching.grade(plan, this, Generation("t", "e", "", "timeout"), gen("7"), gen("6"), correct)
    assert failed.lift == 0.0 and failed.error == "teacher: timeout" and not failed.correct_with
    # The one-shot prompt: the example and the teacher's answer as an exchange before the question.
    shot = teaching.one_shot(example, "8", sibling)
    assert shot.text == "4+2=" and shot.reference == "6" and shot.id != sibling.id
    assert messages(shot.text, "Be brief.", history_of(shot)) == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "3+5="},
        {"role": "assistant", "content": "8"}, {"role": "user", "content": "4+2="}]
    assert raw_prompt(shot.text, None, history_of(shot)) == "3+5=8 4+2="  # the tiny models' raw text
    assert teaching.one_shot(example, "9", sibling).id != shot.id  # another answer is another prompt


def test_a_chat_model_reads_the_example_through_its_chat_template(tmp_path):
    """SmolLM2's template renders the example as a user turn and an assistant turn before the question."""
    from pathlib import Path

    smol = Path(__file__).resolve().parents[1] / "data" / "models" / "smollm2"  # this checkout's
    if not (smol / "tokenizer_config.json").exists():
        pytest.skip(f"SmolLM2 is not converted in this checkout ({smol}: flywheel models add smollm2)")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smol)
    shot = teaching.one_shot(Prompt("e", "3+5=", "add", 1, "8"), "8", Prompt("s", "4+2=", "add", 1, "6"))
    text = tok.apply_chat_template(messages(shot.text, "Answer.", history_of(shot)), tokenize=False,
                                   add_generation_prompt=True)
    assert text.index("user\n3+5=") < text.index("assistant\n8") < text.index("user\n4+2=")


def test_the_teacher_bandits_learn_the_best_teacher_with_a_scripted_student(ctx):
    """The scripted student is right only after a right example: the oracle lifts it in every cell,
    the arithmetic teacher in arithmetic only, the liar never. Over six rounds the bandits move the
    lessons to the teachers that lift; the best lessons become the student's SFT rows."""
    from flywheel.learning.curation import load_dataset_dir
    from flywheel.stages.curate import curate_datasets
    from flywheel.stages.teach import load_teachers, teach_round

    results = [teach_round(ctx, 1, rnd) for rnd in range(1, 7)]
    assert all(r.lessons == {"student": 36} and r.failed == 0 for r in results)
    lifts = teaching.teacher_lifts(ctx.store.lessons(1))
    assert lifts["oracle"].lift == 1.0 and lifts["liar"].lift == 0.0 and 0 < lifts["calc"].lift < 1
    assert all(x.without == 0.0 for x in lifts.values())
    last = ctx.store.lessons(1, 6)
    share = {t: sum(x.teacher == t for x in last) / len(last) for t in ("oracle", "liar", "calc")}
    assert share["oracle"] > 0.5 and share["liar"] < 0.15, share
    text_cells = [x for x in last if x.category not in ("add", "sub", "mul")]
    assert sum(x.teacher == "calc" for x in text_cells) < 0.2 * len(text_cells)  # calc teaches no text task
    bandits = load_teachers(ctx, "student", 1, 7)
    assert bandits.share("liar") < bandits.share("calc") < bandits.share("oracle")
    # Curation: the ten lessons with the largest lift, one per sibling prompt, the student's own answers.
    assert curate_datasets(ctx, 1).sft_examples == 10
    rows = load_dataset_dir(ctx.store.dataset_dir(1, "sft"))
    by_id = {x.lesson_id: x for x in ctx.store.lessons(1)}
    assert len(set(rows["prompt_id"])) == 10
    for battle_id, completion in zip(rows["battle_id"], rows["completion"]):
        lesson = by_id[battle_id]
        assert lesson.lift == 1.0 and json.dumps(completion).count(lesson.reference) and lesson.correct_with


def test_best_lessons_take_the_largest_lift_once_per_sibling_and_target():
    def lesson(i, lift, sibling, target="student@1", with_=True):
        return Lesson(f"l{i}", 1, 1, target, "t", "add/L1", "e", "1+1=", "2", True, sibling, "2+2=", "add", "4",
                      "5", "4" if with_ else "5", lift < 1, with_, lift)

    xs = [lesson(0, 0.0, "a"), lesson(1, 1.0, "a"), lesson(2, 1.0, "a"), lesson(3, 1.0, "b"),
          lesson(4, -1.0, "c", with_=False), lesson(5, 1.0, "d", target="other@1"), lesson(6, 1.0, "e")]
    assert [x.lesson_id for x in teaching.best_lessons(xs, 2, 1.0)] == ["l1", "l3", "l5"]
    assert [x.lesson_id for x in teaching.best_lessons(xs, 9, 1.0)] == ["l1", "l3", "l5", "l6"]
    sft = teaching.lesson_sft(xs[1])
    assert (sft.prompt, sft.completion, sft.target, sft.battle_id) == ("2+2=", "4", "student", "l1")


def test_a_teaching_round_killed_anywhere_resumes_with_nothing_lost_or_doubled(tmp_path):
    """Killed after the lessons' file (before the bandits learnt), or before it: the resumed round
    writes the same lessons, the bandits learn them once, and the answers come from the cache."""
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.teach import teach_round

    def run(root, kill=None):
        cfg = _config(root, rounds=2, lessons=12)
        c = open_run(cfg)
        try:
            teach_round(c, 1, 1)
            if kill:
                teach_round.__wrapped__(c, 1, 2)  # the stage's work, not its record
                for path in kill(c.store):
                    path.unlink()
        finally:
            close_run(c)
        c = open_run(cfg, resume=c.store.root)
        try:
            result = teach_round(c, 1, 2)
        finally:
            close_run(c)
        return c.store, result

    clean, expected = run(tmp_path / "clean")
    for name, kill in (("after-lessons", lambda s: [s.teacher_bandit_path("student", 1, 2)]),
                       ("before-lessons", lambda s: [s.teacher_bandit_path("student", 1, 2), s.lessons_path(1, 2)])):
        store, result = run(tmp_path / name, kill)
        assert result == expected
        assert store.lessons_path(1, 2).read_bytes() == clean.lessons_path(1, 2).read_bytes()
        assert len(store.lessons()) == 24 == len({x.lesson_id for x in store.lessons()})
        state = json.loads(store.teacher_bandit_path("student", 1, 2).read_text())
        assert state == json.loads(clean.teacher_bandit_path("student", 1, 2).read_text())
        pulls = sum(sum(b["total_pulls"]) for b in state["per_cell"].values())
        assert pulls == 24  # each lesson learnt once
        if name == "before-lessons":  # replayed from the generation cache
            replay = [r for r in RunStore(store.root).usage() if r["phase"] == "teach"][-4:]
            assert sum(r["generated"] for r in replay) == 0 and sum(r["cached"] for r in replay) > 0


def test_a_teacher_that_is_no_configured_opponent_is_one_error_line_and_no_run_directory(tmp_path):
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    root = tmp_path / "runs"
    args = ["--set", "select.teaching.enabled=true", "--set", "select.teaching.teachers=[calc,nobody]",
            "--set", f"run.root={root}"]
    line = ("error: select.teaching.teachers.1: 'nobody' is not a configured opponent; name one of calc, scribe, "
            "generalist")
    for command in ("check", "run"):
        got = CliRunner().invoke(app, [command, *args])
        assert got.exit_code == 2 and got.stderr.strip() == line, got.output
    assert not root.exists()


def test_api_players_send_the_example_as_earlier_turns(monkeypatch):
    """An API student reads the lesson as messages: the example's user and assistant turns, then the question."""
    monkeypatch.setenv("FLYWHEEL_TEST_KEY", "fake-test-key-0123456789abcdefghij")
    from tests.fakeapi import FakeAPI
    from tests.test_api_players import anthropic_player, openai_player

    from flywheel.players.player import SamplingParams

    shot = teaching.one_shot(Prompt("e", "3+5=", "add", 1, "8"), "8", Prompt("s", "4+2=", "add", 1, "6"))
    want = [{"role": "user", "content": "3+5="}, {"role": "assistant", "content": "8"},
            {"role": "user", "content": "4+2="}]
    with FakeAPI() as server:
        assert openai_player(server).generate([shot], SamplingParams())[0].ok
        assert anthropic_player(server).generate([shot], SamplingParams())[0].ok
        sent = [r["body"]["messages"] for r in server.requests]
    assert sent == [want, want]
