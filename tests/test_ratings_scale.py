"""The ratings that scale (pairs, chord/Newton-CG refits, Poissonized resampling) against the dense
reference fit (``ratings.fit_bt``, ``ratings.mle_exists``) and the multinomial law."""

import math
import time

import numpy as np
import pytest

from flywheel.maths import bootstrap as boot
from flywheel.maths.bootstrap import bootstrap, fit_log
from flywheel.maths.bt_fit import one_blas_thread, preconditioner, refit
from flywheel.maths.leaderboard import RatingOptions, rate
from flywheel.maths.pairs import Pairs, Skeleton, mle_exists
from flywheel.maths.ratings import PRIOR, cell_counts, center, fit_bt, points_matrix, resolve_prior
from flywheel.maths.ratings import mle_exists as dense_exists
from flywheel.maths.resample import TABLE_MAX, PoissonTable, Resampler, Streams

ELO = 400 / math.log(10)


def battles(k, n, seed, neighbours=None, spread=200.0, tie_rate=0.1):
    """(a, b, score) of ``n`` battles among ``k`` models (true Elo ~ N(1000, spread)); with
    ``neighbours``, each model meets only the models within that many places of it in strength."""
    rng = np.random.default_rng(seed)
    elo = np.sort(rng.normal(1000, spread, k))
    a = rng.integers(0, k, n)
    if neighbours:
        b = np.clip(a + rng.choice([d for d in range(-neighbours, neighbours + 1) if d], n), 0, k - 1)
        a, b = a[a != b], b[a != b]
    else:
        b = (a + rng.integers(1, k, n)) % k
    p = 1 / (1 + 10 ** ((elo[b] - elo[a]) / 400))
    score = np.where(rng.random(len(a)) < tie_rate, 1, np.where(rng.random(len(a)) < p, 2, 0))
    return a.astype(np.int32), b.astype(np.int32), score.astype(np.int8)


def log_of(k, a, b, score):
    cells, counts = cell_counts(k, a, b, score)
    return cells, counts, points_matrix(k, cells, counts)


def centred(theta, label):
    return center(theta, label)


def never_loses(a, b, score, model):
    """The same battles, with ``model`` winning every one it is in (its MLE is infinite)."""
    return a, b, np.where(a == model, 2, np.where(b == model, 0, score)).astype(np.int8)


def test_the_point_fit_on_pairs_is_the_dense_fit_for_dense_sparse_and_lopsided_logs():
    logs = {"dense": (30, battles(30, 20000, 1)), "sparse": (120, battles(120, 6000, 2, neighbours=3)),
            "lopsided": (40, never_loses(*battles(40, 3000, 3), 39))}
    for name, (k, (a, b, score)) in logs.items():
        cells, counts, w = log_of(k, a, b, score)
        fit = fit_log(k, cells, counts)
        assert fit.prior == resolve_prior(w, None) == (PRIOR if name == "lopsided" else 0), name
        dense = centred(fit_bt(w), fit.label)
        assert np.abs(centred(fit.theta, fit.label) - dense).max() * ELO < 1e-6, name


def test_mle_exists_on_pairs_agrees_with_the_dense_closure_round_by_round():
    rng = np.random.default_rng(0)
    for seed in range(12):  # small sparse logs, where rounds split groups and lose every loss of a model
        k = int(rng.integers(3, 12))
        a, b, score = battles(k, int(rng.integers(4, 40)), seed, neighbours=int(rng.integers(1, 3)), spread=400)
        cells, counts, w = log_of(k, a, b, score)
        pairs = Pairs.of(k, cells)
        draws = rng.multinomial(counts.sum(), counts / counts.sum(), size=30)
        n, pts = pairs.stats(draws)
        expected = dense_exists(points_matrix(k, cells, draws))
        n0, w0 = pairs.stats(counts)
        assert (mle_exists(pairs, n, pts, Skeleton.of(pairs, n0[0], w0[0])) == expected).all(), seed
        assert (mle_exists(pairs, n, pts) == expected).all(), seed  # the first round's own skeleton
        assert mle_exists(pairs, n0, w0)[0] == dense_exists(w)


def lost_once(a, b, score, model):
    """``never_loses``, but ``model`` loses its first battle: the MLE exists, and in about a third of
    the bootstrap rounds (those that miss that battle) it does not."""
    a, b, score = never_loses(a, b, score, model)
    first = int(np.flatnonzero((a == model) | (b == model))[0])
    score[first] = 0 if a[first] == model else 2
    return a, b, score


