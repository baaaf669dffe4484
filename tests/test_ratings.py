import math

import numpy as np
import pytest

from flywheel.maths.leaderboard import RatingOptions, leaderboard, online_elo


def simulate(strengths, n, seed=0, tie_rate=0.1):
    rng = np.random.default_rng(seed)
    names = list(strengths)
    a = rng.integers(0, len(names), n)
    b = (a + rng.integers(1, len(names), n)) % len(names)
    sa = np.array([strengths[names[i]] for i in a])
    sb = np.array([strengths[names[i]] for i in b])
    p = 1 / (1 + 10 ** ((sb - sa) / 400))
    u = rng.random(n)
    winner = np.where(u < tie_rate, "tie", np.where(rng.random(n) < p, "model_a", "model_b"))
    return [names[i] for i in a], [names[i] for i in b], list(winner)


def classic_mle(a, b, w):
    """Chatbot Arena's published recipe: logistic regression over battle rows, ties as half."""
    from scipy.optimize import minimize

    models = sorted(set(a) | set(b))
    idx = {m: i for i, m in enumerate(models)}
    ia, ib = np.array([idx[x] for x in a]), np.array([idx[x] for x in b])
    y = np.array([{"model_a": 1.0, "model_b": 0.0}.get(x, 0.5) for x in w])
    ln = math.log(10)

    def f(beta):
        d = ln * (beta[ia] - beta[ib])
        p = 1 / (1 + np.exp(-d))
        loss = -(y * np.log(p) + (1 - y) * np.log(1 - p)).sum()
        g = np.zeros_like(beta)
        np.add.at(g, ia, -(y - p) * ln)
        np.add.at(g, ib, (y - p) * ln)
        return loss, g

    beta = minimize(f, np.zeros(len(models)), jac=True, method="L-BFGS-B", options={"gtol": 1e-10}).x
    beta -= beta.mean()
    return {m: 1000 + 400 * beta[i] for m, i in idx.items()}


def test_point_estimates_match_the_classic_method():
    a, b, w = simulate({"x": 1200, "y": 1100, "z": 1000, "u": 900, "v": 850}, 20000)
    ours = {r.model: r.rating for r in leaderboard(a, b, w, RatingOptions(rounds=0))}
    ref = classic_mle(a, b, w)
    for m in ref:
        assert abs(ours[m] - ref[m]) < 0.02, (m, ours[m], ref[m])  # the plain MLE: no prior where it exists


def test_the_prior_is_used_only_where_the_mle_does_not_exist():
    import numpy as np

    from flywheel.maths.ratings import mle_exists, points_matrix

    a, b, w = simulate({"x": 1200, "y": 1000, "z": 800}, 3000)
    default = {r.model: r.rating for r in leaderboard(a, b, w, RatingOptions(rounds=0))}
    classic = {r.model: r.rating for r in leaderboard(a, b, w, RatingOptions(rounds=0, prior=0))}
    shrunk = {r.model: r.rating for r in leaderboard(a, b, w, RatingOptions(rounds=0, prior=300))}
    assert default == classic and shrunk["x"] < classic["x"] - 1  # a prior pulls toward the mean
    # "n" beat x twice and never lost: no finite MLE, so the default falls back to the 0.1 prior.
    a2, b2, w2 = a + ["n", "n"], b + ["x", "x"], w + ["model_a", "model_a"]
    default = {r.model: r for r in leaderboard(a2, b2, w2, RatingOptions(rounds=20))}
    fallback = {r.model: r.rating for r in leaderboard(a2, b2, w2, RatingOptions(rounds=0, prior=0.1))}
    assert {m: r.rating for m, r in default.items()} == fallback and math.isfinite(default["n"].upper)
    # Zermelo's condition, batched: a cycle exists, a one-way chain does not; a tie links both ways.
    chain = np.array([[0, 1, 0], [0, 0, 1], [0, 0, 0]], float)
    cycle = chain + np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0]])
    tie = np.array([[0, 0.5, 0], [0.5, 0, 1], [0, 1, 0]])
    assert mle_exists(np.stack([chain, cycle, tie])).tolist() == [False, True, True]
    assert points_matrix(2, np.array([5]), np.array([3])).tolist() == [[0, 3], [0, 0]]  # A (0) beat B (1) 3 times


