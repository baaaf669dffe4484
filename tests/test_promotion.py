"""Learning efficacy's rules: a new version is promoted only if it is at least as good on the
validation split (never the eval split), and training replays earlier iterations' data."""

from __future__ import annotations

import json

import pytest

from flywheel.config.tree import FlywheelConfig
from flywheel.ground.atomic import read_json
from flywheel.run.context import close_run, open_run
from flywheel.run.results import EvalResult, Validation, VersionEval
from flywheel.stages.iteration import run_to
from flywheel.stages.promote import promote_versions
from flywheel.stages.train_data import training_data
from tests.conftest import tiny_tree


def _eval(validation: float, eval_accuracy: float) -> VersionEval:
    return VersionEval(eval_accuracy, {}, None, None, {}, None, Validation(10, validation, {}))


def _store_eval(ctx, k: int, figures: dict[str, tuple[float, float]]) -> None:
    result = EvalResult({v: _eval(*f) for v, f in figures.items()}, [])
    ctx.store.save_stage_json(k, "evaluate", result.to_json(), 0.0)


def test_promotion_reads_the_validation_split_and_never_the_eval_split(tiny_models_dir, tmp_path):
    cfg = FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, tmp_path, run__name="rule"))
    ctx = open_run(cfg)
    try:
        # (validation, eval): student@1 is better on eval but worse on validation
        _store_eval(ctx, 0, {"student@0": (0.50, 0.10)})
        _store_eval(ctx, 1, {"student@1": (0.40, 0.90)})
        first = promote_versions(ctx, 1).targets["student"]
        assert (first.promoted, first.candidate, first.incumbent, first.current) == (False, "student@1", "student@0", "student@0")
        assert (first.candidate_validation, first.incumbent_validation) == (0.40, 0.50)
        assert ctx.current_version("student", 2) == "student@0"  # plays and trains in iteration 2
        # recorded: the stage result on disk says so
        assert read_json(ctx.store.stage_path(1, "promote"))["student"]["promoted"] is False
        # iteration 2 is compared with the version that stayed, and a tie is promoted
        _store_eval(ctx, 2, {"student@2": (0.50, 0.05)})
        second = promote_versions(ctx, 2).targets["student"]
        assert (second.promoted, second.incumbent) == (True, "student@0")
        assert ctx.current_version("student", 3) == "student@2"
    finally:
        close_run(ctx)


def test_promotion_margin_and_always(tiny_models_dir, tmp_path):
    cases = (({"evaluate__promotion_margin": 0.15}, True), ({"evaluate__promotion": "always"}, True),
             ({"evaluate__promotion_margin": 0.05}, False))
    for i, (over, promoted) in enumerate(cases):
        cfg = FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, tmp_path, run__name=f"r{i}", **over))
        ctx = open_run(cfg)
        try:
            _store_eval(ctx, 0, {"student@0": (0.50, 0.5)})
            _store_eval(ctx, 1, {"student@1": (0.40, 0.5)})
            assert promote_versions(ctx, 1).targets["student"].promoted is promoted, over
        finally:
            close_run(ctx)


@pytest.fixture(scope="module")
def ruined_run(tiny_models_dir, tmp_path_factory):
    """Two iterations whose training destroys the model (learning rate 50): neither new version
    may replace the pre-trained one, which keeps playing and is trained on again."""
    root = tmp_path_factory.mktemp("ruined")
    # a target that answers something right: the shipped generalist answers 1, and most counts are 1
    # its own wins are its training data (self-distillation), so there is data to ruin it with
    tree = tiny_tree(tiny_models_dir, root, run__name="ruined", train__learning_rate=50.0,
                     curate__include_target_wins=True)
    tree["targets"] = [{"name": "gen", "path": str(tiny_models_dir / "generalist")}]
    ctx = open_run(FlywheelConfig.model_validate(tree))
    try:
        run_to(ctx, 2)
    finally:
        close_run(ctx)
    return ctx


def test_a_worse_version_is_not_promoted_and_the_current_one_keeps_playing(ruined_run):
    from flywheel.ground import reports

    ctx = ruined_run
    summary = json.loads(ctx.store.summary_path.read_text())
    base, first, second = summary["iterations"]
    assert base["eval"]["gen@0"]["validation"]["accuracy"] > 0  # else nothing can be worse
    for e in (first, second):
        decision = e["promotion"]["gen"]
        assert decision["promoted"] is False and decision["incumbent"] == "gen@0"
        assert decision["candidate_validation"] < decision["incumbent_validation"]
        assert e["current"] == {"gen": "gen@0"}
    # iteration 2 battled with gen@0 and trained gen@2 from it
    plan = ctx.store.plan(2)
    assert plan and all("gen@0" in (s.model_a, s.model_b) for s in plan)
    assert "from `gen@0`" in (ctx.store.model_dir("gen@2") / "README.md").read_text()
    # the allocation saw no progress: the kept version's figures (ruined ones would be a fall)
    assert [e["allocation"]["learning_rates"]["gen"] for e in (first, second)] == [0.0, 0.0]
    text = reports.progress_table(summary)
    assert text.count("not promoted: gen@0 stays") == 2 and text.endswith("in use: gen@0")
    rows, _ = reports.category_rows(summary)
    assert [r["model"] for r in rows[:3]] == ["gen@0", "gen@1 (not promoted)", "gen@2 (not promoted)"]
    assert reports.in_use_eval(summary, second, "gen") == base["eval"]["gen@0"]


def test_replay_trains_on_every_earlier_iterations_sft_rows(ruined_run):
    from flywheel.learning.curation import load_dataset_dir

    ctx = ruined_run
    rows = {k: sorted(load_dataset_dir(ctx.store.dataset_dir(k, "sft"))["completion"]) for k in (1, 2)}
    assert rows[1] and rows[2]
    with_replay = training_data(ctx, 2, "sft", "gen")
    assert sorted(with_replay["completion"]) == sorted(rows[1] + rows[2])
    ctx.cfg = ctx.cfg.model_copy(update={"train": ctx.cfg.train.model_copy(update={"replay": False})})
    assert sorted(training_data(ctx, 2, "sft", "gen")["completion"]) == rows[2]
