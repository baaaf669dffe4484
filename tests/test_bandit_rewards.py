"""The bandit rewards (select.reward) on hand-made judged battles, and the validation-progress
reward's inputs (the validation split, nothing else)."""

from __future__ import annotations

import pytest

from flywheel.arena.bandit_rewards import (
    GAMES_HAVE_NO_VALIDATION_ANSWERS,
    cell_gains,
    feedback,
    own_success,
    validation_progress,
)
from flywheel.arena.battles import generation_keys
from flywheel.arena.selection import Selector
from flywheel.config.loading import ConfigError, load_config
from flywheel.config.tree import FlywheelConfig, SelectConfig
from flywheel.ground.records import Battle, JudgedBattle, Judgment
from flywheel.ground.store import RunStore
from flywheel.run.context import Context
from flywheel.stages.rewards import own_successes, round_feedback, validation_gains
from judges.build import build_verifier


def jb(i: int, cell: str, a: str, b: str, answer_a: str, answer_b: str, reference: str | None, winner: str,
       prompt_id: str | None = None) -> JudgedBattle:
    """A judged train battle, by hand: ``cell`` is ``<category>/L<level>``."""
    category, level = cell.split("/L")
    pid = prompt_id or f"p{i}"
    return JudgedBattle(Battle(f"b{i}", 1, "train", pid, f"q{i}", category, int(level), reference, a, b,
                               answer_a, answer_b, None, cell),
                        Judgment(f"b{i}", "verifier", winner))


# One round of student@1's battles, judged by the verifier (right beats wrong; both right "tie",
# both wrong "tie (bothbad)"). Its score / own success: b1 0.5 / 1, b2 0 / 0, b3 1 / 1 in add/L1
# (mean score 0.5, success 2/3); b4 0.5 / 0 (both wrong), b5 0 / 0 in add/L2 (score 0.25, success 0).
ROUND = [
    jb(1, "add/L1", "student@1", "calc", "2", "2", "2", "tie"),
    jb(2, "add/L1", "calc", "student@1", "4", "5", "4", "model_a"),
    jb(3, "add/L1", "student@1", "scribe", "6", "7", "6", "model_a"),
    jb(4, "add/L2", "scribe", "student@1", "11", "12", "10", "tie (bothbad)"),
    jb(5, "add/L2", "student@1", "calc", "13", "12", "12", "model_b"),
]
CHECK = build_verifier(FlywheelConfig().judge.verifier).correct
SUCCESS = {"b1": 1.0, "b2": 0.0, "b3": 1.0, "b4": 0.0, "b5": 0.0}


def test_the_targets_own_success_is_its_answer_checked_whoever_won():
    assert {j.battle.battle_id: own_success(j, "student@1", CHECK) for j in ROUND} == SUCCESS
    # a games world has no reference answers: a won or drawn game is a success
    assert [own_success(j, "student@1", None) for j in ROUND] == [1.0, 0.0, 1.0, 1.0, 0.0]
    # self-play: the version that played decides the seat; no reference, no signal
    mirror = jb(6, "add/L1", "student@0", "student@1", "3", "4", "3", "model_a")
    assert own_success(mirror, "student@1", CHECK) == 0.0 and own_success(mirror, "student@0", CHECK) == 1.0
    assert own_success(jb(7, "add/L1", "student@1", "calc", "3", "4", None, "model_a"), "student@1", CHECK) is None


