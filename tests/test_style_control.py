"""Style control (Chatbot Arena's contextual Bradley-Terry): the fit is the objective's exact
optimum, it recovers strengths a length-loving judge distorts, its bootstrap is the exact refit's
and does not depend on the threads, logs bring their style as conv_metadata or as answer texts,
and ``flywheel rate --style-control`` / ``flywheel elo --style-control`` print it or refuse in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from benchmarks.style_control import simulate
from flywheel.config.loading import dump_config, load_config
from flywheel.face.battlelog import BattleLogError, read_battle_columns
from flywheel.face.cli import app
from flywheel.face.exports import export_arena
from flywheel.ground.atomic import atomic_write_text
from flywheel.ground.records import Battle, Judgment
from flywheel.ground.run_view import RunView
from flywheel.ground.store import RunStore
from flywheel.ground.style import FEATURES, conv_metadata, style_of
from flywheel.maths import style_bootstrap
from flywheel.maths.leaderboard import RatingOptions, rate
from flywheel.maths.ratings import encode
from flywheel.maths.style_bootstrap import Expansion, bootstrap_style, draw_counts
from flywheel.maths.style_control import StyleOptions, style_control
from flywheel.maths.style_fit import LN10, REG, design, fit_style, style_features

cli = CliRunner()


def columns(log):
    return [log.battles[c] for c in ("model_a", "model_b", "winner")]


def objective(params, k, a, b, x, y, reg=0.5):
    """The penalised log-loss and its gradient, written out plainly."""
    r, beta = params[:k], params[k:]
    z = LN10 * (r[a] - r[b]) + x @ beta
    p = 1.0 / (1.0 + np.exp(-z))
    loss = -(y * np.log(p) + (1 - y) * np.log(1 - p)).sum() + 0.5 * reg * params @ params
    err = p - y
    grad = reg * params
    np.add.at(grad[:k], a, LN10 * err)
    np.add.at(grad[:k], b, -LN10 * err)
    grad[k:] += x.T @ err
    return loss, grad


def test_the_fit_is_the_exact_optimum_of_the_objective():
    from scipy.optimize import minimize

    log = simulate(3000, 6, seed=3)
    models, a, b, y = encode(*columns(log))
    x = style_features(log.style_a, log.style_b)
    ours = fit_style(design(len(models), a, b, y, x))[0]
    best = minimize(objective, np.zeros(len(models) + 4), args=(len(models), a, b, x, y), jac=True,
                    method="L-BFGS-B", options={"maxiter": 10_000, "gtol": 1e-11, "ftol": 1e-16}).x
    assert np.abs(ours - best).max() < 1e-6  # 0.0004 Elo
    assert abs(ours[:6].sum()) < 1e-9  # the penalty centres the ratings: their sum is 0 at the optimum
    report = style_control(*columns(log), log.style_a, log.style_b, StyleOptions(rounds=0))
    got = {r.model: r.rating for r in report.ratings}
    assert max(abs(got[m] - (1000 + 400 * best[i])) for i, m in enumerate(models)) <= 0.005
    assert [c.coef for c in report.coefficients] == pytest.approx(best[6:], abs=1e-6)
    assert [c.feature for c in report.coefficients] == list(FEATURES)


def test_style_control_recovers_the_strengths_a_length_loving_judge_distorts():
    log = simulate(20_000, 10, seed=5, ties=0.0, effects=(2.0, 0.3, 0.3, 0.2))
    report = style_control(*columns(log), log.style_a, log.style_b, StyleOptions(rounds=60, seed=1))
    plain = rate(*columns(log), RatingOptions(rounds=0)).ratings
    truth = np.array([log.truth[m] for m in sorted(log.truth)])

    def rmse(rows) -> float:
        got = np.array([r.rating for r in sorted(rows, key=lambda r: r.model)])
        return float(np.sqrt(np.mean(((got - got.mean()) - (truth - truth.mean())) ** 2)))

    assert rmse(report.ratings) < 0.6 * rmse(plain), (rmse(report.ratings), rmse(plain))
    tokens = report.coefficients[0]
    assert tokens.feature == "tokens" and 0 < tokens.lower <= tokens.coef <= tokens.upper
    assert all(r.lower <= r.rating <= r.upper for r in report.ratings)
    assert sum(abs(r.rating - log.truth[r.model] + np.mean(list(log.truth.values())) - 1000) < 60
               for r in report.ratings) >= 9


def test_the_bootstrap_is_the_exact_refit_and_does_not_depend_on_the_threads():
    log = simulate(30_000, 12, seed=2)  # over EXPAND_MIN: the rounds are fitted on the expansion
    models, a, b, y = encode(*columns(log))
    d = design(len(models), a, b, y, style_features(log.style_a, log.style_b))
    point = fit_style(d)[0]
    one = bootstrap_style(d, 24, seed=4, theta_hat=point, threads=1)
    assert np.array_equal(one, bootstrap_style(d, 24, seed=4, theta_hat=point, threads=3))
    refit = bootstrap_style(d, 24, seed=4, theta_hat=point, expand=False)
    assert 400 * np.abs(one[:, :12] - refit[:, :12]).max() < 0.15  # Elo: ~100x below the intervals' own noise
    assert np.abs(one[:, 12:] - refit[:, 12:]).max() < 1e-3
    assert 400 * np.abs(one[:, :12] - point[:12]).max() > 5  # the rounds do move
    assert not np.array_equal(one, bootstrap_style(d, 24, seed=5, theta_hat=point))
    small = simulate(3000, 5, seed=2)
    opts = StyleOptions(rounds=24, seed=4)
    assert style_control(*columns(small), small.style_a, small.style_b, opts) == style_control(
        *columns(small), small.style_a, small.style_b, StyleOptions(rounds=24, seed=4, threads=1))


def test_the_expansion_is_trusted_exactly_where_every_battle_moves_within_the_bound(monkeypatch):
    log = simulate(30_000, 12, seed=2)
    models, a, b, y = encode(*columns(log))
    d = design(len(models), a, b, y, style_features(log.style_a, log.style_b))
    point = fit_style(d)[0]
    expansion = Expansion(d, point, LN10)
    counts = draw_counts(d.n, 16, np.random.default_rng(1))
    moments = expansion.moments(counts)
    theta, ok = expansion.solve(moments, REG)
    delta, k, pair_of = theta - point, d.k, np.repeat(np.arange(len(d.starts)), d.sizes)
    # Each round's reach, battle by battle: the largest move of a battle's logit over the pairs it played.
    move = np.abs(delta[:, k:] @ d.x.T) + np.abs(LN10 * (delta[:, d.pair_a] - delta[:, d.pair_b]))[:, pair_of]
    played = np.add.reduceat(counts, d.starts, axis=1)[:, pair_of] > 0
    reach = np.where(played, move, 0.0).max(axis=1)
    assert np.array_equal(ok, reach <= style_bootstrap.U_MAX) and ok.any()
    cuts = np.sort(reach)
    for u_max in (cuts[:-1] + cuts[1:])[::3] / 2:  # between two rounds' reaches: some trusted, some not
        monkeypatch.setattr(style_bootstrap, "U_MAX", u_max)
        assert np.array_equal(expansion.solve(moments, REG)[1], reach <= u_max)


def test_a_feature_that_never_varies_gets_coefficient_zero_and_a_warning():
    log = simulate(2000, 4, seed=1)
    sa, sb = log.style_a.copy(), log.style_b.copy()
    sa[:, 1] = sb[:, 1] = 0  # no headers anywhere
    report = style_control(*columns(log), sa, sb, StyleOptions(rounds=10))
    assert report.coefficients[1].coef == 0.0 and report.coefficients[1].lower == 0.0
    assert any("headers" in w for w in report.warnings)


# -- logs with style -----------------------------------------------------------------------------
def _arena_rows() -> list[dict]:
    """Battles in Chatbot Arena's layout, with the style in each of the ways a log may hold it."""
    flat = {"sum_assistant_a_tokens": 50, "sum_assistant_b_tokens": 10, "header_count_a": 2, "header_count_b": 0,
            "list_count_a": 4, "list_count_b": 1, "bold_count_a": 0, "bold_count_b": 3}
    nested = conv_metadata("# Title\n- a\n- b\n**bold**", "plain")

    def turns(*said):
        return [{"role": r, "content": c} for pair in said for r, c in zip(("user", "assistant"), pair)]

    return [
        {"model_a": "m1", "model_b": "m2", "winner": "model_a", "conv_metadata": flat},
        {"model_a": "m2", "model_b": "m1", "winner": "tie", "conv_metadata": nested},
        {"model_a": "m1", "model_b": "m2", "winner": "model_b",
         "conversation_a": turns(("q", "# one"), ("q2", "- two")), "conversation_b": turns(("q", "short"))},
        {"model_a": "m2", "model_b": "m1", "winner": "model_a", "response_a": "**b** x", "response_b": "y"},
    ]


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_arena_logs_bring_their_style_as_conv_metadata_or_answer_texts(tmp_path, suffix):
    rows = _arena_rows()
    path = tmp_path / f"log.{suffix}"
    if suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == "csv":
        frame = pd.DataFrame(rows)
        for c in ("conv_metadata", "conversation_a", "conversation_b"):
            frame[c] = frame[c].map(lambda v: "" if not isinstance(v, (dict, list)) else json.dumps(v))
        frame.to_csv(path, index=False)
    else:  # Chatbot Arena's dumps: conv_metadata a struct column, the markdown counts structs too
        rows = [rows[1], rows[1]]
        pd.DataFrame(rows).to_parquet(path)
    cols, bad = read_battle_columns(path, style=True)
    assert not bad and len(cols) == len(rows)
    say = lambda *texts: np.sum([style_of(t).vector() for t in texts], axis=0).tolist()  # noqa: E731
    expected = {"flat": ([50, 2, 4, 0], [10, 0, 1, 3]),
                "nested": (say("# Title\n- a\n- b\n**bold**"), say("plain")),
                "turns": (say("# one", "- two"), say("short")),  # every assistant turn counts
                "texts": (say("**b** x"), say("y"))}
    kinds = ["flat", "nested", "turns", "texts"] if suffix != "parquet" else ["nested", "nested"]
    for i, kind in enumerate(kinds):
        assert (cols.style_a[i].tolist(), cols.style_b[i].tolist()) == expected[kind], kind


