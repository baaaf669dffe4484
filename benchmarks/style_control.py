"""Style control (a contextual Bradley-Terry fit with 100 bootstrap rounds): ours against Chatbot
Arena's published method, on a simulated log whose judge favours long, formatted answers.

The log: ``--battles`` battles among ``--models`` models, pairs drawn uniformly. Each model has a
true Elo strength (normal, spread ``--spread``) and a style of its own, drawn independently of
its strength: a typical answer length (log-normal tokens around 350, the model's median varying by
a factor of about 1.4) and a rate of markdown headers, list items and bold spans per 500 tokens
(exponential across models). Each answer draws its tokens and its markdown counts (Poisson) from
its model's style. The judge's logit is the strength difference (ln 10 / 400 per Elo) plus
``EFFECTS`` times each raw style ratio (A - B) / (A + B + 1); ``--ties`` of the verdicts are ties.

The anchor is Chatbot Arena's published style-control method (FastChat's ``compute_style_control``
and ``compute_bootstrap_style_control``), written here from its description: the four style
ratios standardised over the log, the penalised log-loss (L2 0.5 on every parameter, ratings
scaled by ln 10) minimised by scipy's L-BFGS-B (at most 100 iterations, gtol 1e-6) from zeros;
the bootstrap draws N battle indices with replacement per round and fits the rounds in a process
pool: a process on each core ours runs a thread on, each on one BLAS thread as ours are, and both
run once on each log before they are timed. Ours: ``flywheel.maths.style_control.style_control`` (batched Newton, the
bootstrap on an expansion around the point fit, threads). Both start from the log's columns and
the answers' style counts; ratings are 400 r + 1000 for both (no shift to a baseline model).

Printed per seed: each method's time (the median of ``--repeats`` runs, the two taking turns, and
their range), the largest difference between the two fits' ratings (Elo) and coefficients, each
fit's largest difference from the exact optimum of the objective (minimised to convergence, not
timed), the mean CI widths, and how close each leaderboard comes to the true strengths (RMSE in
Elo after centring, against a plain Bradley-Terry fit), and ``fastest``, the anchor's fastest run
over our median; it ends with the median of ``fastest`` over the seeds, then ``ratio: X``, the
anchor's median seconds / ours (the median over the seeds).

    python -m benchmarks.style_control                    # 100,000 battles, 32 models, 100 rounds, seed 0
    python -m benchmarks.style_control --seeds 0,1,2      # one log per seed, the median ratio
    python -m benchmarks.style_control --battles 200000 --models 64 --repeats 3
    python -m benchmarks.style_control --quick            # 20,000 battles, 16 models, 20 rounds
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import statistics
import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from benchmarks.ratings import blas_on_one_thread
from flywheel.maths.leaderboard import RatingOptions, rate
from flywheel.maths.ratings import usable_cpus
from flywheel.maths.style_control import StyleOptions, style_control

EFFECTS = (1.0, 0.3, 0.3, 0.2)  # the judge's logits per unit of each raw ratio: tokens, headers, lists, bold
ALPHA = math.log(10.0)
REG = 0.5


@dataclass(frozen=True)
class Log:
    battles: pd.DataFrame  # model_a, model_b, winner (pandas' default strings)
    style_a: np.ndarray  # int64[N, 4]: tokens, headers, list items, bold spans of A's answer
    style_b: np.ndarray
    truth: dict[str, float]  # the models' true Elo


def simulate(n: int, k: int, seed: int, spread: float = 200.0, ties: float = 0.1,
             effects: tuple[float, ...] = EFFECTS) -> Log:
    """A log as the module's docstring describes it."""
    rng = np.random.default_rng(seed)
    elo = rng.normal(1000.0, spread, k)
    log_len = rng.normal(math.log(350.0), 0.35, k)
    rates = rng.exponential([2.0, 4.0, 3.0], size=(k, 3))  # headers, list items, bold per 500 tokens
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k

    def answers(m: np.ndarray) -> np.ndarray:
        tokens = np.maximum(1, np.rint(rng.lognormal(log_len[m], 0.45))).astype(np.int64)
        marks = rng.poisson(rates[m] * (tokens / 500.0)[:, None])
        return np.column_stack([tokens, marks])

    sa, sb = answers(a), answers(b)
    ratio = (sa - sb) / (sa + sb + 1.0)
    logit = ALPHA / 400.0 * (elo[a] - elo[b]) + ratio @ np.asarray(effects)
    won = rng.random(n) < 1.0 / (1.0 + np.exp(-logit))
    winner = np.where(rng.random(n) < ties, "tie", np.where(won, "model_a", "model_b"))
    names = np.array([f"model-{i:02d}" for i in range(k)], dtype=object)
    frame = pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner.astype(object)})
    frame = frame.astype("string[pyarrow]")
    return Log(frame, sa, sb, {str(names[i]): float(elo[i]) for i in range(k)})