@pytest.mark.parametrize("kind", ["dense", "sparse", "no MLE", "some rounds"])
def test_bootstrap_refits_are_the_dense_fits_of_the_same_resamples(kind):
    k, (a, b, score) = {"dense": (24, battles(24, 30000, 4)), "sparse": (60, battles(60, 2500, 5, neighbours=2)),
                        "no MLE": (30, never_loses(*battles(30, 3000, 6), 0)),
                        "some rounds": (30, lost_once(*battles(30, 3000, 6), 0))}[kind]
    cells, counts, w = log_of(k, a, b, score)
    fit = fit_log(k, cells, counts)
    pairs = fit.pairs
    draws = np.random.default_rng(7).multinomial(counts.sum(), counts / counts.sum(), size=16)
    n, pts = pairs.stats(draws)
    wr = points_matrix(k, cells, draws)
    priors = resolve_prior(wr, None)
    n0, w0 = pairs.stats(counts)
    got = refit(pairs, preconditioner(pairs, n0, w0, fit.theta, fit.prior, fit.label), fit.theta, n, pts, priors,
                fit.prior)
    want = fit_bt(wr, prior=priors, start=fit.theta)
    exists = priors == 0
    assert fit.prior == (PRIOR if kind == "no MLE" else 0)
    assert exists.all() == (kind in ("dense", "sparse")) and exists.any() == (kind != "no MLE")
    # Where the MLE exists, a group split by a round may sit anywhere against the rest: compare within
    # each of the round's own groups.
    from flywheel.maths.pairs import components

    for r in range(len(draws)):
        label = components(pairs, n[r] > 0)
        diff = center(got[r], label) - center(want[r], label)
        assert np.abs(diff).max() * ELO < 0.01, (kind, r, priors[r])


def test_bootstrap_is_the_same_for_any_core_count_and_any_batch_size(monkeypatch):
    k = 50
    cells, counts, _ = log_of(k, *battles(k, 4000, 8, neighbours=4))
    fit = fit_log(k, cells, counts)
    base = bootstrap(fit, counts, 40, seed=3)
    for batch in (1, 300, 10**9):  # one round at a time ... every round of a chunk at once
        assert np.array_equal(bootstrap(fit, counts, 40, seed=3, batch_pairs=batch), base)
    monkeypatch.setattr(boot, "usable_cpus", lambda: 1)
    assert np.array_equal(bootstrap(fit, counts, 40, seed=3), base)
    monkeypatch.setattr(boot, "usable_cpus", lambda: 5)
    assert np.array_equal(bootstrap(fit, counts, 40, seed=3), base)
    assert not np.array_equal(bootstrap(fit, counts, 40, seed=4), base)


def test_the_resampler_draws_the_multinomial_law():
    from scipy import stats

    streams = Streams.of(11)
    # Cells read off the tables, one past TABLE_MAX (numpy's Poisson draw), then the correction.
    counts = np.array([1, 2, 3, 9, 14, 40, TABLE_MAX + 300])
    rs = Resampler(counts)
    draws = np.stack([rs.draw(streams) for _ in range(20000)])
    n, p = counts.sum(), counts / counts.sum()
    assert (draws.sum(axis=1) == n).all()
    se = np.sqrt(n * p * (1 - p) / len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - n * p) < 4 * se)
    cov = np.cov(draws.T)
    expected = n * (np.diag(p) - np.outer(p, p))
    assert np.abs(cov - expected).max() < 0.05 * expected.diagonal().max()
    # The whole joint law of a tiny log: every outcome's frequency against its multinomial probability.
    tiny = np.array([1, 1, 2])
    rs = Resampler(tiny, place=np.array([0, 2, 3]), size=5)  # laid out with gaps, as pairs' slots are
    draws = np.stack([rs.draw(streams) for _ in range(40000)])
    assert (draws[:, [1, 4]] == 0).all()
    seen = {}
    for row in map(tuple, draws[:, [0, 2, 3]]):
        seen[row] = seen.get(row, 0) + 1
    outcomes = [(x, y, 4 - x - y) for x in range(5) for y in range(5 - x)]
    expected = np.array([stats.multinomial.pmf(o, 4, tiny / 4) for o in outcomes]) * len(draws)
    observed = np.array([seen.get(o, 0) for o in outcomes])
    assert set(seen) <= set(outcomes)
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_a_thousand_models_that_each_met_a_few_others_are_rated_fast_and_exactly():
    k = 1000
    a, b, score = battles(k, 60000, 9, neighbours=3, spread=100)
    start = time.perf_counter()
    report = rate(a.astype(str), b.astype(str), np.array(["model_b", "tie", "model_a"])[score], RatingOptions(rounds=20))
    took = time.perf_counter() - start
    cells, counts, w = log_of(k, a, b, score)
    fit = fit_log(k, cells, counts)
    with one_blas_thread():
        dense = to_elo_by_name(fit_bt(w, prior=fit.prior), fit.label)
    assert max(abs(r.rating - dense[r.model]) for r in report.ratings) < 0.01
    assert all(r.lower <= r.rating <= r.upper for r in report.ratings)
    assert took < 20, took  # about 1 s on a shared 2-core machine


def to_elo_by_name(theta, label):
    elo = 1000 + ELO * center(theta, label)
    return {str(i): float(x) for i, x in enumerate(elo)}


