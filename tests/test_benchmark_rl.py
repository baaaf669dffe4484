"""benchmarks/rl.py: every arm it offers is a config the flywheel accepts, from the embedded
default and from a recipe, and differs from sft only as it says."""

import math
from pathlib import Path

import pytest

from benchmarks.rl import GAP_MIX, GAP_PICK, arms, ratio_arm, run_overrides
from flywheel.config.loading import load_config


@pytest.mark.parametrize("recipe", [None, Path("flows/recipes/smollm2_rl.yaml"), Path("flows/recipes/few_battles.yaml")])
def test_every_arm_loads(recipe):
    every = arms(4 if recipe is None else load_config(recipe, []).run.iterations, recipe=recipe is not None)
    configs = {arm: load_config(recipe, overrides) for arm, overrides in every.items()}
    assert configs["sft"].train.methods(configs["sft"].run.iterations) == {"sft"}
    assert configs["sft-gap"].train.gap_mix == configs["rl-gap"].train.gap_mix == GAP_MIX
    assert configs["sft"].train.gap_mix == configs["rl"].train.gap_mix == 0
    assert configs["rl-gap"].train.schedule == configs["rl-pick"].train.schedule == configs["rl"].train.schedule
    assert configs["rl-pick"].train.rl.gap_pick == GAP_PICK and configs["rl"].train.rl.gap_pick == 0
    assert configs["sft-gap"].train.schedule == configs["sft"].train.schedule


def test_a_set_override_changes_a_field_the_arm_sets_and_every_arm_runs_its_steps_and_world():
    every = arms()
    world = ["world.tasks.seed=5"]
    cfg = load_config(None, run_overrides(every["expert-train"], ["train.rl.generations=16"], 300, world, "x"))
    assert cfg.train.rl.generations == 16 and cfg.train.rl.prompts == "train"
    assert cfg.train.steps == 300 and cfg.world.tasks.seed == 5 and cfg.run.name == "x"
    sft = load_config(None, run_overrides(every["sft"], ["train.rl.generations=16"], 300, world, "y"))
    assert sft.train.methods(sft.run.iterations) == {"sft"}


def test_the_ratio_compares_the_rl_arm_else_the_last_arm_named_with_sft():
    assert ratio_arm(["sft", "rl"]) == ratio_arm(["rl", "sft", "grpo"]) == "rl"
    assert ratio_arm(["sft", "sft-gap", "rl-gap"]) == "rl-gap"
    assert ratio_arm(["grpo", "grpo-shuffled"]) is None and ratio_arm(["sft"]) is None


def test_pass_at_g_is_the_chance_that_g_of_the_sampled_answers_hold_a_right_one():
    from benchmarks.rl_diagnose import pass_at

    assert pass_at(8, 0, 4) == 0.0 and pass_at(8, 5, 4) == 1.0  # 5 right of 8: any 4 hold one
    assert pass_at(8, 1, 4) == pytest.approx(0.5)  # the one right answer is among the 4 drawn half the time
    assert pass_at(8, 2, 4) == pytest.approx(1 - 15 / 70)
    assert pass_at(8, 3, 8) == 1.0


def test_the_diagnosis_samples_as_the_recipe_says_and_stops_after_the_headroom(tmp_path, tiny_models_dir):
    import subprocess
    import sys

    import yaml

    from tests.conftest import TINY_TASKS

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"train": {"rl": {"generations": 2, "temperature": 0.5}}}))
    sets = [x for k, v in TINY_TASKS.items() for x in ("--set", f"world.tasks.{k}={v}")]
    out = subprocess.run([sys.executable, "-m", "benchmarks.rl_diagnose", "--model", str(tiny_models_dir / "student"),
                          "--recipe", str(recipe), "--steps", "0", "--k", "4", *sets],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "k=4 at temperature 0.5" in out.stdout  # the recipe's sampling, not the embedded default's 1.0
    assert "pass@2 (train.rl.generations), pass@4" in out.stdout
    cells = [line.split() for line in out.stdout.splitlines() if line.startswith("  ")]
    assert [c[0] for c in cells][:1] == ["add/1"] and any(c[0] == "all" for c in cells)
    assert all(float(c[4]) <= float(c[5]) for c in cells)  # pass@2 never above pass@4
    assert "learning curve" not in out.stdout  # --steps 0: no phase


def test_a_tuning_choice_reads_the_validation_accuracy_of_the_version_kept_not_of_the_newest():
    from benchmarks.rl import validation_accuracy

    summary = {"iterations": [
        {"iteration": 1, "current": {"s": "s@1"}, "eval": {"s@1": {"accuracy": 0.5, "validation": {"accuracy": 0.4}}}},
        {"iteration": 2, "current": {"s": "s@1"}, "eval": {"s@2": {"accuracy": 0.6, "validation": {"accuracy": 0.3}}}}]}
    assert validation_accuracy(summary, "s") == 0.4  # s@2 was not promoted
    summary["iterations"][1]["current"] = {"s": "s@2"}
    assert validation_accuracy(summary, "s") == 0.3


def test_each_runs_summary_is_kept_under_its_runs_name_for_a_reader_to_check(tmp_path):
    import json

    from benchmarks.rl import keep_summaries

    runs = {"sft-120-t1234-w0-s0": {"iterations": [{"iteration": 0}]}, "rl-120-t1234-w0-s1": {"iterations": []}}
    keep_summaries(tmp_path / "kept", runs)
    kept = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "kept").glob("*.json")}
    assert kept == runs