# -- the anchor: Chatbot Arena's published method -------------------------------------------------
def anchor_preprocess(log: Log):
    """(models, matchups int[N, 2], features float[N, 4], outcomes float[N]) as FastChat's style
    preprocessing builds them: models in order of first appearance, ratios standardised."""
    battles = log.battles
    n = len(battles)
    codes, models = pd.factorize(pd.concat([battles["model_a"], battles["model_b"]]))
    matchups = np.column_stack([codes[:n], codes[n:]])
    winner = battles["winner"].to_numpy()
    outcomes = np.full(n, 0.5)
    outcomes[winner == "model_a"] = 1.0
    outcomes[winner == "model_b"] = 0.0
    diff = (log.style_a - log.style_b).astype(np.float64)
    total = (log.style_a + log.style_b + 1).astype(np.float64)
    features = diff / total
    features = (features - features.mean(axis=0)) / features.std(axis=0)
    return list(models), matchups, features, outcomes


def anchor_loss(params, k, matchups, features, outcomes):
    ratings, beta = params[:k], params[k:]
    logits = ALPHA * (ratings[matchups[:, 0]] - ratings[matchups[:, 1]]) + features @ beta
    p = 1.0 / (1.0 + np.exp(-logits))
    eps = 1e-300
    loss = -(outcomes * np.log(p + eps) + (1.0 - outcomes) * np.log(1.0 - p + eps)).sum() + 0.5 * REG * params @ params
    err = outcomes - p
    grad = REG * params
    np.add.at(grad[:k], matchups[:, 0], -ALPHA * err)
    np.add.at(grad[:k], matchups[:, 1], ALPHA * err)
    grad[k:] -= features.T @ err
    return loss, grad


def anchor_fit(matchups, features, outcomes, idxs=None, *, k, maxiter=100, gtol=1e-6, ftol=None):
    from scipy.optimize import minimize

    if idxs is not None:
        matchups, features, outcomes = matchups[idxs], features[idxs], outcomes[idxs]
    options = {"maxiter": maxiter, "gtol": gtol} | ({} if ftol is None else {"ftol": ftol})
    res = minimize(anchor_loss, np.zeros(k + features.shape[1]), args=(k, matchups, features, outcomes),
                   jac=True, method="L-BFGS-B", options=options)
    return res.x


def anchor(log: Log, rounds: int, seed: int, workers: int):
    """(models, point float[K + 4], bootstrap float[rounds, K + 4]) the anchor's way."""
    from threadpoolctl import threadpool_limits

    models, matchups, features, outcomes = anchor_preprocess(log)
    k = len(models)
    with threadpool_limits(limits=1, user_api="blas"):  # as each of our threads, and each pool process
        point = anchor_fit(matchups, features, outcomes, k=k)
    idxs = np.random.default_rng(seed).integers(0, len(outcomes), size=(rounds, len(outcomes)))
    fit = partial(anchor_fit, matchups, features, outcomes, k=k)
    with mp.get_context("fork").Pool(workers, initializer=blas_on_one_thread) as pool:
        boots = np.array(pool.map(fit, idxs))
    return models, point, boots


def exact(log: Log) -> tuple[list[str], np.ndarray]:
    """The objective minimised to convergence (not timed)."""
    models, matchups, features, outcomes = anchor_preprocess(log)
    return models, anchor_fit(matchups, features, outcomes, k=len(models), maxiter=20_000, gtol=1e-11, ftol=1e-16)


# -- the comparison -------------------------------------------------------------------------------
def timed(repeats: int, *calls):
    """Each call's first result and its ``repeats`` times in seconds, the calls taking turns (so a
    busy spell of the machine falls on both): [(result, times), ...] for ``calls`` (fn, args)."""
    out: list = [None] * len(calls)
    times: list[list[float]] = [[] for _ in calls]
    for i in range(repeats):
        for j, (fn, args) in enumerate(calls):
            t0 = time.perf_counter()
            got = fn(*args)
            times[j].append(time.perf_counter() - t0)
            out[j] = got if i == 0 else out[j]
    return list(zip(out, times))


def rmse_to_truth(rating: dict[str, float], truth: dict[str, float]) -> float:
    names = sorted(truth)
    got = np.array([rating[m] for m in names])
    want = np.array([truth[m] for m in names])
    return float(np.sqrt(np.mean(((got - got.mean()) - (want - want.mean())) ** 2)))


