"""Active evaluation sampling (``evaluate.sampling: active``) against uniform pair sampling, on
simulated arenas whose true strengths are known.

Per seed: ``--models`` models with Elo strengths drawn from a normal law of spread ``--spread``.
Battles follow Davidson's Bradley-Terry model with ties (``--tie-model davidson``, the default):
a tie is likelier the closer the pair, ``--ties`` between equal models. (``--tie-model flat`` ties
a share of every battle whatever the strengths; a Bradley-Terry fit that scores ties as half a
win then pulls lopsided pairs together, up to 2.5 logits at spread 400, so its "known strengths"
are not what the fit estimates, and the fit's intervals credit lopsided battles with information
they do not carry.) ``uniform`` draws each battle's pair uniformly from all pairs (Chatbot Arena's
baseline); ``active`` draws rounds of ``--round`` battles with flywheel.maths.active_eval.choose_round
(the same code the evaluate stage runs); ``arena`` is Chatbot Arena's own active sampling rule
(Chiang et al. 2024, eq. 9, ``arena_pair``), redrawn after every battle. At each budget every arm
is scored on the same fit and the same intervals, averaged over ``--reps`` streams of battle
outcomes per arena:

- ranking accuracy: the share of model pairs the leaderboard orders confidently (the 95%
  interval of their difference excludes 0) and rightly (as the true strengths do);
- mean CI width: the mean width of the models' 95% intervals (Elo), from the fit's curvature;
- win-matrix width: the mean width of the 95% intervals of every pair's own win rate (what
  Chatbot Arena's rule is built to shrink, and what its 1.54x is measured on; for the scores
  their paper measures 1.05x: 17,200 random battles against 16,400).

Per seed and metric, the ratio of battles uniform needs for its value at the largest budget to
the battles an arm needs for the same value, on isotonic fits (benchmarks/stats.py); the seed's
ratio is the smaller of ranking accuracy's and CI width's (an arm must match uniform on both).
``ratio:`` is ``active``'s median over seeds, with the geometric mean and its 95% CI beside it;
``arena``'s is printed the same way, and each arm's win-matrix ratio beside it. Beside each seed:
the best any choice of pairs could do on mean CI width if the true strengths were known in advance
(``design_bound``), the ceiling of the CI width ratio, and the same for the win-matrix width
(``win_matrix_bound``).

    python -m benchmarks.active_eval --seeds 5,6,7,8,9 [--spread 400]
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

from benchmarks.stats import budget_ratio, mean_ci, parse_seeds
from flywheel.maths.active_eval import Z95, choose_round, ci_widths, fit_with_cov, information

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


def chances(diff: float, ties: float, tie_model: str) -> tuple[float, float]:
    """A's chances to win and to tie in one battle of log-strength difference ``diff``. ``flat``:
    a share ``ties`` of every battle is tied, whatever the strengths, the rest won with
    Bradley-Terry odds. ``davidson`` (Davidson 1970): P(a) : P(tie) : P(b) = e^(d/2) : nu :
    e^(-d/2), with nu such that equal models tie at ``ties``; lopsided pairs rarely tie."""
    if tie_model == "flat":
        return (1 - ties) / (1.0 + math.exp(-diff)), ties
    nu = 2 * ties / (1 - ties)
    ra, rb = math.exp(diff / 2), math.exp(-diff / 2)
    return ra / (ra + rb + nu), nu / (ra + rb + nu)


def outcome(diff: float, u: float, ties: float, tie_model: str) -> float:
    """A's score (1, 0.5 or 0) in one battle of log-strength difference ``diff`` for a uniform
    draw ``u`` (``chances``)."""
    win, tie = chances(diff, ties, tie_model)
    if tie_model == "flat":  # the tie band first: the same draws as this benchmark's earlier figures
        return 0.5 if u < tie else 1.0 if u - tie < win else 0.0
    return 1.0 if u < win else 0.5 if u < win + tie else 0.0


class PairTally:
    """Each pair's battles, and the sum and sum of squares of A's scores in them (a tie: 0.5)."""

    def __init__(self, pairs: int) -> None:
        self.n, self.s, self.s2 = np.zeros(pairs), np.zeros(pairs), np.zeros(pairs)

    def add(self, i: int, score: float) -> None:
        self.n[i] += 1
        self.s[i] += score
        self.s2[i] += score * score

    def variance(self) -> np.ndarray:
        """Each pair's variance of one battle's score, with one virtual win and one virtual loss
        (0.25 for a pair not yet played; never 0 for a pair that has only gone one way)."""
        mean, second = (self.s + 1) / (self.n + 2), (self.s2 + 1) / (self.n + 2)
        return second - mean**2

    def win_matrix_width(self) -> float:
        """The mean width of the pairs' 95% intervals of their win rates (at most 1, the whole
        range; 1 for a pair not yet played)."""
        half = Z95 * np.sqrt(self.variance() / np.maximum(self.n, 1))
        return float(np.where(self.n > 0, np.minimum(2 * half, 1.0), 1.0).mean())


def arena_pair(tally: PairTally, rng: np.random.Generator) -> int:
    """Chatbot Arena's active sampling rule (Chiang et al. 2024, eq. 9): pair a is drawn with
    probability proportional to sqrt(V_a / n_a) - sqrt(V_a / (n_a + 1)), how much one more battle
    shrinks the standard error of its win rate (V_a: the variance of one battle's score, n_a: its
    battles so far). Pairs never played come first (the rule gives them infinite weight)."""
    fresh = np.flatnonzero(tally.n == 0)
    if len(fresh):
        return int(rng.choice(fresh))
    sd = np.sqrt(tally.variance())
    weight = sd / np.sqrt(tally.n) - sd / np.sqrt(tally.n + 1)
    return int(rng.choice(len(weight), p=weight / weight.sum()))


ARMS = ("uniform", "active", "arena")


def simulate(arm: str, truth: np.ndarray, budgets: list[int], seed: int, round_size: int, ties: float,
             width_weight: float, tie_model: str = "davidson", rep: int = 0) -> list[tuple[float, float, float]]:
    """(ranking accuracy, mean CI width, win-matrix width) at each budget for one arm."""
    rng = np.random.default_rng([seed, ARMS.index(arm), rep])
    k = len(truth)
    pairs = [(a, b) for a in range(k) for b in range(k) if a < b]
    index = {p: i for i, p in enumerate(pairs)}
    w, tally = np.zeros((k, k)), PairTally(len(pairs))
    played, out = 0, []
    for budget in budgets:
        while played < budget:
            n = min(round_size, budget - played)
            if arm == "uniform":
                chosen = [pairs[i] for i in rng.integers(len(pairs), size=n)]
            elif arm == "active":
                theta, cov = fit_with_cov(w)
                chosen = choose_round(theta, cov, pairs, n, width_weight)
            else:  # arena: the rule reads every outcome before the next draw
                chosen = [pairs[arena_pair(tally, rng)]]
            for a, b in chosen:
                score = outcome(truth[a] - truth[b], rng.random(), ties, tie_model)
                w[a, b] += score
                w[b, a] += 1 - score
                tally.add(index[(a, b)], score)
            played += len(chosen)
        theta, cov = fit_with_cov(w)
        out.append((ranking_accuracy(theta, cov, truth), float(ci_widths(cov).mean()), tally.win_matrix_width()))
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


METRICS = (("ranking accuracy", 1.0, "{:.3f} +- {:.3f}"), ("mean CI width (Elo)", -1.0, "{:5.1f} +- {:4.1f}"),
           ("win-matrix width", -1.0, "{:.3f} +- {:.3f}"))  # name, sign (higher is better), format


def win_matrix_bound(truth: np.ndarray, ties: float, tie_model: str) -> float:
    """The most any choice of pairs can save on the win-matrix width against uniform pair
    sampling, to first order, knowing every pair's score variance V_a in advance: the mean of
    sqrt(V_a / n_a) over pairs is least for n_a proportional to V_a^(1/3), which saves
    (sum sqrt V)^2 P / (sum V^(1/3))^3 battles over n_a equal (P pairs). Near 1 wherever the pairs'
    variances are alike: there is little for any rule to save there."""
    i, j = np.triu_indices(len(truth), 1)
    sd = []
    for d in truth[i] - truth[j]:
        win, tie = chances(float(d), ties, tie_model)
        sd.append(math.sqrt(win + tie / 4 - (win + tie / 2) ** 2))
    v = np.array(sd)
    return float(v.sum() ** 2 * len(v) / (v ** (2 / 3)).sum() ** 3)


def one_seed(seed: int, models: int, spread: float, budgets: list[int], round_size: int, ties: float,
             width_weight: float, tie_model: str = "davidson", reps: int = 1) -> dict:
    """Every arm on one arena (the seed's true strengths), each metric averaged over ``reps``
    independent streams of battle outcomes, and the battle ratios against uniform read off those
    averages: per arm, one (ratio, mark) per metric."""
    truth = np.random.default_rng([seed, 99]).normal(0, spread * LN10_400, size=models)
    res = {}
    for arm in ARMS:
        runs = [simulate(arm, truth, budgets, seed, round_size, ties, width_weight, tie_model, r) for r in range(reps)]
        res[arm] = [tuple(statistics.fmean(r[i][m] for r in runs) for m in range(len(METRICS)))
                    for i in range(len(budgets))]
    ratios = {arm: [budget_ratio(budgets, [sign * v[m] for v in res["uniform"]], [sign * v[m] for v in res[arm]])
                    for m, (_, sign, _) in enumerate(METRICS)] for arm in ARMS[1:]}
    return {"res": res, "ratios": ratios, "bound": design_bound(truth),
            "wm_bound": win_matrix_bound(truth, ties, tie_model)}


def seed_ratio(ratios: list[tuple[float, str]]) -> float:
    """An arm's ratio on one seed: the smaller of ranking accuracy's and CI width's (the issue's
    two metrics: it must match uniform on both)."""
    return min(ratios[0][0], ratios[1][0])


def geometric(xs: list[float]) -> str:
    g, h = mean_ci([math.log(x) for x in xs])
    return f"geometric mean {math.exp(g):.2f} (95% CI {math.exp(g - h):.2f}-{math.exp(g + h):.2f})"


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
          f"active rounds of {args.round_size}, {args.reps} streams of outcomes per seed; "
          f"arms: {', '.join(ARMS)} (Chatbot Arena's rule)")
    runs = [one_seed(s, args.models, args.spread, budgets, args.round_size, args.ties, args.width_weight,
                     args.tie_model, args.reps) for s in seeds]
    for m, (name, _, fmt) in enumerate(METRICS):
        print(f"{name + ', battles':>28} | " + " ".join(f"{arm:>15}" for arm in ARMS))
        for i, b in enumerate(budgets):
            print(f"{b:>28} | " + " ".join(f"{fmt.format(*mean_ci([r['res'][arm][i][m] for r in runs])):>15}"
                                           for arm in ARMS))
    per_arm: dict[str, list[float]] = {arm: [] for arm in ARMS[1:]}
    for s, r in zip(seeds, runs):
        cells = []
        for arm in ARMS[1:]:
            rs = r["ratios"][arm]
            per_arm[arm].append(seed_ratio(rs))
            cells.append(f"{arm} " + ", ".join(f"{name.split(' (')[0]} {mark}{x:.2f}"
                                               for (name, _, _), (x, mark) in zip(METRICS, rs))
                         + f" -> {seed_ratio(rs):.2f}")
        print(f"seed {s}: battles uniform / arm for uniform's value at {budgets[-1]}: " + "; ".join(cells)
              + f" (best design knowing the true strengths: CI width {r['bound']:.2f}, "
                f"win-matrix width {r['wm_bound']:.2f})")
    for arm in ARMS[1:]:
        wm = statistics.median(r["ratios"][arm][2][0] for r in runs)
        print(f"{arm}: median {statistics.median(per_arm[arm]):.2f}, {geometric(per_arm[arm])}; "
              f"win-matrix width median {wm:.2f}")
    print(f"goal >= 1.5; best design knowing the strengths: CI width median "
          f"{statistics.median(r['bound'] for r in runs):.2f}, win-matrix width median "
          f"{statistics.median(r['wm_bound'] for r in runs):.2f}")
    print(f"ratio: {statistics.median(per_arm['active']):.2f}")


if __name__ == "__main__":
    main()
