"""Active evaluation sampling (``evaluate.sampling: active``) against uniform pair sampling, on
simulated arenas whose true strengths are known.

Per seed: ``--models`` models with Elo strengths drawn from a normal law of spread ``--spread``.
Battles follow Davidson's Bradley-Terry model with ties (``--tie-model davidson``, the default):
a tie is likelier the closer the pair, ``--ties`` between equal models. (``--tie-model flat`` ties
a share of every battle whatever the strengths; a Bradley-Terry fit that scores ties as half a
win then pulls lopsided pairs together, up to 2.5 logits at spread 400, so its "known strengths"
are not what the fit estimates, and the fit's intervals credit lopsided battles with information
they do not carry.) ``uniform`` draws each battle's pair uniformly from all pairs (Chatbot Arena's
baseline); ``active`` draws rounds of ``--round`` battles with flywheel.active_eval.choose_round
(the same code the evaluate stage runs). At each budget both are scored on the same fit and the
same intervals, averaged over ``--reps`` streams of battle outcomes per arena:

- ranking accuracy: the share of model pairs the leaderboard orders confidently (the 95%
  interval of their difference excludes 0) and rightly (as the true strengths do);
- mean CI width: the mean width of the models' 95% intervals (Elo), from the fit's curvature.

Per seed and metric, the ratio of battles uniform needs for its value at the largest budget to
the battles active needs for the same value, on isotonic fits (benchmarks/stats.py); the seed's
ratio is the smaller of the two (active must match uniform on both). ``ratio:`` is the median
over seeds, with the geometric mean and its 95% CI beside it. Beside each seed: the best any
choice of pairs could do on mean CI width if the true strengths were known in advance
(``design_bound``), the ceiling of the CI width ratio.

    python -m benchmarks.active_eval --seeds 5,6,7,8,9 [--spread 400]
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

from benchmarks.stats import budget_ratio, mean_ci, parse_seeds
from flywheel.active_eval import Z95, choose_round, ci_widths, fit_with_cov, information

LN10_400 = math.log(10) / 400


def ranking_accuracy(theta: np.ndarray, cov: np.ndarray, truth: np.ndarray) -> float:
    """The share of model pairs the leaderboard orders confidently and rightly: the 95% interval
    of their rating difference excludes 0, on the side of the true order. (Plain order agreement
    saturates early on any spread of strengths, where near-equal pairs stay a coin toss; this
    measure keeps rising with what the battles resolve.)"""
    i, j = np.triu_indices(len(truth), 1)
    d = theta[i] - theta[j]
    se = np.sqrt(np.clip(cov[i, i] + cov[j, j] - 2 * cov[i, j], 0, None))
    return float(np.mean((np.abs(d) > Z95 * se) & (np.sign(d) == np.sign(truth[i] - truth[j]))))


def outcome(diff: float, u: float, ties: float, tie_model: str) -> float:
    """A's score (1, 0.5 or 0) in one battle of log-strength difference ``diff`` for a uniform
    draw ``u``. ``flat``: a share ``ties`` of every battle is tied, whatever the strengths, the
    rest won with Bradley-Terry odds. ``davidson`` (Davidson 1970): P(a) : P(tie) : P(b) =
    e^(d/2) : nu : e^(-d/2), with nu such that equal models tie at ``ties``; lopsided pairs
    rarely tie."""
    if tie_model == "flat":
        if u < ties:
            return 0.5
        return 1.0 if (u - ties) / (1 - ties) < 1.0 / (1.0 + math.exp(-diff)) else 0.0
    nu = 2 * ties / (1 - ties)
    ra, rb = math.exp(diff / 2), math.exp(-diff / 2)
    total = ra + rb + nu
    return 1.0 if u < ra / total else 0.5 if u < (ra + nu) / total else 0.0


def simulate(arm: str, truth: np.ndarray, budgets: list[int], seed: int, round_size: int, ties: float,
             width_weight: float, tie_model: str = "davidson", rep: int = 0) -> list[tuple[float, float]]:
    """(ranking accuracy, mean CI width) at each budget for one arm."""
    rng = np.random.default_rng([seed, 0 if arm == "uniform" else 1, rep])
    k = len(truth)
    pairs = [(a, b) for a in range(k) for b in range(k) if a < b]
    w = np.zeros((k, k))
    played, out = 0, []
    for budget in budgets:
        while played < budget:
            n = min(round_size, budget - played)
            if arm == "uniform":
                chosen = [pairs[i] for i in rng.integers(len(pairs), size=n)]
            else:
                theta, cov = fit_with_cov(w)
                chosen = choose_round(theta, cov, pairs, n, width_weight)
            for a, b in chosen:
                score = outcome(truth[a] - truth[b], rng.random(), ties, tie_model)
                w[a, b] += score
                w[b, a] += 1 - score
            played += len(chosen)
        theta, cov = fit_with_cov(w)
        out.append((ranking_accuracy(theta, cov, truth), float(ci_widths(cov).mean())))
    return out


def design_bound(truth: np.ndarray, iters: int = 2000) -> float:
    """The most any choice of pairs can save on mean CI width against uniform pair sampling, to
    first order, when the true strengths are known in advance: the battles ratio
    (uniform's mean sd / the best design's mean sd)^2, the best design found by Frank-Wolfe on
    the share of battles per pair (the mean sd of centred ratings from the expected Fisher
    information, ``information`` at the true strengths). Adaptive rules, which must learn the
    strengths first, do not beat it to first order."""
    k = len(truth)
    i, j = np.triu_indices(k, 1)
    proj = np.eye(k) - 1.0 / k

    def cov(share: np.ndarray) -> np.ndarray:
        w = np.zeros((k, k))
        w[i, j] = share  # a pair's share of the battles (information() reads only w + w.T)
        return np.linalg.pinv(proj @ information(w, truth, prior=0.0) @ proj, hermitian=True)

    def mean_sd(share: np.ndarray) -> float:
        return float(np.sqrt(np.clip(np.diag(cov(share)), 0, None)).mean())

    q = 1.0 / (2.0 + np.exp(truth[i] - truth[j]) + np.exp(truth[j] - truth[i]))  # p(1-p) per pair
    uniform = np.full(len(q), 1.0 / len(q))
    share = uniform.copy()
    for it in range(iters):
        c = cov(share)
        m = c @ np.diag(0.5 / np.sqrt(np.clip(np.diag(c), 1e-12, None))) @ c
        grad = q * (m[i, i] + m[j, j] - 2 * m[i, j])  # how fast each pair's share lowers the mean sd
        step = 2.0 / (it + 3)
        share *= 1 - step
        share[int(np.argmax(grad))] += step
    return (mean_sd(uniform) / mean_sd(share)) ** 2


def one_seed(seed: int, models: int, spread: float, budgets: list[int], round_size: int, ties: float,
             width_weight: float, tie_model: str = "davidson", reps: int = 1) -> dict:
    """Both arms on one arena (the seed's true strengths), each metric averaged over ``reps``
    independent streams of battle outcomes, and the battle ratios read off those averages."""
    truth = np.random.default_rng([seed, 99]).normal(0, spread * LN10_400, size=models)
    res = {}
    for arm in ("uniform", "active"):
        runs = [simulate(arm, truth, budgets, seed, round_size, ties, width_weight, tie_model, r) for r in range(reps)]
        res[arm] = [(statistics.fmean(r[i][0] for r in runs), statistics.fmean(r[i][1] for r in runs))
                    for i in range(len(budgets))]
    r_acc, m_acc = budget_ratio(budgets, [a for a, _ in res["uniform"]], [a for a, _ in res["active"]])
    r_wid, m_wid = budget_ratio(budgets, [-w for _, w in res["uniform"]], [-w for _, w in res["active"]])
    return {"res": res, "acc": (r_acc, m_acc), "width": (r_wid, m_wid), "bound": design_bound(truth)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0,1,2,3,4"])
    ap.add_argument("--models", type=int, default=16)
    ap.add_argument("--spread", type=float, default=200.0, help="standard deviation of the true Elo strengths")
    ap.add_argument("--budgets", default="500,1000,2000,3000,4000,6000", help="battles, ascending")
    ap.add_argument("--round", type=int, default=50, dest="round_size", help="active: battles per round")
    ap.add_argument("--ties", type=float, default=0.1,
                    help="tie share: between equal models (davidson), of every battle (flat)")
    ap.add_argument("--tie-model", choices=("davidson", "flat"), default="davidson",
                    help="davidson: ties likelier the closer the pair (--ties between equal models); flat: --ties of every battle")
    ap.add_argument("--reps", type=int, default=4, help="streams of battle outcomes per seed, averaged")
    ap.add_argument("--width-weight", type=float, default=3.0, help="active: weight of the CI widths")
    args = ap.parse_args()
    seeds, budgets = parse_seeds(args.seeds), [int(b) for b in parse_seeds([args.budgets])]
    print(f"{args.models} models, Elo spread {args.spread:g}, {args.ties:.0%} ties ({args.tie_model}), "
          f"active rounds of {args.round_size}, {args.reps} streams of outcomes per seed")
    runs = [one_seed(s, args.models, args.spread, budgets, args.round_size, args.ties, args.width_weight,
                     args.tie_model, args.reps) for s in seeds]
    print(f"{'battles':>8} | {'ranking accuracy: uniform':>27} {'active':>15} | {'mean CI width: uniform':>24} {'active':>13}")
    for i, b in enumerate(budgets):
        cells = []
        for metric in (0, 1):
            for arm in ("uniform", "active"):
                m, h = mean_ci([r["res"][arm][i][metric] for r in runs])
                cells.append(f"{m:.3f} +- {h:.3f}" if metric == 0 else f"{m:6.1f} +- {h:4.1f}")
        print(f"{b:>8} | {cells[0]:>27} {cells[1]:>15} | {cells[2]:>24} {cells[3]:>13}")
    ratios = []
    for s, r in zip(seeds, runs):
        ratio = min(r["acc"][0], r["width"][0])
        ratios.append(ratio)
        print(f"seed {s}: battles uniform / active for uniform's value at {budgets[-1]}: ranking accuracy "
              f"{r['acc'][1]}{r['acc'][0]:.2f}, CI width {r['width'][1]}{r['width'][0]:.2f} -> {ratio:.2f} "
              f"(CI width, best design knowing the true strengths: {r['bound']:.2f})")
    logs = [math.log(x) for x in ratios]
    g, h = mean_ci(logs)
    print(f"geometric mean {math.exp(g):.2f} (95% CI {math.exp(g - h):.2f}-{math.exp(g + h):.2f}); goal >= 1.5; "
          f"best design knowing the strengths (CI width): median {statistics.median(r['bound'] for r in runs):.2f}")
    print(f"ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