def test_the_classic_fit_without_a_prior_stays_finite_where_the_mle_does_not_exist():
    chain = (["a", "b", "c"], ["b", "c", "d"], ["model_a", "model_a", "tie"])  # a > b > c = d: no MLE
    for log in (chain, (["a"] * 3, ["b"] * 3, ["model_a"] * 3)):
        report = rate(*log, RatingOptions(rounds=20, prior=0))  # meaningless ratings, but no error and no inf
        assert all(math.isfinite(x) for r in report.ratings for x in (r.rating, r.lower, r.upper))
        assert report.ratings[0].model == "a"


def test_arrow_backed_columns_give_the_same_report_and_the_same_errors_as_lists():
    import pandas as pd

    a, b, score = battles(12, 3000, 10)
    names = np.array([f"m{i}" for i in range(12)], dtype=object)
    log = {"model_a": names[a], "model_b": names[b], "winner": np.array(["model_b", "tie", "model_a"])[score]}
    df = pd.DataFrame(log).astype("string[pyarrow]")
    options = RatingOptions(rounds=20)
    assert rate(df["model_a"], df["model_b"], df["winner"], options) == rate(*(list(v) for v in log.values()), options)
    bad = df.copy()
    bad.loc[5, "winner"] = "draw"
    with pytest.raises(ValueError, match="unknown winner 'draw'"):
        rate(bad["model_a"], bad["model_b"], bad["winner"], options)
    bad.loc[5, "winner"] = None
    with pytest.raises(ValueError, match="row 6: winner is missing"):
        rate(bad["model_a"], bad["model_b"], bad["winner"], options)


def test_encode_keeps_its_outcomes_and_cell_counts_reads_them_or_scores_alike():
    from flywheel.maths.ratings import encode, encode_scores

    log = (["x", "y", "y", "z"], ["y", "x", "z", "x"], ["model_a", "tie", "model_b", "tie (bothbad)"])
    models, a, b, y = encode(*log)
    assert models == ["x", "y", "z"] and a.dtype == b.dtype == np.int64 and y.tolist() == [1.0, 0.5, 0.0, 0.5]
    _, a8, b8, score = encode_scores(*log)
    assert score.dtype == np.int8 and score.tolist() == [2, 1, 0, 1] and a8.tolist() == a.tolist()
    for got, want in zip(cell_counts(3, a, b, y), cell_counts(3, a8, b8, score)):
        assert got.tolist() == want.tolist()


def test_the_poisson_tables_draw_the_poisson_law():
    from scipy import stats

    means = np.array([1, 2, 7, 30, 31, 30, 400, TABLE_MAX])
    table = PoissonTable(means)
    draws = table.draw(np.random.default_rng(5).random((20000, len(means))))
    for c, m in enumerate(means):
        # Bins of at least 5 expected draws, the tails merged into the end bins.
        edges = np.arange(int(stats.poisson.ppf(1e-3, m)), int(stats.poisson.isf(1e-3, m)) + 1)
        expected = np.diff(np.concatenate([[0.0], stats.poisson.cdf(edges[:-1], m), [1.0]])) * len(draws)
        observed = np.bincount(np.searchsorted(edges[:-1], draws[:, c], side="left"), minlength=len(edges))
        assert stats.chisquare(observed, expected).pvalue > 1e-4, m
        assert draws[:, c].min() >= 0 and abs(draws[:, c].mean() - m) < 5 * np.sqrt(m / len(draws))
    # Deep in both tails (where a guide entry spans many values), each draw is the first k of its
    # row whose tabled CDF reaches u.
    rng = np.random.default_rng(6)
    tails = 10.0 ** -rng.uniform(0, 16, (400, len(means)))
    u = np.where(rng.random(tails.shape) < 0.5, tails, 1 - tails)
    u = np.minimum(u, 1 - 2**-53)
    got = table.draw(u)
    for c in range(len(means)):
        row = table.start[c] + np.arange(table.width)
        assert np.array_equal(got[:, c], table.k[row][np.searchsorted(table.cdf[row], u[:, c], side="left")])
    # The inverse CDF: the answer at u is the first k with CDF(k) >= u, at the table's edges too.
    u = np.array([[0.0, stats.poisson.cdf(3, 7) - 1e-12, stats.poisson.cdf(3, 7) + 1e-12, 1 - 2**-53]])
    got = PoissonTable(np.array([7, 7, 7, 7])).draw(u)[0]
    assert got[:3].tolist() == [0, 3, 4] and got[3] > 7 + 5 * np.sqrt(7)


def test_rounds_drawn_together_are_the_rounds_drawn_one_at_a_time():
    # Enough battles that rounds overshoot and undershoot N and redraw duplicates in the removal.
    counts = np.array([1, 3, 5, 60, 700, 2 * TABLE_MAX, 90, 4])
    rs = Resampler(counts, place=np.array([0, 1, 2, 4, 5, 7, 8, 9]), size=11)
    together = rs.draws(Streams.of(7), 300)
    one, streams = [], Streams.of(7)
    for _ in range(300):
        one.append(rs.draw(streams))
    assert np.array_equal(together, np.stack(one))
    assert (together.sum(axis=1) == counts.sum()).all() and (together[:, [3, 6, 10]] == 0).all()
    assert len({tuple(r) for r in together}) > 250
