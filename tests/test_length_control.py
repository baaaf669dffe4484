"""Length-controlled win rates against a baseline (AlpacaEval 2's): the fit recovers a model's
skill where the judge rewards length, ties count half, separable data stays finite, and
``flywheel elo RUN_DIR --lc-baseline MODEL`` prints it or refuses in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flywheel.config.loading import dump_config, load_config
from flywheel.ground.atomic import atomic_write_text
from flywheel.ground.records import Battle, JudgedBattle, Judgment
from flywheel.ground.store import RunStore
from flywheel.maths.length_control import COLUMNS, LCOptions, Versus, against, features, lc_rows, length_controlled
from tests.conftest import Ran, flywheel_cli


def sigmoid(t: float) -> float:
    return 1.0 / (1.0 + math.exp(-t))


def simulate(models: dict[str, tuple[float, float]], effect: float, n: int = 4000, seed: int = 0) -> Versus:
    """``n`` battles of each model against the baseline: model -> (true theta, mean length
    difference in characters; spread 300). The judge adds ``effect`` logits per unit of
    tanh(delta / sigma), sigma the pooled spread of the length differences."""
    rng = np.random.default_rng(seed)
    names = [m for m in models for _ in range(n)]
    delta = np.concatenate([rng.normal(mu, 300.0, n) for _, mu in models.values()]).round()
    theta = np.array([models[m][0] for m in names])
    p = 1.0 / (1.0 + np.exp(-(theta + effect * np.tanh(delta / delta.std()))))
    tie = 0.4 * np.minimum(p, 1 - p)  # some ties, each worth half: the expected score stays p
    u = rng.random(len(p))
    score = np.where(u < p - tie / 2, 1.0, np.where(u < p + tie / 2, 0.5, 0.0))
    return Versus("base", names, score, delta)


def by_model(rows):
    return {r.model: r for r in rows}


def test_the_lc_win_rate_recovers_the_skill_a_length_loving_judge_inflates():
    rows = by_model(length_controlled(simulate({"long": (0.3, 300.0), "plain": (-0.2, 0.0)}, effect=1.0)))
    long, plain = rows["long"], rows["plain"]
    assert abs(long.lc_win_rate - sigmoid(0.3)) < 0.03  # true 0.574
    assert long.win_rate - sigmoid(0.3) > 0.08  # the raw win rate is inflated by the longer answers
    assert long.lc_lower <= sigmoid(0.3) <= long.lc_upper
    assert abs(long.length_coef - 1.0) < 0.3 and long.mean_length_diff > 250
    assert abs(plain.lc_win_rate - sigmoid(-0.2)) < 0.03  # same length on average: raw and LC agree
    assert abs(plain.win_rate - plain.lc_win_rate) < 0.03


def test_without_a_length_effect_lc_equals_raw():
    for r in length_controlled(simulate({"long": (0.3, 300.0), "short": (-0.4, -300.0)}, effect=0.0)):
        assert abs(r.lc_win_rate - r.win_rate) < 0.02, r
        assert abs(r.length_coef) < 0.2


def test_ties_count_half():
    rows = length_controlled(Versus("b", ["m"] * 8, np.array([1, 1, 1, 0, 0.5, 0.5, 0.5, 0.5]), np.full(8, 40.0)))
    assert rows[0].win_rate == 0.625
    assert features(np.full(8, 40.0))[1] == 0.0  # no spread in length: nothing to control for
    assert abs(rows[0].lc_win_rate - 0.625) < 0.002 and rows[0].length_coef == 0.0
    ties = length_controlled(Versus("b", ["m"] * 6, np.full(6, 0.5), np.arange(6.0) * 50), LCOptions(rounds=20))
    assert ties[0].lc_win_rate == pytest.approx(0.5) and ties[0].length_coef == pytest.approx(0.0)
    assert ties[0].lc_lower == pytest.approx(0.5) and ties[0].lc_upper == pytest.approx(0.5)


def test_a_model_that_always_wins_stays_finite():
    (r,) = length_controlled(Versus("b", ["m"] * 30, np.ones(30), np.linspace(-200, 400, 30)), LCOptions(rounds=50))
    assert r.win_rate == 1.0
    assert all(math.isfinite(v) for v in (r.lc_win_rate, r.lc_lower, r.lc_upper, r.length_coef))
    assert 0.9 < r.lc_win_rate < 1.0 and r.lc_lower <= r.lc_upper < 1.0


def test_the_interval_is_deterministic_for_a_seed():
    v = simulate({"long": (0.3, 300.0), "plain": (0.0, 0.0)}, effect=1.0, n=300)
    one, again = length_controlled(v, LCOptions(seed=3)), length_controlled(v, LCOptions(seed=3))
    assert one == again
    other = length_controlled(v, LCOptions(seed=4))
    assert [r.lc_lower for r in other] != [r.lc_lower for r in one]
    assert [r.lc_win_rate for r in other] == [r.lc_win_rate for r in one]  # the point does not depend on it


def _battle(bid: str, a: str, b: str, ra: str, rb: str, phase: str = "eval") -> Battle:
    return Battle(bid, 1, phase, "p" + bid, "q", "chat", 1, None, a, b, ra, rb)


def test_battles_are_read_from_the_other_models_side_whatever_the_seat():
    judged = [JudgedBattle(_battle("1", "base", "m", "xx", "xxxxx"), Judgment("1", "j", "model_b")),
              JudgedBattle(_battle("2", "m", "base", "x", "xxxx"), Judgment("2", "j", "model_b")),
              JudgedBattle(_battle("3", "m@2", "base", "xxx", "x"), Judgment("3", "j", "tie")),
              JudgedBattle(_battle("4", "m", "other", "x", "xx"), Judgment("4", "j", "model_a")),
              JudgedBattle(_battle("5", "base", "base", "x", "xx"), Judgment("5", "j", "model_a"))]
    v = against(judged, "base")
    assert v.models == ["m", "m", "m@2"]
    assert v.score.tolist() == [1.0, 0.0, 0.5] and v.delta.tolist() == [3.0, -3.0, 2.0]


# -- the command ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory with eval battles and judgments written straight into its logs (no models)."""
    root = tmp_path_factory.mktemp("lc") / "run"
    store = RunStore(root)
    atomic_write_text(store.config_path, dump_config(load_config(None, ["rating.bootstrap_rounds=40"])))
    rng = np.random.default_rng(1)
    battles, judgments = [], []
    for i in range(240):
        model = ("student@1", "student@2", "other")[i % 3]
        own, base = "x" * int(rng.integers(50, 400)), "y" * int(rng.integers(50, 200))
        won = rng.random() < sigmoid(0.8 * np.tanh((len(own) - len(base)) / 150))
        verdict = "tie" if i % 7 == 0 else "model_a" if won else "model_b"
        seat_a = i % 2 == 0  # the baseline sits in either seat
        flip = {"model_a": "model_b", "model_b": "model_a", "tie": "tie"}
        battles.append(_battle(str(i), model if seat_a else "base", "base" if seat_a else model,
                               own if seat_a else base, base if seat_a else own))
        judgments.append(Judgment(str(i), "j", verdict if seat_a else flip[verdict]))
    battles.append(_battle("x", "student@1", "other", "a", "b"))  # another pair: ignored
    judgments.append(Judgment("x", "j", "model_a"))
    battles.append(Battle("g", 1, "eval", "pg", "q", "chat", 1, None, "ghost", "base", "", "b", error="ghost: timeout"))
    store.append_battles(battles)
    store.append_judgments(judgments, 1, "eval")
    return root


