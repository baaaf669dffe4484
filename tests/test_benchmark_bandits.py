"""The bandit benchmark runs what it reports: pinned settings, --quick, its scenarios' pools, the
rewards and arm sets it compares (wired through the config into a real Selector), its report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import benchmarks.bandits as bench
from benchmarks.bandits import FRACTIONS, QUICK, VARIANTS, bench_overrides, scenario_config
from benchmarks.worlds import World
from flywheel.arena.selection import Selector
from flywheel.config.loading import load_config
from flywheel.config.tree import SelectConfig
from flywheel.worlds.tasks import meaning
from flywheel.worlds.world import world_pools


def _get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def test_the_default_variant_pins_the_embedded_default_as_it_is_today():
    """If the embedded default changes, this fails: re-measure the bandit figures on the new
    default (and keep the old pins as a named variant), rather than let them drift apart."""
    default = load_config(None, [])
    for pin in VARIANTS["default"]:
        key, _ = pin.split("=", 1)
        assert _get(load_config(None, [pin]), key) == _get(default, key), pin


def test_pins_world_and_quick_reach_the_run_config_in_that_order(tmp_path):
    world = World(7, 3, tmp_path / "models")
    full = load_config(None, bench_overrides("before-self-distillation", world, ["train.steps=500"], quick=False))
    assert (full.run.iterations, full.select.battles_per_iteration, full.train.steps) == (3, 2000, 500)  # --set wins
    assert full.curate.include_target_wins is False and full.evaluate.promotion == "always"
    assert (full.world.tasks.seed, full.world.seed, full.world.models_dir) == (7, 3, world.models_dir)
    quick = load_config(None, bench_overrides("default", world, ["train.steps=500"], quick=True))
    assert [f"{k}={_get(quick, k)}" for k in (q.split("=")[0] for q in QUICK)] == QUICK  # nothing undoes --quick
    assert quick.rating.bootstrap_rounds == 0 and quick.train.weight_decay == 1.0
    assert max(FRACTIONS) / min(FRACTIONS) >= 8  # a span that can show a ratio of 1.5 and more


def test_the_realistic_pool_is_a_quarter_out_of_reach_with_twins_of_train_prompts_only(tmp_path):
    cfg, what = scenario_config("realistic", ["world.tasks.train_per_cell=30", "world.tasks.val_per_cell=4",
                                              "world.tasks.eval_per_cell=4"], tmp_path)
    rows = [json.loads(line) for line in Path(cfg.world.prompt_pools[0].path).read_text().splitlines()]
    hard = [r for r in rows if r["level"] > 3]
    cells = {(r["category"], r["level"]) for r in hard}
    assert len(cells) == 6 and len(cells) / (len(cells) + 18) == 0.25 and "25%" in what
    small = ["world.tasks.train_per_cell=30", "world.tasks.val_per_cell=4", "world.tasks.eval_per_cell=4"]
    suite = world_pools(load_config(None, small).world)
    train_meanings = {(p.category, meaning(p.category, p.text)) for p in suite.train}
    twins = [r for r in rows if r["level"] <= 3]
    assert twins and all((r["category"], meaning(r["category"], r["prompt"])) in train_meanings for r in twins)
    assert not {r["prompt"] for r in twins} & {p.text for split in suite for p in split}  # new texts, old meanings
    assert len(world_pools(cfg.world).train) == len(suite.train) + len(rows)  # the run keeps every pool row


def test_a_pool_prompt_that_is_a_twin_of_an_eval_prompt_is_dropped(tmp_path):
    cfg = load_config(None, [])
    splits = world_pools(cfg.world)
    held = next(p for p in splits.eval if p.category == "add" and p.text[0] != p.text[2])  # "a+b=" with a != b
    a, b = held.text.removesuffix("=").split("+")
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"prompt": f"{b}+{a}=", "reference": held.reference, "category": "add", "level": 1}) + "\n"
                    + json.dumps({"prompt": "123456+1=", "reference": "123457", "category": "add", "level": 1}) + "\n")
    tree = cfg.model_dump()
    tree["world"]["prompt_pools"] = [{"path": str(pool), "layout": "plain"}]
    got = world_pools(type(cfg).model_validate(tree).world)
    assert [p.text for p in got.train[len(splits.train):]] == ["123456+1="]


def test_rewards_and_arm_sets_become_selections_beside_uniform():
    chosen = bench.selections("thompson", ["yield", "learnability"], ["both", "prompts", "opponents", "neither"])
    assert [s.label for s in chosen] == [
        "uniform", "thompson yield both", "thompson learnability both", "thompson yield prompts",
        "thompson learnability prompts", "thompson yield opponents", "thompson learnability opponents",
        "thompson neither"]  # neither once: no reward moves a choice there
    base = load_config(None, VARIANTS["default"])
    got = {s.label: bench.with_selection(base, s).select for s in chosen}
    assert got["uniform"].policy == "uniform"
    assert [(c.reward, c.opponents, c.prompt_floor) for c in (got["thompson learnability prompts"],
                                                              got["thompson yield opponents"],
                                                              got["thompson neither"])] == [
        ("learnability", "uniform", 0.5), ("yield", "bandit", 1.0), ("yield", "uniform", 1.0)]
    # the default flags run what the benchmark ran before them: the embedded default's selection
    default = bench.selections("thompson", ["yield"], ["both"])
    assert default[0] == bench.UNIFORM and bench.with_selection(base, default[1]) == base


def test_the_floor_share_is_the_selectors_own_rounding():
    floor_share = bench.floor_share
    assert floor_share(SelectConfig(), 1200) == (0.5, 0.0)
    assert floor_share(SelectConfig(), 150) == (74 / 150, 0.0)  # rounds of 38, 38, 37, 37: 19 + 19 + 18 + 18
    assert floor_share(SelectConfig(prompt_floor=1.0, opponents="uniform"), 150) == (1.0, 1.0)
    assert floor_share(SelectConfig(policy="uniform"), 1200) == (1.0, 1.0)  # nothing learnt: all drawn evenly


def test_part2_reports_every_selection_side_by_side(monkeypatch, capsys, tmp_path):
    """The report, on made-up accuracies (no flywheel run): a curve a budget step ahead of
    uniform's needs half its battles (ratio 2), the control's ratio is 1, the last line is the
    first bandit selection's."""
    import flywheel.worlds.tinymodels as tinymodels

    curves = {"uniform": [0.1, 0.2, 0.3, 0.4], "thompson yield both": [0.2, 0.3, 0.4, 0.5],
              "thompson learnability both": [0.1, 0.2, 0.3, 0.4], "thompson neither": [0.1, 0.2, 0.3, 0.4]}

    def fake_runs(fn, calls, jobs):
        budgets = sorted({c[3] for c in calls})
        return [(curves[label][budgets.index(b)], 0.25, 0.5) for _, label, _, b, _ in calls]

    monkeypatch.setattr(bench, "run_all", fake_runs)
    monkeypatch.setattr(tinymodels, "bootstrap", lambda world: None)
    chosen = bench.selections("thompson", ["yield", "learnability"], ["both", "neither"])
    bench.part2([0, 1], [World(1234, 0, tmp_path)], chosen, "balanced", "default", [], True, 1)
    out = capsys.readouterr().out
    assert "thompson yield both: select.policy=thompson select.reward=yield select.opponents=bandit; 50.0% of " \
           "battles spread evenly over the cells by select.prompt_floor 0.5, 0% with a uniformly drawn opponent" in out
    assert "thompson neither: " in out and "100.0% of battles spread evenly" in out
    assert "ratio[thompson yield both]: 2.00" in out and "ratio[thompson learnability both]: 1.00" in out
    assert "thompson yield both - uniform at 1200 battles: +0.100 +- 0.000" in out
    assert "thompson yield both: 25.0% of train battles lost to the opponent (training data), 50.0% of a round's " \
           "battles spread evenly over the cells by the prompt floor" in out
    assert out.strip().splitlines()[-1] == "ratio: 2.00"