def test_rows_without_style_are_bad_rows_and_a_log_without_any_is_one_error(tmp_path):
    path = tmp_path / "log.jsonl"
    rows = _arena_rows() + [{"model_a": "m1", "model_b": "m2", "winner": "tie"},
                            {"model_a": "m1", "model_b": "m2", "winner": "tie", "conv_metadata": {"header_count_a": 1}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols, bad = read_battle_columns(path, style=True)
    assert len(cols) == 4 and [str(b) for b in bad] == [
        "log.jsonl:5: no style features (conv_metadata, conversation_a and conversation_b, or response_a and "
        "response_b)",
        "log.jsonl:6: conv_metadata lacks sum_assistant_a_tokens"]
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"model_a": "m1", "model_b": "m2", "winner": "tie"}) + "\n")
    with pytest.raises(BattleLogError, match="style control needs each battle's style features"):
        read_battle_columns(plain, style=True)
    assert len(read_battle_columns(plain)[0]) == 1  # without style control the log is fine


# -- the commands ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def arena_log(tmp_path_factory) -> str:
    log = simulate(3000, 5, seed=4)
    frame = log.battles.astype(object)
    frame["conv_metadata"] = [
        {f"{key}_{s}": int(v) for s, vec in (("a", va), ("b", vb))
         for key, v in zip(("sum_assistant", "header_count", "list_count", "bold_count"), vec)}
        for va, vb in zip(log.style_a, log.style_b)]
    for m in frame["conv_metadata"]:  # Chatbot Arena's key for tokens
        for s in "ab":
            m[f"sum_assistant_{s}_tokens"] = m.pop(f"sum_assistant_{s}")
    path = tmp_path_factory.mktemp("style") / "arena.jsonl"
    frame.to_json(path, orient="records", lines=True)
    return str(path)


