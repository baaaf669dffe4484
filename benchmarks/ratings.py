"""Bradley-Terry + bootstrap at scale: ours vs the method Chatbot Arena runs today, on a grid of logs.

The anchor is Chatbot Arena's current published rating method, written here from its
description: the log is aggregated into its unique (model_a, model_b, outcome) rows with counts
(an int32 schedule through ``np.unique``); a weighted logistic loss over those rows is minimised
with scipy's L-BFGS-B (ties as half a win, tolerance 1e-6, at most 100 iterations); the bootstrap
draws every round's row counts from one multinomial over the unique rows and fits the rounds in
a process pool. It preprocesses the log once here (FastChat's report calls
``compute_bootstrap_bt`` and ``compute_bt``, which preprocess it once each).

Ours (``flywheel.maths.leaderboard.rate``): the columns factorized in C; the log aggregated into
cells of unordered pairs and outcomes, held as the list of pairs that met; a Newton point fit;
the rounds drawn as exact multinomial resamples of the battles in seeded chunks on threads and
refitted from the point by chord steps with one shared inverse Hessian (``flywheel/maths/bt_fit.py``).

Both get the same log as a pandas DataFrame with pandas' default (arrow-backed) string columns,
what ``pd.read_json`` or ``pd.read_parquet`` give a user today. Both run at their best on the same
cores (``--threads``; default every core this process may use): ours a thread per core, the
anchor's pool a process per core, each on one BLAS thread (more BLAS threads only spin on a busy
core); and both warm: each runs once on each log before it is timed. The two methods then take
turns, ``--repeats`` times each; a time is the median of its runs, with their range beside it, and
``fastest`` is the anchor's fastest run over our median.

The grid: ``--models`` x ``--battles`` x ``--logs`` per seed: ``uniform`` (every model plays
about as often) and ``skewed`` (pair popularity Zipf-like, as on a real arena, where some pairs
meet thousands of times and others a handful). Then ``--big`` models (1,000; 0: none) on
``--big-battles``, each method timed once, the anchor stopped after ``--anchor-cap`` seconds.

    python -m benchmarks.ratings                                   # the whole grid, seed 0, 3 repeats, and 1,000 models
    python -m benchmarks.ratings --models 64,128 --battles 100000 --big 0
    python -m benchmarks.ratings --quick                           # 32 models, 20,000 battles, 20 rounds

Prints per log the times, the ratio (the anchor's median / ours), the same ratio of CPU seconds
(``cpu``: every thread, and the anchor's pool processes; less swayed than wall time by other work
on a shared machine), each method's largest distance
(Elo) from the exact maximum-likelihood fit (Newton's method on the anchor's loss to machine
precision, not timed; "no MLE" where it does not exist), and the mean 95% CI width of each; then
the ratios' minimum over the grid's cells, and ends with ``ratio: X``, their median.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import statistics
import time
from functools import partial

import numpy as np
import pandas as pd

from flywheel.maths.leaderboard import RatingOptions, rate
from flywheel.maths.ratings import usable_cpus


# -- the logs -----------------------------------------------------------------------------------
def simulate(n: int, k: int, seed: int, skewed: bool) -> pd.DataFrame:
    """``n`` battles among ``k`` models with true Elo ~ N(1000, 200), 10% ties, as the DataFrame a
    user loads a battle log into today (pandas' default string columns). Skewed: pair (i, j) is
    drawn with weight 1 / (rank of i + 1) / (rank of j + 1)."""
    rng = np.random.default_rng(seed)
    elo = rng.normal(1000, 200, k)
    if skewed:
        pop = 1.0 / np.arange(1, k + 1)
        pop = pop[rng.permutation(k)]
        pair = np.outer(pop, pop)
        np.fill_diagonal(pair, 0)
        flat = rng.choice(k * k, size=n, p=(pair / pair.sum()).ravel())
        a, b = flat // k, flat % k
    else:
        a = rng.integers(0, k, n)
        b = (a + rng.integers(1, k, n)) % k
    p = 1 / (1 + 10 ** ((elo[b] - elo[a]) / 400))
    tie = rng.random(n) < 0.1
    win_a = rng.random(n) < p
    names = np.array([f"model-{i:02d}" for i in range(k)], dtype=object)
    winner = np.where(tie, "tie", np.where(win_a, "model_a", "model_b")).astype(object)
    return pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner})


# -- the anchor: Chatbot Arena's current method ---------------------------------------------------
def anchor_preprocess(battles: pd.DataFrame):
    """Unique (a, b, outcome) rows and their counts (an int32 schedule, outcome 2/1/0 = A won /
    tie / B won); models by first appearance."""
    n = len(battles)
    codes, models = pd.factorize(pd.concat([battles["model_a"], battles["model_b"]]))
    schedule = np.full((n, 3), fill_value=1, dtype=np.int32)
    schedule[:, 0], schedule[:, 1] = codes[:n], codes[n:]
    schedule[(battles["winner"] == "model_a").to_numpy(), 2] = 2
    schedule[(battles["winner"] == "model_b").to_numpy(), 2] = 0
    rows, counts = np.unique(schedule, return_counts=True, axis=0)
    return rows[:, :2], rows[:, 2].astype(np.float64) / 2.0, list(models), counts.astype(np.float64)


def anchor_loss(ratings, matchups, outcomes, weights, alpha):
    d = alpha * (ratings[matchups[:, 0]] - ratings[matchups[:, 1]])
    p = 1.0 / (1.0 + np.exp(-d))
    eps = 1e-300
    loss = -((np.log(p + eps) * outcomes + np.log(1.0 - p + eps) * (1.0 - outcomes)) * weights).sum()
    g_rows = -alpha * (outcomes - p) * weights
    grad = np.zeros_like(ratings)
    np.add.at(grad, matchups[:, 0], g_rows)
    np.add.at(grad, matchups[:, 1], -g_rows)
    return loss, grad


def anchor_fit(matchups, outcomes, weights, n_models, alpha, tol=1e-6):
    from scipy.optimize import minimize

    res = minimize(anchor_loss, np.zeros(n_models), args=(matchups, outcomes, weights, alpha), jac=True,
                   method="L-BFGS-B", options={"maxiter": 100, "gtol": tol})
    return res.x


def blas_on_one_thread() -> None:
    """A pool worker's BLAS on one thread, as each of our threads' is: ``workers`` processes then use
    as many cores as our ``workers`` threads, and no BLAS threads spin on a busy core."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def anchor(battles: pd.DataFrame, rounds: int, seed: int, workers: int):
    """(models, point Elo, bootstrap Elo [rounds, K]) the anchor's way, its pool of ``workers``
    processes each on one BLAS thread (the point fit as well)."""
    matchups, outcomes, models, weights = anchor_preprocess(battles)
    alpha = math.log(10)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        point = anchor_fit(matchups, outcomes, weights, len(models), alpha)
    n = int(weights.sum())
    rng = np.random.default_rng(seed)
    boot_weights = rng.multinomial(n, weights / weights.sum(), size=rounds).astype(np.float64) / n
    fit = partial(anchor_fit, matchups, outcomes, n_models=len(models), alpha=alpha)
    with mp.get_context("fork").Pool(workers, initializer=blas_on_one_thread) as pool:
        boots = np.array(pool.map(fit, boot_weights))
    to_elo = lambda r: 1000 + 400 * (r - r.mean(axis=-1, keepdims=True))  # noqa: E731 - same centring as ours
    return models, to_elo(point), to_elo(boots)


# -- the exact fit --------------------------------------------------------------------------------
def exact_mle(battles: pd.DataFrame) -> dict[str, float] | None:
    """Elo of the exact maximum-likelihood fit (mean 1000), by Newton's method on the anchor's rows
    until a step below 1e-12; None where it does not exist (or the log is not connected)."""
    from flywheel.maths.pairs import Pairs, components, mle_exists
    from flywheel.maths.ratings import cell_counts, encode_scores

    models, a, b, score = encode_scores(battles["model_a"], battles["model_b"], battles["winner"])
    k = len(models)
    cells, counts = cell_counts(k, a, b, score)
    pairs = Pairs.of(k, cells)
    n, w = pairs.stats(counts)
    if not mle_exists(pairs, n, w)[0] or components(pairs, n[0] > 0).max() > 0:
        return None
    matchups, outcomes, names, weights = anchor_preprocess(battles)
    x = np.zeros(len(names))
    for _ in range(200):
        d = x[matchups[:, 0]] - x[matchups[:, 1]]
        p = 1.0 / (1.0 + np.exp(-d))
        r, h = (outcomes - p) * weights, p * (1 - p) * weights
        grad = np.bincount(matchups[:, 0], r, len(x)) - np.bincount(matchups[:, 1], r, len(x))
        hess = np.zeros((len(x), len(x)))
        np.add.at(hess, (matchups[:, 0], matchups[:, 1]), -h)
        np.add.at(hess, (matchups[:, 1], matchups[:, 0]), -h)
        hess[np.diag_indices(len(x))] -= hess.sum(axis=1)
        step = np.linalg.solve(hess + hess.diagonal().mean() / len(x), grad)
        x += step * min(1.0, 2.0 / max(float(np.abs(step).max()), 1e-300))
        if np.abs(step).max() < 1e-12:
            break
    elo = 1000 + 400 / math.log(10) * (x - x.mean())
    return dict(zip(names, elo.tolist()))


# -- one log --------------------------------------------------------------------------------------
def best_of(repeats: int, fn, *args, **kw):
    """(the result of the first call, the fastest of ``repeats`` calls in seconds); ``benchmarks.readers``
    times with it."""
    out, times = None, []
    for i in range(repeats):
        t0 = time.perf_counter()
        got = fn(*args, **kw)
        times.append(time.perf_counter() - t0)
        out = got if i == 0 else out
    return out, min(times)


def spread(times: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of the run times."""
    return statistics.median(times), min(times), max(times)


def compare(n: int, k: int, rounds: int, seed: int, skewed: bool, workers: int, repeats: int,
            anchor_cap: float | None = None, warm: bool = True) -> dict:
    """Time ours and the anchor on one log, taking turns; ``warm``: each first runs once on this log,
    untimed. With ``anchor_cap`` (seconds), a run of the anchor that takes longer is stopped, and it
    is not timed again."""
    battles = simulate(n, k, seed, skewed)
    columns = [battles[c] for c in ("model_a", "model_b", "winner")]
    options = RatingOptions(rounds=rounds, seed=seed)
    if warm:
        rate(*columns, options)
        anchor(battles, rounds, seed, workers)
    ours_t, anchor_t, ours_cpu, anchor_cpu, report, got, capped = [], [], [], [], None, None, False
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), cpu_seconds()
        report = rate(*columns, options)
        ours_t.append(time.perf_counter() - t0)
        ours_cpu.append(cpu_seconds() - c0)
        if not capped:
            t0, c0 = time.perf_counter(), cpu_seconds()
            result = anchor(battles, rounds, seed, workers) if anchor_cap is None else within(
                anchor_cap, anchor, battles, rounds, seed, workers)
            anchor_t.append(time.perf_counter() - t0)
            anchor_cpu.append(cpu_seconds() - c0)
            capped, got = result is None, got if result is None else result
    if capped:  # a run past the cap: the anchor's time is "over the cap"
        anchor_t, got = [], None
    exact = exact_mle(battles)
    ours = {r.model: r.rating for r in report.ratings}
    out = {"ours": spread(ours_t), "anchor": spread(anchor_t) if anchor_t else None, "cap": anchor_cap,
           "ours_err": None, "anchor_err": None,
           "width_ours": float(np.mean([r.upper - r.lower for r in report.ratings])), "width_anchor": None}
    if exact is not None:
        out["ours_err"] = max(abs(ours[m] - e) for m, e in exact.items())
    if got is not None:
        models, point, boots = got
        out["width_anchor"] = float(np.mean(np.quantile(boots, 0.975, axis=0) - np.quantile(boots, 0.025, axis=0)))
        if exact is not None:
            out["anchor_err"] = max(abs(point[i] - exact[m]) for i, m in enumerate(models))
        out["ratio"] = out["anchor"][0] / out["ours"][0]
        out["fastest"] = out["anchor"][1] / out["ours"][0]  # the anchor's fastest run over our median
        out["cpu_ratio"] = statistics.median(anchor_cpu) / statistics.median(ours_cpu)
    return out


def within(cap: float, fn, *args):
    """``fn(*args)`` in a child process (with any processes it starts, in a process group of its own),
    or None if it has not returned after ``cap`` seconds (the group is then killed)."""
    import pickle
    import signal

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def target():
        os.setpgrp()
        send.send_bytes(pickle.dumps(fn(*args)))

    child = ctx.Process(target=target)
    child.start()
    try:
        os.setpgid(child.pid, child.pid)  # as the child does: the group exists whichever runs first
    except OSError:
        pass
    if recv.poll(cap):
        out = pickle.loads(recv.recv_bytes())
        child.join()
        return out
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile
        pass
    child.join()
    return None


def cpu_seconds() -> float:
    """CPU seconds of this process's threads and of its children that have ended (the anchor's pool)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def row(name: str, r: dict) -> str:
    t = lambda s: f"{s[0]:7.3f} ({s[1]:.3f}-{s[2]:.3f})" if s else f"{'-':>21}"  # noqa: E731
    e = lambda x: f"{x:8.4f}" if x is not None else f"{'no MLE':>8}"  # noqa: E731
    anchor = t(r["anchor"]) if r["anchor"] else f"over {r['cap']:g} s".rjust(21)
    ratio = (f"{r['ratio']:6.1f}  {r['fastest']:7.1f}  {r['cpu_ratio']:6.1f}" if "ratio" in r
             else f"{'-':>6}  {'-':>7}  {'-':>6}")
    anchor_err = e(r["anchor_err"]) if r["anchor"] else f"{'-':>8}"
    width = f"{r['width_ours']:6.2f} / " + (f"{r['width_anchor']:.2f}" if r["width_anchor"] is not None else "-")
    return f"{name:>24}  {t(r['ours'])}  {anchor}  {ratio}  {e(r['ours_err'])}  {anchor_err}  {width}"


def ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="64,128,256", help="comma-separated model counts of the grid")
    ap.add_argument("--battles", default="100000,1000000", help="comma-separated battle counts of the grid")
    ap.add_argument("--logs", default="uniform,skewed", help="uniform, skewed or both")
    ap.add_argument("--rounds", type=int, default=100, help="bootstrap rounds")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (a grid each)")
    ap.add_argument("--threads", type=int, default=0,
                    help="cores for both: ours runs a thread on each, the anchor's pool a process on each "
                         "(0: every core this process may use)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per method and log; a time is their median")
    ap.add_argument("--big", type=int, default=1000, help="models of the extra large rows (0: none)")
    ap.add_argument("--big-battles", type=int, default=1_000_000, help="battles of the large rows")
    ap.add_argument("--anchor-cap", type=float, default=120.0,
                    help="seconds: on the large rows the anchor is stopped after this long")
    ap.add_argument("--quick", action="store_true", help="32 models, 20,000 battles, 20 rounds, no large rows")
    args = ap.parse_args()
    if args.quick:
        args.models, args.battles, args.rounds, args.big = "32", "20000", 20, 0
    cores = sorted(os.sched_getaffinity(0))
    if args.threads:  # ours sizes its thread pool by this affinity, and the anchor's pool inherits it
        os.sched_setaffinity(0, cores[:args.threads])
    args.workers = usable_cpus()
    models, sizes, seeds = ints(args.models), ints(args.battles), ints(args.seeds)
    logs = [x.strip() for x in args.logs.split(",") if x.strip()]
    if not models or not sizes or not seeds or not logs or any(x not in ("uniform", "skewed") for x in logs):
        raise SystemExit("--models, --battles, --seeds: comma-separated numbers; --logs: uniform, skewed or both")
    print(f"{args.rounds} bootstrap rounds on {args.workers} core(s): ours on {args.workers} thread(s), the anchor's "
          f"bootstrap on {args.workers} process(es), each on one BLAS thread; each first runs once on each log, "
          f"untimed; times in seconds: median (min-max) of {args.repeats} runs, ours and the anchor taking turns; "
          "fastest: the anchor's fastest run over our median")
    print(f"{'log':>24}  {'ours s':>21}  {'anchor s':>21}  {'ratio':>6}  {'fastest':>7}  {'cpu':>6}  {'ours-MLE':>8}  "
          f"{'anch-MLE':>8}  CI width ours / anchor")
    warm = simulate(1000, 4, 0, False)  # warm-up: imports (pandas, numpy's linalg, scipy) are not timed
    rate(warm["model_a"], warm["model_b"], warm["winner"], RatingOptions(rounds=2))
    anchor(warm, 2, 0, 1)
    cells: list[tuple[str, dict]] = []
    for seed in seeds:
        for k in models:
            for n in sizes:
                for log in logs:
                    name = f"{k} models {n:,} {log}-{seed}"
                    r = compare(n, k, args.rounds, seed, log == "skewed", args.workers, args.repeats)
                    cells.append((name, r))
                    print(row(name, r), flush=True)
    if args.big:
        for log in logs:
            name = f"{args.big} models {args.big_battles:,} {log}-{seeds[0]}"
            r = compare(args.big_battles, args.big, args.rounds, seeds[0], log == "skewed", args.workers, 1,
                        anchor_cap=args.anchor_cap, warm=False)  # one cold run each: not in the ratio
            print(row(name, r), flush=True)
    ratios = [(r["ratio"], name) for name, r in cells]
    low = min(ratios)
    errs = [r["ours_err"] for _, r in cells if r["ours_err"] is not None]
    anchor_errs = [r["anchor_err"] for _, r in cells if r["anchor_err"] is not None]
    met = sum(x >= 20 for x, _ in ratios)
    cpu = [r["cpu_ratio"] for _, r in cells]
    fastest = [(r["fastest"], name) for name, r in cells]
    print(f"ratios over {len(ratios)} cells: min {low[0]:.1f} ({low[1]}), median "
          f"{statistics.median(x for x, _ in ratios):.1f}, max {max(ratios)[0]:.1f}; 20x on {met} of {len(ratios)}; "
          f"against the anchor's fastest run: min {min(fastest)[0]:.1f} ({min(fastest)[1]}), median "
          f"{statistics.median(x for x, _ in fastest):.1f}, 20x on {sum(x >= 20 for x, _ in fastest)} of {len(fastest)}; "
          f"CPU-time ratios: min {min(cpu):.1f}, median {statistics.median(cpu):.1f}; "
          f"ours within {max(errs, default=float('nan')):.4f} Elo of the exact MLE where it exists (the anchor: "
          f"{max(anchor_errs, default=float('nan')):.4f}; ratings are rounded to 0.01)")
    print(f"ratio: {statistics.median(x for x, _ in ratios):.1f}")


if __name__ == "__main__":
    main()