def test_recovers_true_gaps_with_cis_that_cover_them():
    truth = {"x": 1200, "y": 1100, "z": 1000}
    board = leaderboard(*simulate(truth, 30000, tie_rate=0.0), RatingOptions(rounds=100, seed=3))
    got = {r.model: r for r in board}
    assert [r.model for r in board] == ["x", "y", "z"]
    assert abs((got["x"].rating - got["z"].rating) - 200) < 25
    for r in board:
        assert r.lower <= r.rating <= r.upper
        assert r.upper - r.lower < 40
    assert [r.rank for r in board] == [1, 2, 3]


def test_mean_rating_is_1000_and_ties_are_half_wins():
    board = leaderboard(["a", "a"], ["b", "b"], ["tie", "tie (bothbad)"], RatingOptions(rounds=10))
    assert all(abs(r.rating - 1000) < 1e-6 for r in board)
    board = leaderboard(["a"] * 3, ["b"] * 3, ["model_a", "model_b", "tie"], RatingOptions(rounds=0))
    assert abs(board[0].rating - 1000) < 1e-6 and board[0].ties == 1


def test_never_loses_stays_finite_and_on_top():
    board = leaderboard(["a"] * 20 + ["b"] * 20, ["b"] * 20 + ["c"] * 20, ["model_a"] * 20 + ["tie"] * 20,
                        RatingOptions(rounds=20))
    assert board[0].model == "a"
    assert all(math.isfinite(x) for r in board for x in (r.rating, r.lower, r.upper))


def test_zero_battles_and_unknown_winner():
    assert leaderboard([], [], []) == []
    with pytest.raises(ValueError, match="unknown winner"):
        leaderboard(["a"], ["b"], ["a"])


def test_bootstrap_is_seeded():
    a, b, w = simulate({"x": 1100, "y": 1000, "z": 950}, 2000)
    five, six = RatingOptions(rounds=30, seed=5), RatingOptions(rounds=30, seed=6)
    assert leaderboard(a, b, w, five) == leaderboard(a, b, w, five)
    assert leaderboard(a, b, w, five) != leaderboard(a, b, w, six)


def test_online_elo_moves_toward_the_winner():
    r = online_elo(["a"] * 10, ["b"] * 10, ["model_a"] * 10, k_factor=16)
    assert r["a"] > 1000 > r["b"] and abs(r["a"] + r["b"] - 2000) < 1e-9


# -- edge cases, anchors, groups, names ----------------------------------------------------------
from flywheel.face.battlelog import consistency  # noqa: E402
from flywheel.maths.leaderboard import rate  # noqa: E402


def finite(report):
    return all(math.isfinite(x) for r in report.ratings for x in (r.rating, r.lower, r.upper))


def test_never_wins_and_one_battle_are_finite_and_labelled():
    rep = rate(["a"] * 5 + ["b"] * 5, ["b"] * 5 + ["c"] * 5, ["model_a"] * 5 + ["model_a"] * 5,
               RatingOptions(rounds=20))
    notes = {r.model: r.note for r in rep.ratings}
    assert notes == {"a": "never lost", "b": "", "c": "never won"} and finite(rep)
    assert [r.model for r in rep.ratings] == ["a", "b", "c"]
    one = rate(["x"], ["y"], ["model_a"], RatingOptions(rounds=20))
    assert finite(one) and one.ratings[0].model == "x" and one.ratings[0].rating > one.ratings[1].rating


def test_disconnected_groups_are_centred_ranked_and_flagged_separately():
    a, b, w = ["a", "a", "c", "c"], ["b", "b", "d", "d"], ["model_a", "tie", "model_b", "model_b"]
    rep = rate(a, b, w, RatingOptions(rounds=20))
    assert rep.warnings and "2 disconnected groups" in rep.warnings[0]
    by = {r.model: r for r in rep.ratings}
    assert by["a"].group == by["b"].group != by["c"].group == by["d"].group
    for g in (("a", "b"), ("c", "d")):
        assert abs((by[g[0]].rating + by[g[1]].rating) / 2 - 1000) < 1e-6
    assert min(r.rank for r in rep.ratings if r.group == 2) == 1
    assert finite(rep)


def test_names_differing_by_case_or_spaces_are_an_error_unless_folded():
    with pytest.raises(ValueError, match="differ only by case or spaces"):
        rate(["GPT-4", "gpt-4 "], ["llama", "llama"], ["model_a", "model_a"])
    rep = rate(["GPT-4", "GPT-4", "gpt-4 "], ["llama"] * 3, ["model_a"] * 3, RatingOptions(rounds=0), fold_names=True)
    assert {r.model for r in rep.ratings} == {"GPT-4", "llama"}
    assert next(r for r in rep.ratings if r.model == "GPT-4").battles == 3


