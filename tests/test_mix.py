"""train.gap_mix: SFT rows trained on more often where the target is furthest below its best
opponent on the validation split (flywheel/learning/mix.py, flywheel/stages/train_data.py); and
select.gap_spread, the battles spread by the same gaps (flywheel/stages/train_weights.py)."""

import json
import math
import random

import pytest
import yaml
from datasets import Dataset

from flywheel.learning.mix import combine, copies, gap_weights
from flywheel.stages.train_data import weighted


def test_a_row_is_weighted_by_its_categorys_gap_to_the_best_opponent():
    target = {"add": 0.2, "sub": 0.3, "rev": 0.9, "count": 0.4}
    opponents = [{"add": 0.55, "sub": 0.5, "rev": 0.6}, {"add": 0.3, "sub": 0.75, "rev": 0.8}]
    # add: 1 + 2 x 0.35; sub: the better opponent there (0.75), not the better one overall; rev leads: 1;
    # count: no opponent scored there
    assert gap_weights(target, opponents, 2.0) == {"add": 1.7, "sub": 1.9, "rev": 1.0}
    assert gap_weights(target, opponents, 0.0) == {"add": 1.0, "sub": 1.0, "rev": 1.0}
    assert gap_weights(target, [], 2.0) == {}


def test_a_rows_copies_average_its_weight_with_one_draw_per_row():
    rng = random.Random(0)
    got = [copies(2.25, rng) for _ in range(20_000)]
    assert set(got) == {2, 3} and sum(got) / len(got) == pytest.approx(2.25, abs=0.02)
    # a weight under 1 keeps the row with that chance; whatever the weight, one draw: the next row's
    # copies do not depend on this one's weight
    a, b = random.Random(5), random.Random(5)
    copies(0.3, a), copies(3.0, b)
    assert a.random() == b.random()
    assert [copies(1.0, rng) for _ in range(100)] == [1] * 100


def test_weights_combine_by_category():
    assert combine(None, None) is None
    assert combine({"sub": 0.5, "rev": 0.0}, None) == {"sub": 0.5, "rev": 0.0}
    assert combine({"sub": 0.5, "rev": 0.0}, {"sub": 1.8, "add": 1.5}) == {"add": 1.5, "rev": 0.0, "sub": 0.9}


def test_weighted_rows_repeat_by_category_in_their_order():
    data = Dataset.from_list([{"prompt": f"p{i}", "category": c} for i, c in enumerate(["sub", "rev", None, "sub"])])
    rows = weighted(data, {"sub": 2.0, "": 0.0}, random.Random(0))["prompt"]
    assert rows == ["p0", "p0", "p1", "p3", "p3"]  # rev: not weighed, once; no category: the weight of ""
    assert weighted(data, {}, random.Random(0))["prompt"] == ["p0", "p1", "p2", "p3"]


def test_a_run_with_the_gap_mix_trains_more_on_the_categories_its_target_trails(tiny_models_dir, tmp_path):
    """A tiny run with train.gap_mix 2: the train stage records each category's weight, which is 1 +
    2 x the best opponent's validation accuracy there minus student@0's (at least 1), and trains on
    the curated rows repeated by it."""
    from flywheel.learning.curation import load_dataset_dir
    from tests.conftest import gaps_run

    run, own, best = gaps_run(tiny_models_dir, tmp_path, "gap", train__gap_mix=2.0)
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    mix = trained["mix"]
    assert mix == {c: pytest.approx(1 + 2 * max(0.0, best[c] - own[c]), abs=1e-4) for c in own}
    assert max(mix.values()) > 1.5  # the tiny student trails an opponent somewhere
    curated = load_dataset_dir(run / "iter-0001" / "sft")
    # each row floor(w) or ceil(w) times, drawn from the run's seed and the iteration (what a resumed run draws)
    seed = yaml.safe_load((run / "config.yaml").read_text())["run"]["seed"]
    assert trained["examples"] == len(weighted(curated, mix, random.Random(seed + 7919)))
    assert sum(math.floor(mix[c]) for c in curated["category"]) <= trained["examples"]
    assert trained["examples"] <= sum(math.ceil(mix[c]) for c in curated["category"])


def test_weights_under_one_keep_the_rows_the_keep_chances_always_kept():
    """train.rl.thin_known's chances, now weights under 1, keep exactly the rows its old rule kept
    (a row kept where one draw falls under its category's chance), so its runs are unchanged."""
    cats = ["sub", "rev", None, "add", "rev", "sort"] * 50
    data = Dataset.from_list([{"prompt": f"p{i}", "category": c} for i, c in enumerate(cats)])
    keep = {"sub": 0.37, "rev": 0.81, "": 0.5, "sort": 1.0}
    old = random.Random(11)
    kept = [f"p{i}" for i, c in enumerate(cats) if old.random() < keep.get(str(c or ""), 1.0)]
    assert weighted(data, keep, random.Random(11))["prompt"] == kept
    assert 0 < len(kept) < len(cats)


