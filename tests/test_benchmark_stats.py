"""The statistics the benchmarks publish their ratios with (benchmarks/stats.py)."""

import math

import numpy as np
import pytest

from benchmarks.stats import (budget_ratio, budget_to_reach, isotonic, mean_ci, parse_seeds, per_prompt_differences,
                              stratified_bootstrap)


def test_isotonic_pools_violators_and_keeps_monotone_input():
    assert isotonic([0.1, 0.3, 0.2, 0.4]) == pytest.approx([0.1, 0.25, 0.25, 0.4])
    assert isotonic([0.5, 0.2, 0.2]) == pytest.approx([0.3, 0.3, 0.3])
    assert isotonic([0.1, 0.2, 0.3]) == [0.1, 0.2, 0.3]


def test_mean_ci_is_a_student_t_interval():
    m, h = mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and h == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-3)
    assert mean_ci([0.4]) == (0.4, 0.0)


def test_budget_to_reach_interpolates_and_never_extrapolates():
    assert budget_to_reach([100, 200, 300], [0.1, 0.3, 0.5], 0.4) == pytest.approx(250)
    assert budget_to_reach([100, 200, 300], [0.1, 0.3, 0.5], 0.6) is None


def test_budget_ratio_reads_the_monotone_fits_not_a_lucky_crossing():
    budgets = [100, 200, 300]
    # the bandit reaches uniform's final accuracy at 200 battles: 1.5x fewer
    assert budget_ratio(budgets, [0.1, 0.2, 0.4], [0.2, 0.4, 0.5]) == (pytest.approx(1.5), "")
    # one noisy spike at 100 battles does not count as reaching the goal there: the fit pools
    # 0.45 with the later points, and the ratio is what the monotone curve gives
    r, mark = budget_ratio(budgets, [0.1, 0.2, 0.4], [0.45, 0.3, 0.35])
    assert mark == "" and r < 1.0
    # a bandit worse at every budget gets a ratio below 1, read off uniform's curve
    assert budget_ratio(budgets, [0.1, 0.2, 0.4], [0.1, 0.15, 0.2]) == (pytest.approx(200 / 300), "")
    # bounds are marked as bounds
    assert budget_ratio(budgets, [0.1, 0.2, 0.3], [0.5, 0.6, 0.7]) == (pytest.approx(3.0), ">=")
    assert budget_ratio(budgets, [0.5, 0.6, 0.7], [0.1, 0.2, 0.3]) == (pytest.approx(1 / 3), "<=")


def test_parse_seeds_takes_commas_and_spaces():
    assert parse_seeds(["5,6", "7"]) == [5, 6, 7]
    with pytest.raises(SystemExit):
        parse_seeds([""])


def test_efficacy_figures_follow_the_versions_in_use():
    from benchmarks.efficacy import by_category, figures, meets

    def ev(acc, **cats):
        return {"accuracy": acc, "accuracy_by_category": cats}

    opponents = {"calc": ev(0.3, add=0.6, rev=0.0), "scribe": ev(0.4, add=0.0, rev=0.8)}
    summary = {"iterations": [
        {"iteration": 0, "eval": {"s@0": ev(0.2, add=0.1, rev=0.3)}, "opponents_eval": opponents},
        {"iteration": 1, "eval": {"s@1": ev(0.5, add=0.5, rev=0.5)}, "opponents_eval": opponents,
         "current": {"s": "s@1"}},
        # s@2 fell (on eval) and was not promoted: s@1 stays in use, so no step down is counted
        {"iteration": 2, "eval": {"s@2": ev(0.1, add=0.0, rev=0.2)}, "opponents_eval": opponents,
         "current": {"s": "s@1"}},
    ]}
    f = figures(summary, "s")
    assert f["accuracy"] == 0.5 and abs(f["overall"] - 0.1) < 1e-9  # best opponent overall: 0.4
    assert abs(f["worst_category"] - 0.5 / 0.8) < 1e-9  # rev: 0.5 of scribe's 0.8
    assert f["forgetting"] == 0.0 and f["worst_step"] == 0.0
    assert meets("overall", f["overall"]) and not meets("worst_category", f["worst_category"])
    # per category: the version in use (s@1), its iteration 0, the best opponent there
    assert by_category(summary, "s") == {"add": (0.5, 0.1, 0.6, "calc"), "rev": (0.5, 0.3, 0.8, "scribe")}
    summary["iterations"][2]["current"] = {"s": "s@2"}  # promoted after all
    f = figures(summary, "s")
    assert abs(f["worst_step"] - 0.4) < 1e-9 and abs(f["forgetting"] - 0.1) < 1e-9


