import json

import numpy as np
import pytest

from flywheel.config.loading import ConfigError, load_config
from flywheel.maths.bandits import POLICIES, Bandit, pfsp_weights


def play(bandit, means, rounds, k=8, seed=0, switch_at=None, switched=None):
    rng = np.random.default_rng(seed)
    picks = []
    for r in range(rounds):
        m = switched if switch_at is not None and r >= switch_at else means
        arms = bandit.select(k, rng)
        bandit.update(arms, rng.random(len(arms)) < np.asarray(m)[arms])
        picks.append(arms)
    return np.concatenate(picks)


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "uniform"])
def test_every_policy_settles_on_the_best_arm(policy):
    means = [0.2, 0.3, 0.8, 0.4, 0.25]
    picks = play(Bandit([f"a{i}" for i in range(5)], policy, exploration=1.0), means, rounds=150)
    late = picks[-400:]
    assert np.mean(late == 2) > 0.6, (policy, np.bincount(late, minlength=5))


def test_uniform_spreads_evenly():
    picks = play(Bandit(["a", "b", "c"], "uniform"), [0.1, 0.9, 0.5], rounds=100)
    assert np.all(np.abs(np.bincount(picks) / len(picks) - 1 / 3) < 0.05)


@pytest.mark.parametrize("policy, kw", [("thompson", {"discount": 0.8}), ("gaussian", {"discount": 0.8}),
                                        ("ucb", {"discount": 0.8}), ("ucb", {"window": 5})])
@pytest.mark.parametrize("seed", [1, 2])
def test_forgetting_follows_a_switch_of_the_best_arm(policy, kw, seed):
    before, after = [0.9, 0.5, 0.1], [0.1, 0.5, 0.9]
    forgetful = play(Bandit(["a", "b", "c"], policy, **kw), before, 400, switch_at=300, switched=after, seed=seed)
    soon = slice(8 * 300, 8 * 330)  # the 30 rounds right after the switch
    assert np.mean(forgetful[soon] == 2) > 0.55
    if policy != "ucb":  # UCB's optimism re-explores anyway; posterior sampling without forgetting does not
        stubborn = play(Bandit(["a", "b", "c"], policy), before, 400, switch_at=300, switched=after, seed=seed)
        assert np.mean(stubborn[soon] == 2) < 0.2


@pytest.mark.parametrize("policy", POLICIES)
def test_state_round_trips_through_json(policy):
    b = Bandit(["x", "y", "z"], policy, discount=0.9, window=3)
    play(b, [0.2, 0.5, 0.7], rounds=7)
    again = Bandit.from_state(json.loads(json.dumps(b.state())))
    rng1, rng2 = np.random.default_rng(4), np.random.default_rng(4)
    assert again.state() == b.state()
    assert np.array_equal(again.select(16, rng1), b.select(16, rng2))


def test_batch_ucb_spreads_a_batch_over_untried_arms():
    b = Bandit([str(i) for i in range(6)], "ucb")
    assert sorted(b.select(6, np.random.default_rng(0)).tolist()) == list(range(6))


def test_invalid_bandit_settings_fail_with_the_field_named():
    with pytest.raises(ConfigError, match="select.discount"):
        load_config(None, ["select.discount=-0.5"])
    with pytest.raises(ConfigError, match="select.policy"):
        load_config(None, ["select.policy=softmax"])
    with pytest.raises(ConfigError, match="select.rounds"):
        load_config(None, ["select.rounds=0"])
    with pytest.raises(ValueError, match="unknown bandit policy"):
        Bandit(["a"], "softmax")


def test_pfsp_weights():
    w = pfsp_weights(np.array([0.9, 0.5, 0.1]), "hard", 2)
    assert np.all(np.diff(w) > 0) and abs(w.sum() - 1) < 1e-12
    v = pfsp_weights(np.array([0.0, 0.5, 1.0]), "variance")
    assert v[1] == 1.0
    assert np.allclose(pfsp_weights(np.array([1.0, 1.0]), "hard"), [0.5, 0.5])