def test_anchor_pins_a_model_and_shifts_everything_else_equally():
    a, b, w = simulate({"x": 1200, "y": 1000, "z": 900}, 3000)
    free = {r.model: r for r in rate(a, b, w, RatingOptions(rounds=30, seed=1)).ratings}
    pinned = {r.model: r for r in rate(a, b, w, RatingOptions(rounds=30, seed=1, anchor=("y", 1500))).ratings}
    assert pinned["y"].rating == pinned["y"].lower == pinned["y"].upper == 1500
    shift = pinned["x"].rating - free["x"].rating
    assert abs((pinned["z"].rating - free["z"].rating) - shift) < 0.02
    with pytest.raises(ValueError, match="anchor model"):
        rate(a, b, w, RatingOptions(anchor=("nobody", 1000)))


def test_matrices_count_battles_and_half_ties():
    rep = rate(["a", "a", "b"], ["b", "b", "c"], ["model_a", "tie", "model_b"], RatingOptions(rounds=0))
    i = {m: n for n, m in enumerate(rep.models)}
    assert rep.battle_counts[i["a"]][i["b"]] == 2 and rep.battle_counts[i["a"]][i["c"]] == 0
    assert rep.win_rate[i["a"]][i["b"]] == 0.75 and rep.win_rate[i["b"]][i["a"]] == 0.25
    assert rep.win_rate[i["a"]][i["c"]] is None and rep.win_rate[i["c"]][i["b"]] == 1.0


def test_no_nan_or_inf_anywhere_in_a_report_of_awkward_logs():
    awkward = [
        (["a"], ["b"], ["tie"]),
        (["a"] * 3, ["b"] * 3, ["model_a"] * 3),
        (["a", "c"], ["b", "d"], ["model_b", "tie (bothbad)"]),
    ]
    for a, b, w in awkward:
        rep = rate(a, b, w, RatingOptions(rounds=25))
        assert finite(rep) and all(r.rank >= 1 for r in rep.ratings)
    assert rate([], [], []).ratings == [] and rate([], [], []).warnings == ["no battles to rate"]


def test_consistency_report():
    a, b, w = simulate({"x": 1300, "y": 1100, "z": 900, "u": 700}, 8000)
    ratings = rate(a, b, w, RatingOptions(rounds=30)).ratings
    same = consistency(ratings, {"x": 4, "y": 3, "z": 2, "u": 1, "other": 9})
    assert same["spearman"] == 1.0 and same["separability"] == 1.0 and same["agreement"] == 1.0
    flipped = consistency(ratings, {"x": 1, "y": 2, "z": 3, "u": 4})
    assert flipped["spearman"] == -1.0 and flipped["agreement"] == 0.0
    assert same["missing_from_reference"] == []
    with pytest.raises(ValueError, match="fewer than 2"):
        consistency(ratings, {"x": 1})


def test_same_report_from_dataframe_columns_swapped_sides_and_any_core_count(monkeypatch):
    import os

    import pandas as pd

    from flywheel.maths import bootstrap

    a, b, w = simulate({"x": 1200, "y": 1100, "z": 1000, "u": 950}, 5000, seed=2)
    base = rate(a, b, w, RatingOptions(rounds=40, seed=3))
    df = pd.DataFrame({"model_a": a, "model_b": b, "winner": w})  # pandas' default (arrow) strings
    assert rate(df["model_a"], df["model_b"], df["winner"], RatingOptions(rounds=40, seed=3)) == base
    # B vs A with the verdict flipped is the same battle: same cells, same resamples, same report.
    flip = {"model_a": "model_b", "model_b": "model_a"}
    assert rate(b, a, [flip.get(x, x) for x in w], RatingOptions(rounds=40, seed=3)) == base
    # Bootstrap chunks have their own seeds, so one core gives what several give.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert rate(a, b, w, RatingOptions(rounds=40, seed=3)) == base
    assert bootstrap.BOOT_CHUNKS > 1


def test_a_missing_name_or_winner_names_its_row_and_lengths_must_agree():
    with pytest.raises(ValueError, match="row 2: model_b is missing"):
        rate(["a", "a"], ["b", None], ["model_a", "tie"])
    with pytest.raises(ValueError, match="row 1: winner is missing"):
        rate(["a"], ["b"], [None])
    with pytest.raises(ValueError, match="columns differ in length"):
        rate(["a", "b"], ["b"], ["tie"])