def test_the_rl_benchmark_reads_the_two_goals_on_validation_where_the_opponents_have_it():
    """What a tuning rule reads: each category's share of the best opponent and what was forgotten,
    on the validation split, against the opponents' own validation figures, never the eval split's."""
    from benchmarks.efficacy import by_category
    from benchmarks.rl import two_goals

    def ev(acc, val=None, **cats):
        out = {"accuracy": acc, "accuracy_by_category": cats}
        if val is not None:
            out["validation"] = {"prompts": 4, "accuracy": sum(val.values()) / len(val), "accuracy_by_category": val}
        return out

    # on eval the target beats both opponents everywhere; on validation it trails calc in add and forgets rev
    opponents = {"calc": ev(0.1, {"add": 0.8, "rev": 0.0}, add=0.1, rev=0.0),
                 "scribe": ev(0.1, {"add": 0.0, "rev": 0.5}, add=0.0, rev=0.1)}
    summary = {"iterations": [
        {"iteration": 0, "eval": {"s@0": ev(0.2, {"add": 0.1, "rev": 0.6}, add=0.1, rev=0.3)}, "opponents_eval": opponents},
        {"iteration": 1, "eval": {"s@1": ev(0.5, {"add": 0.6, "rev": 0.5}, add=0.5, rev=0.5)}, "opponents_eval": opponents,
         "current": {"s": "s@1"}},
    ]}
    assert by_category(summary, "s", "validation") == {"add": (0.6, 0.1, 0.8, "calc"), "rev": (0.5, 0.6, 0.5, "scribe")}
    assert two_goals(summary, "s", {}) == (5.0, True)
    share, kept = two_goals(summary, "s", {}, "validation")
    assert abs(share - 0.75) < 1e-9 and not kept
    # a category whose best opponent is not 0.05 above the commonest answer is not learnable
    assert two_goals(summary, "s", {"add": 0.78}, "validation") == (1.0, False)
    # summaries made before the opponents were scored on validation give no reading, not a wrong one
    for v in opponents.values():
        del v["validation"]
    assert by_category(summary, "s", "validation") == {} and two_goals(summary, "s", {}, "validation") is None


def test_the_chance_that_an_equal_model_passes_is_a_binomial_tail():
    from benchmarks.efficacy import chance_at_least

    # P(S >= 1 of 2) at p = 1/2: the bar's edge counts as passing
    assert abs(chance_at_least(2, 0.5, 0.5) - 0.75) < 1e-12
    assert abs(chance_at_least(10, 0.3, 0.0) - 1.0) < 1e-12 and abs(chance_at_least(10, 0.3, 1.0) - 0.3**10) < 1e-15
    # 60 prompts, best opponent right on 15: an equal model needs 14 of 60 (0.9 x 15 = 13.5)
    direct = sum(math.comb(60, k) * 0.25**k * 0.75 ** (60 - k) for k in range(14, 61))
    assert abs(chance_at_least(60, 0.25, 0.9 * 15 / 60) - direct) < 1e-12


def test_the_chance_that_a_category_that_holds_still_meets_the_forgetting_goal():
    from benchmarks.efficacy import holds_still

    # iteration 0 right on 25 of 60: 2 points is 1.2 prompts, so 24 of 60 passes and 23 does not
    direct = sum(math.comb(60, k) * (25 / 60) ** k * (35 / 60) ** (60 - k) for k in range(24, 61))
    assert abs(holds_still(60, 25 / 60) - direct) < 1e-12 and 0.6 < direct < 0.7
    # nothing right (or everything) cannot fall further than the bar by chance
    assert holds_still(60, 0.0) == 1.0 and abs(holds_still(60, 1.0) - 1.0) < 1e-12


def test_active_eval_arenas_tie_close_pairs_and_bound_what_a_design_can_save():
    import numpy as np

    from benchmarks.active_eval import design_bound, outcome

    draws = np.random.default_rng(0).random(20000)
    close = [outcome(0.0, u, 0.2, "davidson") for u in draws]
    far = [outcome(8.0, u, 0.2, "davidson") for u in draws]
    assert close.count(0.5) / len(close) == pytest.approx(0.2, abs=0.01)
    assert far.count(0.5) / len(far) < 0.02 and far.count(1.0) / len(far) > 0.97
    assert [outcome(4.0, u, 0.2, "flat") for u in draws].count(0.5) / len(draws) == pytest.approx(0.2, abs=0.01)
    # equal strengths: uniform pair sampling is already the best design; a wide spread leaves room
    assert design_bound(np.zeros(6), iters=300) == pytest.approx(1.0, abs=0.02)
    assert design_bound(np.linspace(-4, 4, 6), iters=300) > 1.3