def compare(log: Log, rounds: int, seed: int, workers: int, repeats: int) -> dict:
    cols = [log.battles[c] for c in ("model_a", "model_b", "winner")]
    options = StyleOptions(rounds=rounds, seed=seed)
    style_control(*cols, log.style_a, log.style_b, options)  # both warm on this log: one untimed run each
    anchor(log, rounds, seed, workers)
    (report, ours_t), ((models, point, boots), anchor_t) = timed(
        repeats, (style_control, (*cols, log.style_a, log.style_b, options)), (anchor, (log, rounds, seed, workers)))
    k = len(models)
    ours = {r.model: r for r in report.ratings}
    ours_beta = np.array([c.coef for c in report.coefficients])
    anchor_elo = dict(zip(models, 400 * point[:k] + 1000))
    exact_models, best = exact(log)
    exact_elo = dict(zip(exact_models, 400 * best[:k] + 1000))
    gap = lambda got, want: max(abs(got[m] - want[m]) for m in want)  # noqa: E731
    ours_elo = {m: r.rating for m, r in ours.items()}
    boot_elo = 400 * boots[:, :k] + 1000
    widths_anchor = np.quantile(boot_elo, 0.975, axis=0) - np.quantile(boot_elo, 0.025, axis=0)
    plain = {r.model: r.rating for r in rate(*cols, RatingOptions(rounds=0)).ratings}
    return {
        "ours_t": ours_t, "anchor_t": anchor_t,
        "elo_diff": gap(ours_elo, anchor_elo), "ours_elo_err": gap(ours_elo, exact_elo),
        "anchor_elo_err": gap(anchor_elo, exact_elo),
        "coef_diff": float(np.abs(ours_beta - point[k:]).max()),
        "ours_coef_err": float(np.abs(ours_beta - best[k:]).max()),
        "anchor_coef_err": float(np.abs(point[k:] - best[k:]).max()),
        "width_ours": float(np.mean([r.upper - r.lower for r in report.ratings])),
        "width_anchor": float(widths_anchor.mean()),
        "coef_width_ours": [c.upper - c.lower for c in report.coefficients],
        "coef_width_anchor": list(np.quantile(boots[:, k:], 0.975, axis=0) - np.quantile(boots[:, k:], 0.025, axis=0)),
        "coefs": ours_beta, "rmse_style": rmse_to_truth(ours_elo, log.truth),
        "rmse_plain": rmse_to_truth(plain, log.truth),
    }


def _spread(times: list[float]) -> str:
    return f"{statistics.median(times):.3f} s ({min(times):.3f}-{max(times):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--battles", type=int, default=100_000)
    ap.add_argument("--models", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds, one log each")
    ap.add_argument("--spread", type=float, default=200.0, help="standard deviation of the true Elo strengths")
    ap.add_argument("--ties", type=float, default=0.1, help="the share of verdicts that are ties")
    ap.add_argument("--workers", type=int, default=usable_cpus(),
                    help="the anchor's process pool (default: a process on each core ours runs a thread on)")
    ap.add_argument("--repeats", type=int, default=3, help="each method's time is the median of this many runs")
    ap.add_argument("--quick", action="store_true", help="20,000 battles, 16 models, 20 rounds")
    args = ap.parse_args()
    if args.quick:
        args.battles, args.models, args.rounds = 20_000, 16, 20
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    print(f"{args.battles:,} battles among {args.models} models (Elo spread {args.spread:g}, {args.ties:.0%} ties), "
          f"{args.rounds} bootstrap rounds, seeds {seeds}; the judge adds {EFFECTS} logits per unit of the raw "
          f"style ratios (tokens, headers, lists, bold); ours on {usable_cpus()} thread(s), the anchor's pool on "
          f"{args.workers} process(es), each on one BLAS thread; each runs once on each log untimed, then "
          f"{args.repeats} timed runs each, the two methods taking turns; fastest: the anchor's fastest over our median")
    warm = simulate(2000, 4, 1)  # imports and first calls are not timed
    style_control(*[warm.battles[c] for c in ("model_a", "model_b", "winner")], warm.style_a, warm.style_b,
                  StyleOptions(rounds=2))
    anchor(warm, 2, 0, 1)
    ratios, fastest = [], []
    for seed in seeds:
        log = simulate(args.battles, args.models, seed, args.spread, args.ties)
        r = compare(log, args.rounds, seed, args.workers, args.repeats)
        ratios.append(statistics.median(r["anchor_t"]) / statistics.median(r["ours_t"]))
        fastest.append(min(r["anchor_t"]) / statistics.median(r["ours_t"]))
        print(f"seed {seed}: ours {_spread(r['ours_t'])}; anchor {_spread(r['anchor_t'])}; ratio {ratios[-1]:.1f}; "
              f"fastest {fastest[-1]:.1f}")
        print(f"  ratings: max |ours - anchor| {r['elo_diff']:.4f} Elo; from the exact optimum: ours "
              f"{r['ours_elo_err']:.4f}, anchor {r['anchor_elo_err']:.4f} (ours are rounded to 0.01)")
        print(f"  coefficients {np.round(r['coefs'], 4).tolist()}: max |ours - anchor| {r['coef_diff']:.6f}; from "
              f"the exact optimum: ours {r['ours_coef_err']:.6f}, anchor {r['anchor_coef_err']:.6f}")
        print(f"  mean 95% CI width: ratings ours {r['width_ours']:.2f} / anchor {r['width_anchor']:.2f} Elo; "
              f"coefficients ours {np.round(r['coef_width_ours'], 4).tolist()} / anchor "
              f"{np.round(r['coef_width_anchor'], 4).tolist()}")
        print(f"  RMSE to the true strengths (Elo, centred): style-controlled {r['rmse_style']:.1f}, plain "
              f"Bradley-Terry {r['rmse_plain']:.1f}")
    print(f"against the anchor's fastest run: {statistics.median(fastest):.1f} (median over the logs)")
    print(f"ratio: {statistics.median(ratios):.1f}")


if __name__ == "__main__":
    main()