def flywheel(*args: str) -> Ran:
    return flywheel_cli(*args)


def test_elo_lc_baseline_prints_each_models_figures(run_dir):
    p = flywheel("elo", str(run_dir), "--lc-baseline", "base", "--format", "json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert sorted(r["model"] for r in rows) == ["other", "student@1", "student@2"]
    assert all(r["battles"] == 80 and tuple(r) == COLUMNS for r in rows)
    assert rows == lc_rows(RunStore(run_dir).judged(None, "eval"), "base", LCOptions(rounds=40))
    for r in rows:
        assert r["lc_lower"] <= r["lc_win_rate"] <= r["lc_upper"] and r["mean_length_diff"] > 0
        assert r["lc_win_rate"] < r["win_rate"]  # longer answers, a judge that likes them
    table = flywheel("elo", str(run_dir), "--lc-baseline", "base")
    assert table.returncode == 0 and "lc_win_rate" in table.stdout.splitlines()[0]


def test_an_unknown_baseline_is_one_line_naming_the_models(run_dir):
    p = flywheel("elo", str(run_dir), "--lc-baseline", "nobody")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and p.stderr.startswith("error: ")
    assert "'nobody'" in p.stderr and "base, ghost, other, student@1, student@2" in p.stderr
    ghost = flywheel("elo", str(run_dir), "--lc-baseline", "ghost")  # its one battle failed: nothing judged
    assert ghost.returncode == 2 and ghost.stderr.count("\n") == 1
    assert ghost.stderr.startswith("error: --lc-baseline 'ghost' has no judged eval battles")
    both = flywheel("elo", str(run_dir), "--lc-baseline", "base", "--history")
    assert both.returncode == 2 and "cannot be combined" in both.stderr