def test_floors_are_compared_where_the_bandit_chooses_cells():
    """``--floors 0.5,auto`` makes one selection per floor for the arm sets whose cells the bandit
    chooses; ``opponents`` and ``neither`` keep every cell even; an adaptive floor has no share
    known before the run."""
    chosen = {s.label: s for s in bench.selections("thompson", ["yield"], ["both", "opponents", "neither"],
                                                   ["0.5", "auto"])}
    assert list(chosen) == ["uniform", "thompson yield both floor=0.5", "thompson yield both floor=auto",
                            "thompson yield opponents", "thompson neither"]
    assert chosen["thompson yield both floor=auto"].overrides[-1] == "select.prompt_floor=auto"
    assert bench.floor_share(SelectConfig(prompt_floor="auto"), 150) == (None, 0.0)


def test_unknown_rewards_and_arm_sets_are_refused(monkeypatch, capsys):
    for flag, value, bad in (("--rewards", "yield,surprise", "surprise"), ("--arms", "both,all", "all"),
                             ("--floors", "0.5,most", "most")):
        monkeypatch.setattr(sys, "argv", ["bandits", flag, value, "--sim-only"])
        with pytest.raises(SystemExit):
            bench.main()
        assert f"{flag}: {bad}; known: " in capsys.readouterr().err


CELLS = [f"c{i}" for i in range(6)]
OPPONENTS = ["o0", "o1", "o2"]


@pytest.mark.parametrize("arms, bandit_cells, bandit_opponents", [
    ("both", True, True), ("prompts", True, False), ("opponents", False, True), ("neither", False, False)])
def test_each_arm_set_lets_the_bandit_choose_only_its_arms(arms, bandit_cells, bandit_opponents):
    """A bandit sure that cell c0 and opponent o0 are best: an arm set's bandit arms follow it, its
    other arms are spread evenly (cells: exactly, by select.prompt_floor 1) or drawn uniformly."""
    cfg = load_config(None, bench.ARM_SETS[arms]).select
    sel = Selector.new(cfg, CELLS, OPPONENTS)
    sel.prompt.update([0] * 200 + [1, 2, 3, 4, 5] * 40, [1.0] * 200 + [0.0] * 200)
    for bandit in sel.per_cell.values():
        bandit.update([0] * 50 + [1, 2] * 25, [1.0] * 50 + [0.0] * 50)
    rng = np.random.default_rng(0)
    picks = [pick for _ in range(5) for pick in sel.choose(cfg, 120, rng, {})]
    cells = np.array([sum(c == cell for c, _ in picks) for cell in CELLS])
    opponents = np.array([sum(o == opp for _, o in picks) for opp in OPPONENTS])
    if bandit_cells:  # half spread evenly (select.prompt_floor 0.5), the other half to c0
        assert cells.tolist() == [350, 50, 50, 50, 50, 50]
    else:
        assert cells.tolist() == [100] * 6
    if bandit_opponents:
        assert opponents[0] > 0.9 * len(picks)
    else:  # 600 uniform draws over 3: 200 each, sd 11.5
        assert np.all(np.abs(opponents - 200) < 50), opponents