@pytest.mark.parametrize("method", ["sft", "sft+expert"])
def test_a_resumed_phase_trains_on_the_weights_its_killed_run_kept(tiny_models_dir, tmp_path, method):
    """The weights are kept in the train state before the phase trains: a run killed while training
    resumes with them (here, weights no validation figure would give), not with weights computed
    again from opponents' answers that may have changed since (a failed call asked again). With
    expert iteration, the target's own passed answers are repeated by them too, and the picking of
    them (train.rl.gap_pick) resumes with its kept weights as well."""
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.atomic import atomic_write_json
    from flywheel.learning.curation import load_dataset_dir
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.iteration import run_baseline, run_to
    from tests.conftest import tiny_tree

    rl = {"generations": 4, "reward": "tests.test_onpolicy:odd_crc", "gap_pick": 2.0 if method != "sft" else 0.0}
    cfg = FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, tmp_path, run__name="kept", run__iterations=1,
                                                  train__gap_mix=2.0, train__method=method, train__rl=rl))
    kept = {c: 3.0 for c in ("add", "sub", "mul", "rev", "sort", "count")}
    ctx = open_run(cfg)
    try:
        run_baseline(ctx)
        state = ctx.store.train_state_dir(1, "student")
        state.mkdir(parents=True)
        atomic_write_json(state / "mix.json", kept)
        atomic_write_json(state / "pick.json", {"sub": 5.0})
        run_to(ctx, 1)
    finally:
        close_run(ctx)
    run = tmp_path / "kept"
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    curated = load_dataset_dir(run / "iter-0001" / "sft")
    assert trained["mix"] == kept and not state.exists()  # removed once the version is saved
    own = 0
    if method == "sft+expert":  # each distinct passed answer of a group whose answers differ
        groups: dict[str, list[dict]] = {}
        for r in load_dataset_dir(run / "iter-0001" / "rollouts").to_list():
            groups.setdefault(r["prompt_id"], []).append(r)
        own = sum(len({r["completion"] for r in g if r["reward"] == 1.0}) for g in groups.values()
                  if len({r["reward"] for r in g}) > 1)
        assert own and trained["picks"] == {"sub": 5.0}
    assert len(curated) and trained["examples"] == 3 * (len(curated) + own)


def _per_cell(run, k: int = 1, rnd: int = 1) -> dict[str, int]:
    from flywheel.ground.store import RunStore

    arms = [s.arm for s in RunStore(run).plan(k, rnd) if s.phase == "train"]
    return {a: arms.count(a) for a in sorted(set(arms))}


def test_a_run_with_gap_spread_spreads_its_battles_by_each_categorys_gap(tiny_models_dir, tmp_path):
    """select.gap_spread 3, the whole round spread (prompt_floor 1): iteration 1 keeps each
    category's weight, 1 + 3 x (the best opponent's validation accuracy there - student@0's, at
    least 0), and each cell gets its share of the round's 72 battles by it."""
    from tests.conftest import gaps_run

    run, own, best = gaps_run(tiny_models_dir, tmp_path, "spread", select__gap_spread=3.0, select__prompt_floor=1.0,
                              select__rounds=1, select__battles_per_iteration=72)
    kept = json.loads((run / "iter-0001" / "spread-student.json").read_text())
    assert kept == {c: pytest.approx(1 + 3 * max(0.0, best[c] - own[c]), abs=1e-4) for c in own}
    assert max(kept.values()) > 1.5 and min(kept.values()) < max(kept.values())
    counts = _per_cell(run)
    total = sum(kept[a.split("/")[0]] for a in counts)
    assert len(counts) == 18 and sum(counts.values()) == 72
    for arm, n in counts.items():
        quota = 72 * kept[arm.split("/")[0]] / total
        assert math.floor(quota) <= n <= math.ceil(quota), (arm, n, quota)


def test_a_resumed_round_spreads_its_battles_by_the_weights_its_run_kept(tiny_models_dir, tmp_path):
    """The weights are kept before the first round is planned: a run that finds them (killed after
    they were weighed) plans every round by them, not by weights computed again."""
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.atomic import atomic_write_json
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.iteration import run_baseline, run_to
    from tests.conftest import tiny_tree

    cfg = FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, tmp_path, run__name="kept", run__iterations=1,
                                                  select__gap_spread=3.0, select__prompt_floor=1.0,
                                                  select__rounds=1, select__battles_per_iteration=72))
    ctx = open_run(cfg)
    try:
        run_baseline(ctx)
        atomic_write_json(ctx.store.spread_path(1, "student"), {"sub": 7.0})
        run_to(ctx, 1)
    finally:
        close_run(ctx)
    counts = _per_cell(tmp_path / "kept")
    # sub's three cells weigh 7 each, the other fifteen 1: 72 x 7 / 36 = 14 each, 2 each for the rest
    assert counts == {a: 14 if a.startswith("sub/") else 2 for a in counts} and len(counts) == 18