@pytest.mark.parametrize("reward, kw, want", [
    ("yield", {}, [0.0, 1.0, 0.0, 0.0, 1.0]),  # the two losses on new prompts
    # yield x (1 - p)^g: add/L1's loss where the target's own answers pass 2 in 3, add/L2's where none does
    ("unreached-yield", {"success": SUCCESS}, [0.0, (1 / 3) ** 8, 0.0, 0.0, 1.0]),
    ("unreached-yield", {"success": SUCCESS, "generations": 2}, [0.0, 1 / 9, 0.0, 0.0, 1.0]),
    ("unreached-yield", {"success": {"b4": 0.0, "b5": 0.0}}, [0.0, 1.0, 0.0, 0.0, 1.0]),  # add/L1 unmeasured: yield
    ("uncertainty", {}, [1.0, 1.0, 1.0, 0.75, 0.75]),  # 4p(1-p) of the score: add/L2's both-wrong tie counts 0.5
    ("progress", {"previous_scores": {"add/L1": 0.25, "add/L2": 0.75}}, [0.5, 0.5, 0.5, 1.0, 1.0]),
    ("learnability", {"success": SUCCESS}, [8 / 9] * 3 + [0.0, 0.0]),  # 4p(1-p) of its own success: add/L2 never
    ("validation-progress", {"success": SUCCESS, "progress": {"add/L2": 0.3}}, [8 / 9] * 3 + [0.3, 0.3]),
])
def test_each_reward_of_a_hand_made_round_and_the_selector_update_it_makes(reward, kw, want):
    previous = kw.pop("previous_scores", {})
    got = feedback(reward, ROUND, "student@1", previous, set(), **kw)
    assert [(c, o) for c, o, _ in got] == [("add/L1", "calc"), ("add/L1", "calc"), ("add/L1", "scribe"),
                                           ("add/L2", "scribe"), ("add/L2", "calc")]
    assert [r for _, _, r in got] == pytest.approx(want)
    sel = Selector.new(SelectConfig(reward=reward, discount=1.0), ["add/L1", "add/L2"], ["calc", "scribe"])
    sel.update(got)
    assert sel.prompt.pulls.tolist() == [3, 2]
    assert sel.prompt.reward_sum == pytest.approx([sum(want[:3]), sum(want[3:])])
    assert sel.per_cell["add/L1"].reward_sum == pytest.approx([want[0] + want[1], want[2]])  # calc, scribe
    assert sel.per_cell["add/L2"].reward_sum == pytest.approx([want[4], want[3]])


def test_a_battle_without_the_targets_success_gives_learnability_no_signal():
    got = feedback("learnability", ROUND, "student@1", {}, success={"b1": 1.0, "b2": 0.0, "b4": 0.0})
    assert [(c, r) for c, _, r in got] == [("add/L1", 1.0), ("add/L1", 1.0), ("add/L2", 0.0)]
    # where the cell's progress is known, validation-progress needs no success
    got = feedback("validation-progress", ROUND, "student@1", {}, success={}, progress={"add/L1": 0.2})
    assert [(c, r) for c, _, r in got] == [("add/L1", 0.2)] * 3


def test_cell_gains_compare_the_prompts_both_versions_answered():
    cells = {"v1": "A", "v2": "A", "v3": "B", "v4": "B", "v5": "B", "v6": "C"}
    before = {"v1": True, "v2": False, "v3": False, "v4": True}
    after = {"v1": True, "v2": True, "v3": True, "v5": False}
    assert cell_gains(before, after, cells) == {"A": 0.5, "B": 1.0}  # v4 and v5 each answered once: left out


def test_validation_progress_is_a_moving_average_of_the_gains_then_its_size():
    steps = [{"A": 0.5, "B": 0.25, "C": 0.1}, {"A": -0.1, "B": 0.25}, {"A": 0.2, "C": -0.1}]
    # A: 0.5 -> 0.5*-0.1 + 0.5*0.5 = 0.2 -> 0.5*0.2 + 0.5*0.2 = 0.2; x2 = 0.4. B: 0.25 -> 0.25 (x2 0.5).
    # C: 0.1 -> (absent) -> 0.5*-0.1 + 0.5*0.1 = 0: up and down cancel.
    assert validation_progress(steps, 0.5) == pytest.approx({"A": 0.4, "B": 0.5, "C": 0.0})
    assert validation_progress(steps, 1.0) == pytest.approx({"A": 0.4, "B": 0.5, "C": 0.2})  # the newest only
    assert validation_progress([{"A": 0.75}], 0.5) == {"A": 1.0}  # capped at 1
    assert validation_progress([], 0.5) == {}


# -- the stage: what validation-progress reads -----------------------------------------------------
# Right answers out of 2 validation prompts per cell, for versions 0, 1 and 2 of the student.
RIGHT = {"add/L1": (0, 1, 2), "add/L2": (0, 0, 0), "sub/L1": (2, 1, 2), "sub/L2": (0, 1, 1)}
# Gains (+0.5, +0.5), (0, 0), (-0.5, +0.5), (+0.5, 0); moving average (weight 0.5), x2:
WANT = {"add/L1": 1.0, "add/L2": 0.0, "sub/L1": 0.0, "sub/L2": 0.5}