def test_rate_style_control_prints_the_board_and_the_coefficients(arena_log, tmp_path):
    got = cli.invoke(app, ["rate", arena_log, "--style-control", "--format", "json", "--bootstrap", "20"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout)
    assert len(out["leaderboard"]) == 5 and [c["feature"] for c in out["style_coefficients"]] == list(FEATURES)
    tokens = out["style_coefficients"][0]
    assert tokens["lower"] <= tokens["coef"] <= tokens["upper"] and tokens["coef"] > 0
    assert "longer answer" in tokens["meaning"]
    plain = json.loads(cli.invoke(app, ["rate", arena_log, "--format", "json", "--bootstrap", "0"]).stdout)
    assert {r["model"] for r in plain} == {r["model"] for r in out["leaderboard"]}
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({r["model"]: r["rating"] for r in out["leaderboard"]}))
    cons = json.loads(cli.invoke(app, ["rate", arena_log, "--style-control", "--format", "json", "--bootstrap", "20",
                                       "--reference", str(ref)]).stdout)["consistency"]
    assert cons["spearman"] == 1.0 and cons["models"] == 5
    table = cli.invoke(app, ["rate", arena_log, "--style-control", "--bootstrap", "5", "--anchor", "model-00=1200"])
    assert table.exit_code == 0 and "[style coefficients: logits per standard deviation" in table.stdout
    assert "model-00" in table.stdout and "1200.0" in table.stdout