def test_yield_reward_counts_only_new_training_examples():
    from flywheel.arena.bandit_rewards import feedback
    from flywheel.ground.records import Battle, JudgedBattle, Judgment

    def b(i, prompt, winner):
        return Battle(str(i), 1, "train", "p", prompt, "add", 1, "2", "student@0", "calc", "x", "2", None, "add/L1"), \
            Judgment(str(i), "v", winner)

    pairs = [b(1, "1+1=", "model_b"), b(2, "1+1=", "model_b"), b(3, "2+0=", "tie"), b(4, "0+2=", "model_b")]
    got = feedback("yield", [JudgedBattle(x, j) for x, j in pairs], "student", {}, yielded={"0+2="})
    assert [r for _, _, r in got] == [1.0, 0.0, 0.0, 0.0]


def test_bandit_state_files_of_targets_with_similar_names_stay_apart(tmp_path):
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.atomic import atomic_write_json
    from flywheel.ground.store import RunStore
    from flywheel.run.context import Context
    from flywheel.run.selectors import load_selector

    cfg = FlywheelConfig.model_validate({"targets": [{"name": "x"}, {"name": "y-x"}]})
    ctx = Context(cfg, RunStore(tmp_path))
    other = load_selector(ctx, "y-x", 1, 1)
    other.prompt.update([0, 0], [1.0, 1.0])
    atomic_write_json(ctx.store.bandit_path("y-x", 1, 1), other.state())
    assert load_selector(ctx, "x", 1, 2).prompt.rounds == 0
    assert load_selector(ctx, "y-x", 1, 2).prompt.rounds == 1


@pytest.mark.parametrize("floor", [0.0, 0.5, 1.0])
def test_prompt_floor_spreads_that_share_of_a_round_evenly_over_cells(floor):
    """A bandit sure that one cell is best still sends ``prompt_floor`` of each round evenly to
    every cell (the rest follows the bandit)."""
    from flywheel.arena.selection import Selector
    from flywheel.config.tree import SelectConfig

    cfg = SelectConfig(prompt_floor=floor)
    cells = [f"c{i}" for i in range(6)]
    sel = Selector.new(cfg, cells, ["o1", "o2"])
    sel.prompt.update([0] * 200 + [1, 2, 3, 4, 5] * 40, [1.0] * 200 + [0.0] * 200)
    picks = [c for c, _ in sel.choose(cfg, 120, np.random.default_rng(0), {})]
    counts = {c: picks.count(c) for c in cells}
    even = round(120 * floor) // 6
    assert all(counts[c] == even for c in cells[1:]), counts  # the bandit never picks these
    assert counts["c0"] == 120 - 5 * even


