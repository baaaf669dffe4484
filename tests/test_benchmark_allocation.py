"""benchmarks/allocation.py measures what it reports: the random-top-1 control's shares (allocate
policy ``random``), and the run configs the benchmark builds (pinned settings, the world's seeds
and models, ``--quick``'s budgets, the oracle's accounting)."""

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.allocation import MEASURED_WITH, parse_args, run_config
from benchmarks.worlds import World
from flywheel.config.tree import AllocateConfig, FlywheelConfig
from flywheel.learning.allocation import allocate

T = ["a", "b", "c"]
ACC = {"a": [0.1, 0.3, 0.5], "b": [0.1, 0.15, 0.2], "c": [0.1, 0.1, 0.1]}  # a is clearly fastest
STEPS = {t: [0, 100, 100] for t in T}
TARGETS = [("t1", 3e-3), ("t2", 1.7e-3), ("t3", 1e-3)]


def test_random_control_is_a_top_1_concentration_on_a_seeded_random_target():
    cfg = AllocateConfig(policy="random", warmup=1, top_k=1)
    warm = allocate(cfg, T, 100, 300, {t: a[:1] for t, a in ACC.items()}, STEPS, seed=0)
    assert not warm.acting and warm.shares == pytest.approx({t: 1 / 3 for t in T}, abs=1e-6)
    picks = Counter()
    for seed in range(60):
        out = allocate(cfg, T, 100, 300, ACC, STEPS, seed=seed)
        # selective's concentration: one target gets every step and battle of the iteration
        assert out.acting and out.policy == "random" and sorted(out.shares.values()) == [0.0, 0.0, 1.0]
        (chosen,) = [t for t, s in out.shares.items() if s == 1.0]
        assert out.train_steps == {t: 300 if t == chosen else 0 for t in T}
        assert out.battles == {t: 900 if t == chosen else 0 for t in T}
        assert out.learning_rates["a"] == pytest.approx(0.002)  # rates are still measured, not used
        assert allocate(cfg, T, 100, 300, ACC, STEPS, seed=seed).shares == out.shares  # seeded
        picks[chosen] += 1
    # drawn at random, not by rate: every target is chosen, the fastest (a) no more than by chance
    assert set(picks) == set(T) and picks["a"] < 35
    # the draw changes with the iteration too (the same seed, more iterations trained)
    acc3 = {t: a + [a[-1]] for t, a in ACC.items()}
    steps3 = {t: s + [100] for t, s in STEPS.items()}
    later = [allocate(cfg, T, 100, 300, acc3, steps3, seed=s).shares for s in range(20)]
    assert later != [allocate(cfg, T, 100, 300, ACC, STEPS, seed=s).shares for s in range(20)]
    two = allocate(cfg.model_copy(update={"top_k": 2}), T, 100, 300, ACC, STEPS, seed=3)
    assert sorted(two.shares.values()) == pytest.approx([0.0, 0.5, 0.5])


def _get(cfg: FlywheelConfig, dotted: str):
    node = cfg
    for key in dotted.split("."):
        node = getattr(node, key)
    return node


def test_run_config_pins_the_measured_settings_and_puts_the_run_on_its_world(tmp_path):
    args = parse_args(["--quick", "--seeds", "4,5,6", "--iterations", "9", "--steps", "500", "--battles", "2000",
                       "--suites", "99", "--pretrainings", "7", "--models-root", str(tmp_path / "m")])
    # --quick does what its help says, whatever the other flags say
    assert (args.seeds, args.iterations, args.steps, args.battles) == ([4, 5], 2, 80, 300)
    world = World(99, 7, tmp_path / "m")
    assert world.held_out
    for arm, policy in (("selective", "selective"), ("uniform", "uniform"), ("random-top-1", "random")):
        cfg = run_config(arm, 5, world, TARGETS, args, tmp_path / "runs")
        assert cfg.allocate.policy == policy
        assert (cfg.run.iterations, cfg.train.steps, cfg.select.battles_per_iteration) == (2, 80, 300)
        assert cfg.run.seed == 5
        assert (cfg.world.tasks.seed, cfg.world.seed, cfg.world.models_dir) == (99, 7, world.models_dir)
        assert [(t.name, t.learning_rate) for t in cfg.targets] == TARGETS
        assert all(Path(t.path) == world.models_dir / "student" for t in cfg.targets)
        for key, value in MEASURED_WITH.items():
            if key == "opponents":
                assert [(o.name, o.max_new_tokens) for o in cfg.opponents] == [(o["name"], o["max_new_tokens"])
                                                                              for o in value]
            elif key.startswith("targets.*."):
                assert all(getattr(t, key.split(".")[2]) == value for t in cfg.targets)
            else:
                assert _get(cfg, key) == value, key
    # the pinned values differ from today's embedded default where the published figures did
    default = FlywheelConfig()
    assert default.train.weight_decay != 0.0 and default.curate.include_target_wins
    assert cfg.train.weight_decay == 0.0 and not cfg.curate.include_target_wins
    assert cfg.evaluate.promotion == "always" and cfg.allocate.top_k == 1


def test_the_oracle_spends_every_targets_steps_and_battles_on_one(tmp_path):
    args = parse_args(["--quick", "--models-root", str(tmp_path)])
    world = World(1234, 0, tmp_path)
    assert not world.held_out
    cfg = run_config("oracle", 0, world, TARGETS, args, tmp_path / "runs", oracle="t2")
    assert [(t.name, t.learning_rate) for t in cfg.targets] == [("t2", 1.7e-3)]
    assert cfg.train.steps == 3 * 80 and cfg.select.battles_per_iteration == 3 * 300
    # one target at uniform shares: the iteration's whole budget, from the first iteration on
    out = allocate(cfg.allocate, ["t2"], cfg.train.steps, cfg.select.battles_per_iteration)
    assert out.train_steps == {"t2": 240} and out.battles == {"t2": 900}
    # as much per iteration as selective spends once it acts
    sel = run_config("selective", 0, world, TARGETS, args, tmp_path / "runs")
    acting = allocate(sel.allocate, [t.name for t in sel.targets], sel.train.steps, sel.select.battles_per_iteration,
                      {"t1": [0.1, 0.2], "t2": [0.1, 0.4], "t3": [0.1, 0.1]}, {t: [0, 80] for t in ("t1", "t2", "t3")})
    assert sum(acting.train_steps.values()) == 240 and sum(acting.battles.values()) == 900
    with pytest.raises(ValueError, match="oracle"):
        run_config("oracle", 0, world, TARGETS, args, tmp_path / "runs", oracle="t9")
