"""The bandit benchmark runs what it reports: pinned settings, --quick, its scenarios' pools."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.bandits import FRACTIONS, QUICK, VARIANTS, bench_overrides, scenario_config
from benchmarks.worlds import World
from flywheel.ground.config_io import load_config
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