def _context(tmp_path, reward: str = "validation-progress") -> Context:
    cfg = FlywheelConfig.model_validate({
        "world": {"tasks": {"categories": ["add", "sub"], "levels": [1, 2], "train_per_cell": 6,
                            "val_per_cell": 2, "eval_per_cell": 2}},
        "select": {"reward": reward}})
    return Context(cfg, RunStore(tmp_path / "run"))


def _cache(ctx: Context, version: str, prompts, right: dict[str, int]) -> None:
    """Cache ``version``'s answers to ``prompts``: the first ``right[cell]`` of each cell right."""
    keys = generation_keys(ctx.roster, version, prompts)
    seen: dict[str, int] = {}
    rows = []
    for p in prompts:
        cell = f"{p.category}/L{p.level}"
        seen[cell] = seen.get(cell, 0) + 1
        rows.append((keys[p.id], p.reference if seen[cell] <= right[cell] else p.reference + "7"))
    ctx.store.generations.put(rows)


def _student_round(ctx: Context, answers: str, version: str = "student@2", first: int = 0) -> list[JudgedBattle]:
    """One battle of ``version`` per cell (in RIGHT's order) on a train prompt; ``answers`` 'r'
    (right) or 'w' (wrong) per battle; battle ids from ``first``."""
    out = []
    for i, cell in enumerate(RIGHT):
        p = next(p for p in ctx.train_pool if f"{p.category}/L{p.level}" == cell)
        mine = p.reference if answers[i] == "r" else p.reference + "7"
        out.append(jb(first + i, cell, version, "calc", mine, p.reference, p.reference,
                      "tie" if answers[i] == "r" else "model_b", p.id))
    return out


def test_validation_progress_reads_the_validation_split_only(tmp_path):
    ctx = _context(tmp_path)
    for v in range(3):
        _cache(ctx, f"student@{v}", ctx.validation, {c: r[v] for c, r in RIGHT.items()})
    mine = _student_round(ctx, "rwrw")
    rewards = lambda battles: {c: r for c, _, r in round_feedback(ctx, "student", 3, battles, [])}  # noqa: E731
    assert rewards(mine) == pytest.approx(WANT)
    assert len(validation_gains(ctx, "student", 3)) == 2

    # the eval split's answers (every version right everywhere, then wrong) and the battles move nothing
    for v, right in ((0, 0), (1, 2), (2, 0)):
        _cache(ctx, f"student@{v}", ctx.eval_split, dict.fromkeys(RIGHT, right))
    assert rewards(mine) == pytest.approx(WANT)
    assert rewards(_student_round(ctx, "wrwr")) == pytest.approx(WANT)

    # a validation answer does: student@2 now right on one add/L2 prompt (gains 0, +0.5: 0.25, x2)
    _cache(ctx, "student@2", ctx.validation, {**{c: r[2] for c, r in RIGHT.items()}, "add/L2": 1})
    assert rewards(mine) == pytest.approx({**WANT, "add/L2": 0.5})


def test_a_training_step_is_measured_against_the_version_it_was_trained_from(tmp_path):
    """student@1 was not promoted: iteration 2 trained student@2 from student@0, so its gain is
    student@2's accuracy minus student@0's, not student@1's."""
    from flywheel.run.results import PromoteResult, Promotion

    ctx = _context(tmp_path)
    for v in range(3):
        _cache(ctx, f"student@{v}", ctx.validation, {c: r[v] for c, r in RIGHT.items()})
    kept = PromoteResult({"student": Promotion("student@1", "student@0", False, "validation", 0.25, 0.375)})
    ctx.store.save_stage_json(1, "promote", kept.to_json(), 0.0)
    assert validation_gains(ctx, "student", 3)[1] == {"add/L1": 1.0, "add/L2": 0.0, "sub/L1": 0.0, "sub/L2": 0.5}
    # moving averages 0.75, 0, -0.25, 0.5; x2, at most 1
    got = {c: r for c, _, r in round_feedback(ctx, "student", 3, _student_round(ctx, "rwrw"), [])}
    assert got == pytest.approx({"add/L1": 1.0, "add/L2": 0.0, "sub/L1": 0.5, "sub/L2": 1.0})