def test_rate_style_control_refuses_in_one_line(arena_log, tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"model_a": "m1", "model_b": "m2", "winner": "tie"}) + "\n")
    cases = [(["rate", str(plain), "--style-control"], "style control needs each battle's style features"),
             (["rate", arena_log, "--style-control", "--matrix"], "--style-control and --matrix cannot be combined"),
             (["rate", arena_log, "--style-control", "--by", "category"],
              "--style-control and --by cannot be combined"),
             (["rate", arena_log, "--style-control", "--prior", "0"], "--style-control and --prior cannot be combined"),
             (["rate", arena_log, "--style-control", "--anchor", "nobody=1"], "anchor model 'nobody' has no battles")]
    for args, why in cases:
        got = cli.invoke(app, args)
        assert got.exit_code == 2 and why in got.stderr, (args, got.output)
        assert len(got.stderr.strip().splitlines()) == 1 and got.stdout == ""


def _battle(i: int, a: str, b: str, ra: str, rb: str) -> Battle:
    return Battle(str(i), 1, "eval", f"p{i}", "q", "chat", 1, None, a, b, ra, rb)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory with eval battles whose judge prefers the longer answer (no models)."""
    root = tmp_path_factory.mktemp("style-run") / "run"
    store = RunStore(root)
    atomic_write_text(store.config_path, dump_config(load_config(None, ["rating.bootstrap_rounds=20"])))
    rng = np.random.default_rng(3)
    models = ("student@1", "teacher", "other")
    battles, judgments = [], []
    for i in range(300):
        a, b = rng.choice(len(models), 2, replace=False)
        ra = " ".join(["word"] * int(rng.integers(5, 200))) + ("\n# head\n- item" if rng.random() < 0.4 else "")
        rb = " ".join(["word"] * int(rng.integers(5, 200))) + ("\n**bold**" if rng.random() < 0.4 else "")
        p = 1 / (1 + math.exp(-2 * (len(ra) - len(rb)) / (len(ra) + len(rb))))
        battles.append(_battle(i, models[a], models[b], ra, rb))
        judgments.append(Judgment(str(i), "j", "model_a" if rng.random() < p else "model_b"))
    battles.append(_battle(999, "student@1", "student@1", "a", "b"))  # self-play: left out
    judgments.append(Judgment("999", "j", "model_a"))
    store.append_battles(battles)
    store.append_judgments(judgments, 1, "eval")
    return root


def test_elo_style_control_and_the_export_agree(run_dir, tmp_path):
    got = cli.invoke(app, ["elo", str(run_dir), "--style-control", "--format", "json"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout)
    assert sorted(r["model"] for r in out["leaderboard"]) == ["other", "student@1", "teacher"]
    assert sum(r["battles"] for r in out["leaderboard"]) == 600
    tokens = out["style_coefficients"][0]
    assert tokens["coef"] > 0 and tokens["lower"] > 0  # the judge prefers the longer answer
    log = tmp_path / "arena.jsonl"
    assert export_arena(RunView.open(run_dir), log, "eval") == 301
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    store = {b.battle_id: b for b in RunStore(run_dir).battles(None, "eval")}
    for r in rows:
        b = store[r["battle_id"]]
        assert r["conv_metadata"] == conv_metadata(b.response_a, b.response_b)
    # the exported conv_metadata rates as the run's own texts do (the self-play row is refused by rate)
    rated = cli.invoke(app, ["rate", str(log), "--style-control", "--format", "json", "--skip-bad",
                             "--bootstrap", "20"])
    assert rated.exit_code == 0, rated.output
    again = json.loads(rated.stdout)
    assert [(r["model"], r["rating"]) for r in again["leaderboard"]] == [
        (r["model"], r["rating"]) for r in out["leaderboard"]]
    assert again["style_coefficients"] == out["style_coefficients"]


def test_elo_style_control_refuses_other_views_in_one_line(run_dir, tmp_path):
    for extra, other in ((["--history"], "--history"), (["--lc-baseline", "teacher"], "--lc-baseline")):
        got = cli.invoke(app, ["elo", str(run_dir), "--style-control", *extra])
        assert got.exit_code == 2 and f"{other} and --style-control cannot be combined" in got.stderr, got.output
    got = cli.invoke(app, ["elo", str(tmp_path), "--style-control"])
    assert got.exit_code == 2 and "not a run directory" in got.stderr


def test_the_benchmark_agrees_with_the_anchor_at_small_scale():
    from benchmarks.style_control import compare

    r = compare(simulate(4000, 5, seed=6), rounds=4, seed=0, workers=1, repeats=1)
    assert r["elo_diff"] < 0.5 and r["coef_diff"] < 0.05
    assert r["ours_elo_err"] <= 0.006 and r["ours_coef_err"] < 1e-5
    assert r["rmse_style"] < r["rmse_plain"]