def test_chatbot_arenas_rule_plays_every_pair_then_the_least_certain_win_rates():
    import numpy as np

    from benchmarks.active_eval import PairTally, arena_pair, win_matrix_bound

    rng = np.random.default_rng(0)
    tally = PairTally(3)
    assert tally.win_matrix_width() == 1.0  # nothing played: every interval is the whole range
    for pair, scores in ((0, [1, 0] * 10), (1, [1] * 20), (2, [1, 0])):  # even, one-sided, even but few
        for x in scores:
            tally.add(pair, x)
    assert tally.variance()[1] < tally.variance()[0] == tally.variance()[2] and tally.variance()[1] > 0
    drawn = np.bincount([arena_pair(tally, rng) for _ in range(3000)], minlength=3) / 3000
    assert drawn[2] > drawn[0] > drawn[1]  # few battles on an even pair first; a settled pair last
    fresh = PairTally(4)
    fresh.add(0, 1.0)
    assert {arena_pair(fresh, rng) for _ in range(50)} == {1, 2, 3}  # pairs never played come first
    assert 0 < tally.win_matrix_width() < 1
    # alike variances leave nothing to save; very unlike ones do
    assert win_matrix_bound(np.zeros(6), 0.1, "davidson") == pytest.approx(1.0)
    assert win_matrix_bound(np.linspace(-6, 6, 6), 0.1, "davidson") > 1.2


def test_players_benchmark_runs_per_seed_on_a_long_tailed_loopback_server():
    import subprocess
    import sys

    from benchmarks.players import latencies

    drawn = latencies(3, 0.2, 0.5, 400)
    assert drawn != latencies(4, 0.2, 0.5, 400) and latencies(3, 0.2, 0.0, 3) == [0.2, 0.2, 0.2]
    assert sorted(drawn)[200] == pytest.approx(0.2, rel=0.15) and max(drawn) > 2 * 0.2  # median, and a tail
    out = subprocess.run([sys.executable, "-m", "benchmarks.players", "--seeds", "3,4", "--latency", "0.05",
                          "--calls", "24", "--sequential-calls", "6", "--concurrency", "8"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "seed 3:" in out and "seed 4:" in out
    assert float(out.strip().splitlines()[-1].removeprefix("ratio: ")) > 2  # 8 calls in flight beat one at a time


def test_kills_benchmark_compares_every_figure_and_reports_the_work_apart():
    from benchmarks.kills import differences, work

    straight = {"run_id": "a", "iterations": [{"battles": 600, "wall_s": 4.9, "usage": {"s@1": {"generated": 540, "cached": 720}},
                                               "eval": {"s@1": {"accuracy": 0.5}}}]}
    resumed = {"run_id": "b", "iterations": [{"battles": 600, "wall_s": 4.1, "usage": {"s@1": {"generated": 540, "cached": 900}},
                                              "eval": {"s@1": {"accuracy": 0.5}}}]}
    assert differences(straight, resumed) == []
    resumed["iterations"][0]["eval"]["s@1"]["accuracy"] = 0.51
    resumed["iterations"][0]["usage"]["s@1"]["generated"] = 1080  # answers generated again after a kill
    resumed["iterations"].append({"battles": 600})
    assert differences(straight, resumed) == ["/iterations: 1 items vs 2"]
    resumed["iterations"].pop()
    assert differences(straight, resumed) == ["/iterations[0]/eval/s@1/accuracy: 0.5 vs 0.51"]
    assert work(resumed) == {"generated": 1080, "cached": 900}  # work done is reported apart
    assert differences({"a": 1}, {"b": 1}) == ["/a: only in the straight run", "/b: only in the killed run"]


def test_a_paired_difference_is_zero_for_identical_answers_and_one_where_only_ours_are_right():
    same = {f"p{i}": i % 3 == 0 for i in range(50)}
    d = stratified_bootstrap([per_prompt_differences(same, dict(same))])
    assert (d.mean, d.lower, d.upper, d.prompts) == (0.0, 0.0, 0.0, 50)
    ours, theirs = {f"p{i}": True for i in range(40)}, {f"p{i}": False for i in range(40)}
    d = stratified_bootstrap([per_prompt_differences(ours, theirs)])
    assert (d.mean, d.lower, d.upper, d.prompts) == (1.0, 1.0, 1.0, 40)
    assert list(per_prompt_differences({"a": 1, "b": 0, "c": 1}, {"b": 1, "c": 1, "d": 0})) == [-1.0, 0.0]  # shared


def test_a_stratified_bootstrap_pools_every_prompt_and_resamples_within_each_stratum():
    # run 1: +1 on 30 of 100 prompts, -1 on 10; run 2: +1 on 10 of 100 prompts
    one = np.array([1.0] * 30 + [-1.0] * 10 + [0.0] * 60)
    two = np.array([1.0] * 10 + [0.0] * 90)
    d = stratified_bootstrap([one, two], rounds=4000, seed=1)
    assert d.prompts == 200 and d.mean == pytest.approx(30 / 200)
    assert d.lower < 0.15 < d.upper and d.upper - d.lower < 0.15
    se = np.sqrt((one.var() * 100 + two.var() * 100)) / 200  # the stratified standard error
    assert (d.upper - d.lower) / 2 == pytest.approx(1.96 * se, rel=0.12)
    alone = stratified_bootstrap([one], rounds=4000, seed=1)
    assert alone.mean == pytest.approx(0.2) and alone.prompts == 100
    assert stratified_bootstrap([one, two], rounds=4000, seed=1) == d  # seeded
    with pytest.raises(ValueError, match="no prompt pairs"):
        stratified_bootstrap([np.array([])])