def test_gap_spread_shares_the_spread_battles_by_category_weight_and_leaves_the_bandits_as_they_were():
    """``select.gap_spread``: the floor's share goes to each cell by its category's weight (a category
    without a weight counts 1; an evolved arm has its category's); the bandit's share is as large
    as it would have been."""
    from flywheel.arena.selection import Selector, weighted_spread
    from flywheel.config.tree import SelectConfig

    cfg = SelectConfig(prompt_floor=0.5)
    cells = ["add/L1", "add/L2", "rev/L1", "rev/L2", "count/L1", "evolved/add/L1"]
    sel = Selector.new(cfg, cells, ["o1", "o2"])
    sel.prompt.update([2] * 200 + [0, 1, 3, 4, 5] * 40, [1.0] * 200 + [0.0] * 200)  # the bandit: rev/L1
    picks = [c for c, _ in sel.choose(cfg, 72, np.random.default_rng(0), {}, {"add": 3.0, "rev": 1.0})]
    counts = {c: picks.count(c) for c in cells}
    # 36 spread, weights 3, 3, 1, 1, 1 (count: none given), 3 of 12; the bandit's 36 all to rev/L1
    assert counts == {"add/L1": 9, "add/L2": 9, "evolved/add/L1": 9, "rev/L1": 3 + 36, "rev/L2": 3, "count/L1": 3}
    even = [c for c, _ in sel.choose(cfg, 72, np.random.default_rng(0), {}, {"add": 1.0})]
    assert {c: even.count(c) for c in cells} == {**{c: 6 for c in cells}, "rev/L1": 42}  # weight 1: evenly
    # what is left after the whole parts goes by the fractions, whatever a cell's place: of 10,
    # rev/L1's quota 6.67 (7 or 6 battles, 7 two times in three), and of 10 over 18 cells of weight 1
    # each cell has 0 or 1, as often as the others
    rev = [weighted_spread(["add/L1", "rev/L1"], 10, {"add": 1.0, "rev": 2.0}, np.random.default_rng(i)).count("rev/L1")
           for i in range(3000)]
    assert set(rev) == {6, 7} and np.mean(rev) == pytest.approx(20 / 3, abs=0.03)
    many = [f"c{i}/L1" for i in range(18)]
    got = [weighted_spread(many, 10, {}, np.random.default_rng(i)) for i in range(3000)]
    assert all(len(g) == len(set(g)) == 10 for g in got)
    assert all(sum(c in g for g in got) / 3000 == pytest.approx(10 / 18, abs=0.04) for c in many)


def test_gini_is_zero_for_equal_values_and_grows_with_inequality():
    from flywheel.maths.bandits import gini

    assert gini([0.4] * 6) == 0.0 and gini([0.0] * 6) == 0.0
    assert gini([1.0, 0, 0, 0]) == pytest.approx(0.75)  # one of n holds everything: (n - 1) / n
    assert gini([0.5, 0.5, 0, 0]) == pytest.approx(0.5)
    assert 0 < gini([0.3, 0.4, 0.5]) < gini([0.1, 0.4, 0.9])


def test_auto_prompt_floor_is_even_where_cells_look_alike_and_small_where_few_stand_out():
    """``select.prompt_floor: auto`` spreads everything evenly before any reward, nearly everything
    where the cells' yields are alike, and leaves most to the bandit where most cells yield nothing."""
    from flywheel.arena.selection import Selector, prompt_floor
    from flywheel.config.tree import SelectConfig

    cfg = SelectConfig(prompt_floor="auto")
    cells = [f"c{i}" for i in range(10)]
    fresh = Selector.new(cfg, cells, ["o1"])
    assert prompt_floor(cfg, fresh.prompt) == 1.0
    picks = [c for c, _ in fresh.choose(cfg, 100, np.random.default_rng(0), {})]
    assert all(picks.count(c) == 10 for c in cells)  # all even: no bandit pick

    alike = Selector.new(cfg, cells, ["o1"])
    rng = np.random.default_rng(1)
    alike.prompt.update(np.repeat(np.arange(10), 40), rng.random(400) < 0.5)
    skewed = Selector.new(cfg, cells, ["o1"])
    skewed.prompt.update(np.repeat(np.arange(10), 40), np.repeat([1.0] * 3 + [0.0] * 7, 40) * (rng.random(400) < 0.6))
    assert prompt_floor(cfg, alike.prompt) > 0.85  # sampling noise alone makes 40 pulls a cell unequal
    assert prompt_floor(cfg, skewed.prompt) < 0.4
    counts = np.bincount([int(c[1:]) for c, _ in skewed.choose(cfg, 200, rng, {})], minlength=10)
    assert counts[:3].sum() > 0.7 * 200  # the bandit's share goes to the cells that yield
    assert SelectConfig(prompt_floor=0.5).prompt_floor == 0.5


@pytest.mark.parametrize("value", ["sometimes", "1.5", "-0.1"])
def test_prompt_floor_is_a_share_or_auto(value):
    with pytest.raises(ConfigError, match="prompt_floor"):
        load_config(None, [f"select.prompt_floor={value}"])
    assert load_config(None, ["select.prompt_floor=auto"]).select.prompt_floor == "auto"