def test_before_a_training_step_validation_progress_is_learnability(tmp_path):
    ctx = _context(tmp_path)
    mine = _student_round(ctx, "rwrw", "student@0") + _student_round(ctx, "rrww", "student@0", first=4)
    assert validation_gains(ctx, "student", 1) == []
    got = round_feedback(ctx, "student", 1, mine, [])
    # own success per cell: add/L1 1, 1; add/L2 0, 1; sub/L1 1, 0; sub/L2 0, 0
    assert [r for _, _, r in got] == [0.0, 1.0, 1.0, 0.0] * 2
    assert got == round_feedback(_context(tmp_path / "l", "learnability"), "student", 1, mine, [])
    assert own_successes(ctx, "student@0", mine) == {"b0": 1.0, "b1": 0.0, "b2": 1.0, "b3": 0.0,
                                                      "b4": 1.0, "b5": 1.0, "b6": 0.0, "b7": 0.0}


def test_unreached_yield_reads_the_targets_own_success_and_the_configured_generations(tmp_path):
    ctx = _context(tmp_path, "unreached-yield")
    ctx.cfg.train.rl.generations = 2
    # one battle a cell: right, wrong, right, wrong
    first = _student_round(ctx, "rwrw", "student@0")
    assert [r for _, _, r in round_feedback(ctx, "student", 1, first, [])] == [0.0, 1.0, 0.0, 1.0]
    # with a second battle a cell in the round (wrong, wrong, right, wrong): add/L1's own answers pass one
    # in two, so its loss earns 0.5^2 (train.rl.generations 2); add/L2 and sub/L2 never pass: yield
    both = first + _student_round(ctx, "wwrw", "student@0", first=4)
    got = round_feedback(ctx, "student", 1, both, [])
    assert [r for _, _, r in got] == [0.0, 1.0, 0.0, 1.0, 0.25, 1.0, 0.0, 1.0]
    ctx.cfg.train.rl.generations = 4
    assert [r for _, _, r in round_feedback(ctx, "student", 1, both, [])][4] == 0.0625


def test_a_games_world_refuses_validation_progress_with_a_reason(tmp_path):
    from flywheel.face.checks import problems

    cfg = FlywheelConfig.model_validate({
        "world": {"kind": "games", "models": [{"name": "x", "categories": ["tictactoe"]}]},
        "judge": {"kind": "game"}, "targets": [{"name": "x"}],
        "opponents": [{"name": "minimax", "kind": "minimax"}], "select": {"reward": "validation-progress"}})
    assert GAMES_HAVE_NO_VALIDATION_ANSWERS in problems(cfg)
    with pytest.raises(ValueError, match="learnability"):
        validation_gains(Context(cfg, RunStore(tmp_path / "run")), "x", 2)


def test_reward_settings_are_checked_with_the_field_named():
    assert load_config(None, ["select.reward=learnability"]).select.reward == "learnability"
    with pytest.raises(ConfigError, match="select.reward"):
        load_config(None, ["select.reward=surprise"])
    with pytest.raises(ConfigError, match="select.progress_weight"):
        load_config(None, ["select.progress_weight=0"])


def test_a_real_run_finds_every_validation_answer_its_evaluations_cached(tiny_config):
    """Two tiny iterations under validation-progress: in iteration 2 the reward is the progress of
    iteration 1's training step, read from the cached validation answers of student@0 and
    student@1 (none missing: a miss would leave the cell to learnability, silently)."""
    from flywheel.arena.selection import arm_of
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.iteration import run_to
    from flywheel.stages.rewards import validation_right

    cfg, _ = tiny_config(select__reward="validation-progress", select__battles_per_iteration=24, select__rounds=2,
                         rating__bootstrap_rounds=0)
    ctx = open_run(cfg)
    try:
        run_to(ctx, 2)
        for v in ("student@0", "student@1"):
            assert len(validation_right(ctx, v)) == len(ctx.validation)
        progress = validation_progress(validation_gains(ctx, "student", 2), cfg.select.progress_weight)
        assert set(progress) == {arm_of(p) for p in ctx.validation} == set(ctx.pool_by_cell)
        first = {s.battle_id for s in ctx.store.plan(2, 1)}
        mine = [j for j in ctx.store.judged(2, "train") if j.battle.battle_id in first]
        assert [r for _, _, r in round_feedback(ctx, "student", 2, mine, [])] == [progress[j.battle.arm] for j in mine]
    finally:
        close_run(ctx)