def test_a_share_of_exactly_nine_tenths_reaches_the_goal_though_the_summary_rounds_it_under():
    from benchmarks.efficacy import meets, reaches

    assert round(9 / 60, 4) / round(10 / 60, 4) < 0.9 and reaches(round(9 / 60, 4) / round(10 / 60, 4))
    assert reaches(round(36 / 60, 4) / round(40 / 60, 4)) and reaches(round(18 / 30, 4) / round(20 / 30, 4))
    assert not reaches(round(53 / 60, 4) / round(59 / 60, 4))  # the nearest share under 0.90 on 60 prompts
    assert not reaches(float("nan")) and meets("worst_category", 0.8998) and not meets("worst_category", 0.8983)


def test_more_than_half_of_the_runs_is_the_poisson_binomial_tail():
    from benchmarks.goal_chance import more_than_half

    assert more_than_half([1.0, 1.0, 0.0]) == 1.0 and more_than_half([1.0, 0.0]) == 0.0  # 1 of 2 is not more
    assert more_than_half([0.5, 0.5]) == pytest.approx(0.25)
    assert more_than_half([0.5] * 3) == pytest.approx(0.5)
    assert more_than_half([0.3] * 6) == pytest.approx(sum(
        math.comb(6, k) * 0.3**k * 0.7 ** (6 - k) for k in (4, 5, 6)))


def test_a_model_as_good_as_the_best_opponent_passes_by_the_binomial_tail_of_each_learnable_category():
    """The chance is the product over the learnable categories (the best opponent 0.05 above the
    commonest answer) of the binomial chance of scoring at least 0.90 of the best opponent's count
    (its accuracy as the summary rounds it, times the prompts); a category only a guess reaches
    counts for nothing, and with none learnable there is no chance to read (the goal counts a miss)."""
    from benchmarks.efficacy import chance_at_least
    from benchmarks.goal_chance import equal_model_passes

    def ev(add, count, rev):
        return {"accuracy_by_category": {"add": add, "count": count, "rev": rev}}

    def summary(opponents):
        return {"targets": ["s"], "iterations": [{"iteration": 0, "current": {"s": "s@0"},
                                                  "eval": {"s@0": ev(0.0, 0.3, 0.0)}, "opponents_eval": opponents}]}

    run = summary({"calc": ev(0.1667, 0.1, 0.0), "scribe": ev(0.0, 0.33, 0.5)})
    counts = {"add": 60, "count": 30, "rev": 10}
    got = equal_model_passes(run, "s", {"add": 0.0, "count": 0.3, "rev": 0.0}, counts, "eval")
    # add: calc's 10 of 60, so at least 9; rev: scribe's 5 of 10, so at least 5; count: 0.33 is a guess
    assert got == pytest.approx(chance_at_least(60, 0.1667, 9 / 60) * chance_at_least(10, 0.5, 5 / 10))
    assert chance_at_least(60, 0.1667, 9 / 60) == pytest.approx(
        1 - sum(math.comb(60, k) * 0.1667**k * 0.8333 ** (60 - k) for k in range(9)))
    twice = equal_model_passes(run, "s", {"add": 0.0, "count": 0.3, "rev": 0.0}, counts, "eval", scale=2.0)
    assert twice == pytest.approx(chance_at_least(60, 0.3334, 9 / 60))  # rev: 1.0 passes surely
    assert equal_model_passes(run, "s", {}, counts, "validation") is None  # no validation figures
    with pytest.raises(ValueError, match="categories add have no eval prompts"):  # a world made otherwise
        equal_model_passes(run, "s", {"add": 0.0, "count": 0.3, "rev": 0.0}, {"rev": 10}, "eval")
    guessed = summary({"calc": ev(0.02, 0.1, 0.0), "scribe": ev(0.0, 0.33, 0.0)})
    assert equal_model_passes(guessed, "s", {"add": 0.0, "count": 0.3, "rev": 0.0}, counts, "eval") is None


def test_a_short_run_prints_the_two_goals_read_on_validation_from_the_summaries_it_keeps(tmp_path, cli_env):
    """``python -m benchmarks.rl`` as a user runs it, on the tiny suite and models, `sft` against the
    few-battles recipe: each arm's accuracy, the paired gain and the own answers the recipe sampled
    are those of the summaries it keeps, and the line a tuning rule reads (the two goals on the
    validation split) counts what the kept summary holds."""
    import json
    import subprocess
    import sys

    import yaml

    from benchmarks.efficacy import figures
    from benchmarks.rl import guess_by_category, own_answers, two_goals
    from tests.conftest import TINY_MODELS, TINY_TASKS

    models = tmp_path / "models"
    sets = ["run.iterations=1", "train.batch_size=8", "select.battles_per_iteration=48",
            *(f"world.tasks.{k}={v}" for k, v in TINY_TASKS.items()),
            "world.models=" + yaml.safe_dump(TINY_MODELS, default_flow_style=True).strip()]
    out = subprocess.run([sys.executable, "-m", "benchmarks.rl", "--recipe", "flows/recipes/few_battles.yaml",
                          "--arms", "sft,rl", "--budgets", "4", "--seeds", "0",
                          "--jobs", "1", "--models-root", str(models), "--summaries", str(tmp_path / "kept"),
                          *(x for s in sets for x in ("--set", s))],
                         env=cli_env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    [kept] = (tmp_path / "kept").glob("sft-4-t1234-w0-s0.json")
    summary = json.loads(kept.read_text())
    rl = json.loads((tmp_path / "kept" / "rl-4-t1234-w0-s0.json").read_text())
    lines = out.stdout.splitlines()
    acc = {arm: figures(x, "student")["accuracy"] for arm, x in (("sft", summary), ("rl", rl))}
    for arm in acc:
        assert f"{arm:<4} final eval accuracy {acc[arm]:.3f} +- 0.000 over 1 runs; median wall time" in out.stdout
    assert f"gain of rl over sft: {acc['rl'] - acc['sft']:+.3f} +- 0.000 (95% CI" in out.stdout
    sampled = own_answers(rl, "student", 4)
    assert "sampled" in sampled and "per optimizer step" in sampled and own_answers(summary, "student", 4) == ""
    assert [x for x in lines if ", rl: accuracy " in x][0].endswith(sampled)
    world = [*sets, "world.tasks.seed=1234", "world.seed=0", f"world.models_dir={models / 'suite1234-pretraining0'}"]
    share, kept_all = two_goals(summary, "student", guess_by_category(world, "validation"), "validation")
    [line] = [x for x in out.stdout.splitlines() if x.startswith("sft on the validation split")]
    assert f"category on {int(share >= 0.9)} of 1 runs; forgets nothing on {int(kept_all)}; both on " \
           f"{int(share >= 0.9 and kept_all)}" in line
    # the commonest-answer guess is the run's world's (its --set pool sizes), not the default world's
    printed = [", ".join(f"{c} {g:.3f}" for c, g in sorted(guess_by_category(w).items()))
               for w in (world, world[len(sets):])]
    assert printed[0] != printed[1]
    [line] = [x for x in out.stdout.splitlines() if x.startswith("the commonest answer of the train split")]
    assert line.endswith(": " + printed[0])
    # what a model exactly as good as the best opponent would score on the goal, from the same summary
    from benchmarks.goal_chance import chance_line, equal_model_passes, prompts_by_category

    for split in ("eval", "validation"):
        chance = equal_model_passes(summary, "student", guess_by_category(world, split),
                                    prompts_by_category(world, split), split)
        lines = [x for x in out.stdout.splitlines() if f"reaches 0.90 of it everywhere on {split} " in x]
        if chance is None:  # no learnable category in the tiny world's split: nothing to read
            assert lines == []
        else:
            assert lines == [chance_line(split, [chance])] and 0 < chance < 1, (lines, chance)
    assert any(f"everywhere on {split} " in x for x in out.stdout.splitlines() for split in ("eval", "validation"))
    # the same from the kept summaries, as a reader runs it afterwards; a folder without them: one error line
    goal = [sys.executable, "-m", "benchmarks.goal_chance", str(tmp_path / "kept")]
    again = subprocess.run([*goal, *(x for s in sets for x in ("--set", s))], env=cli_env, capture_output=True,
                           text=True, timeout=120, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.splitlines() == ["train.steps 4: " + x for x in out.stdout.splitlines()
                                         if "reaches 0.90 of it everywhere on" in x]
    empty = subprocess.run([*goal[:-1], str(tmp_path)], env=cli_env, capture_output=True, text=True, timeout=120)
    assert empty.returncode == 2 and empty.stderr.startswith("error: no <arm>"), empty.stderr