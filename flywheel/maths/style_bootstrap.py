"""The bootstrap of the style-controlled fit (``flywheel.maths.style_fit``), fast.

Each round resamples the N battles with replacement: N uniform indices, Chatbot Arena's
distribution, kept as a count per battle (``draw_counts``). Its fit is the penalised optimum of
the resampled log, found without visiting every battle at every Newton step:

Around the point fit theta_hat, battle n's logit moves by u_n = c_p . xi_n, where xi_n = (1, x_n)
and c_p = (alpha * (dr[a] - dr[b]), dbeta) for the pair p it belongs to. Expanding each battle's
loss l(z_n + u_n) in u_n, a round's loss becomes, per pair, a polynomial in c_p whose coefficients
are moments of the pair's battles,

    M_m = sum over the pair's battles of  count_n * l^(|m|)(z_n) * xi_n^m      (m: exponents)

one matrix product of the round's counts with per-battle columns fixed for every round (the
loss's derivatives at the point fit times the monomials of xi_n). Newton on the polynomial then
costs O(pairs), not O(battles), per step. The expansion keeps every monomial up to degree
``FULL_ORDER`` and, up to degree ``ORDER``, those with at most one feature factor: a pair's
rating difference moves far more than x . dbeta does. A round in which some battle's logit may
move further than ``U_MAX`` (its bound per pair: the rating difference's move plus the largest
|x_n . dbeta| over the pair's battles), or whose Newton steps do not converge, is refitted exactly
(``fit_style``, warm-started from the expansion's answer); so is every round of a log of fewer than
``EXPAND_MIN`` battles, where the rounds move further and exact refits are cheap. Measured against
exact refits, a round's ratings stay within 0.03 Elo on logs of 100,000 battles and within about
0.15 Elo on logs of 20,000 to 50,000 (a 95% interval's own Monte-Carlo error over 100 rounds is
some Elo), its coefficients within 0.001.

Rounds are drawn and fitted in chunks with seeds spawned from one seed, on a bounded pool of
threads; the chunks depend only on N and the number of rounds, so the result does not depend on
the number of threads. Meanwhile BLAS runs on one thread (``bt_fit.one_blas_thread``).
"""

from __future__ import annotations

import math
from itertools import combinations_with_replacement

import numpy as np

from flywheel.maths.bt_fit import one_blas_thread
from flywheel.maths.ratings import usable_cpus
from flywheel.maths.style_fit import LN10, REG, Design, LossSums, assemble, fit_style

FULL_ORDER = 3  # every monomial of the logits' moves up to this degree
ORDER = 5  # and up to this degree those with at most one feature factor
U_MAX = 0.3  # logits: a round where some battle's logit may move further is refitted exactly
EXPAND_MIN = 20_000  # battles: a smaller log's rounds are all refitted exactly (cheap there, and they move further)
CHUNK_CELLS = 4_000_000  # battles x rounds drawn at once by one thread
BOOT_CHUNKS = 4  # at least this many chunks where there are as many rounds (for the threads)
BLOCK = 1 << 16  # battles per block of pairs whose moment columns are built at once
CACHE_BYTES = 256 << 20  # the columns are kept for every round where they take at most this
MAX_THREADS = 16

Exponent = tuple[int, ...]


def draw_counts(n: int, rounds: int, rng: np.random.Generator) -> np.ndarray:
    """float64[rounds, n]: how often each of n battles is drawn in n uniform draws with
    replacement, per round (Chatbot Arena's resampling of battle indices)."""
    idx = rng.integers(0, n, size=(rounds, n), dtype=np.int32 if n < 2**31 else np.int64)
    out = np.empty((rounds, n))
    for r in range(rounds):
        out[r] = np.bincount(idx[r], minlength=n)
    return out


# -- the expansion ------------------------------------------------------------------------------
def _derivatives(z: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """d^j/dz^j of the soft-label loss softplus(z) - y z, j = 1..5."""
    p = 1.0 / (1.0 + np.exp(-z))
    s = p * (1.0 - p)
    return [p - y, s, s * (1.0 - 2.0 * p), s * (1.0 - 6.0 * s), s * (1.0 - 2.0 * p) * (1.0 - 12.0 * s)]


def _minus(m: Exponent, v: int) -> Exponent:
    """m with one power fewer of variable ``v``."""
    return m[:v] + (m[v] - 1,) + m[v + 1:]


def _step_down(m: Exponent) -> tuple[Exponent, int]:
    """(m less one power of its last variable, that variable)."""
    v = max(i for i, e in enumerate(m) if e)
    return _minus(m, v), v


def _kept(dim: int) -> list[Exponent]:
    """The expansion's monomials in ``dim`` variables (variable 0: the rating difference), by degree."""
    out = []
    for j in range(1, ORDER + 1):
        for c in combinations_with_replacement(range(dim), j):
            m = tuple(c.count(v) for v in range(dim))
            if j <= FULL_ORDER or sum(m[1:]) <= 1:
                out.append(m)
    return out


def _plus(m: Exponent, *vs: int) -> Exponent:
    """m with one more power of each variable in ``vs``."""
    return tuple(e + vs.count(i) for i, e in enumerate(m))


def _scaled_powers(base: np.ndarray, exponents: list[Exponent]) -> np.ndarray:
    """float64[..., len(exponents)]: prod base_v^e_v / e_v! per exponent tuple (``base`` [..., V];
    every tuple's ``_step_down`` comes before it)."""
    out = np.empty(base.shape[:-1] + (len(exponents),))
    row = {}
    for i, e in enumerate(exponents):
        if sum(e) == 0:
            out[..., i] = 1.0
        else:
            down, v = _step_down(e)
            np.multiply(out[..., row[down]], base[..., v] / e[v], out=out[..., i])
        row[e] = i
    return out


class Expansion:
    """One log's loss expanded around the point fit ``theta_hat`` (see the module's docstring).

    A pair's part of a round's loss is ``sum over m of M_m * c^m / m!`` (``m! = prod m_i!``); its
    gradient in c_a is ``sum over q of M_(q + e_a) * c^q / q!`` and its Hessian in (c_a, c_b)
    ``sum over q of M_(q + e_a + e_b) * c^q / q!``. The rows a pair keeps for itself (the gradient
    and Hessian in the rating difference, c_0) are formed per pair; the feature rows are summed over
    the pairs, which is one batched matrix product per Newton step."""

    def __init__(self, d: Design, theta_hat: np.ndarray, alpha: float):
        self.d, self.alpha = d, alpha
        self.theta_hat = np.asarray(theta_hat, dtype=np.float64)
        dim = d.f + 1
        z = alpha * np.repeat(self.theta_hat[d.pair_a] - self.theta_hat[d.pair_b], d.sizes)
        z += d.x @ self.theta_hat[d.k:]
        self.ders = _derivatives(z, d.y)
        self.xi = np.vstack([np.ones((1, d.n)), d.x.T])  # [F + 1, N]
        self.x_max = np.maximum.reduceat(np.abs(d.x), d.starts, axis=0) if d.n else np.zeros((0, d.f))  # [P, F]
        self.channels = _kept(dim)
        index = {m: i for i, m in enumerate(self.channels)}
        # The powers q the gradient and Hessian need (q + e_a, or q + e_a + e_b, is kept), each split
        # into its power of c_0 and its feature part: c^q / q! = c_0^j / j! * (the feature part's, per round).
        wanted = {_minus(m, a) for m in self.channels for a in range(dim) if m[a]}
        self.orders = 1 + max(q[0] for q in wanted)  # c_0^j for j < orders
        feats = {q[1:] for q in wanted}
        for e in sorted(feats, key=sum, reverse=True):  # and what each is built from
            while sum(e):
                e = _step_down(e)[0]
                feats.add(e)
        self.feature_parts = sorted(feats, key=lambda e: (sum(e), e[::-1]))
        part = {e: i for i, e in enumerate(self.feature_parts)}

        def entry(*vs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """(channels, powers of c_0, feature parts) of the terms of one gradient/Hessian entry."""
            got = [(index[_plus(q, *vs)], q[0], part[q[1:]]) for q in sorted(wanted) if _plus(q, *vs) in index]
            return tuple(np.array(col, dtype=np.int64) for col in zip(*got))

        f = d.f
        self.own = [entry(0), entry(0, 0)] + [entry(0, v) for v in range(1, f + 1)]  # g_0, h_00, h_0f per pair
        self.shared = [entry(v) for v in range(1, f + 1)] + [entry(v, w) for v in range(1, f + 1)
                                                             for w in range(v, f + 1)]  # g_f, h_fg summed
        self.hb_index = np.zeros((f, f), dtype=np.int64)  # which shared row holds h_fg
        for i, (v, w) in enumerate([(a, b) for a in range(f) for b in range(a, f)]):
            self.hb_index[v, w] = self.hb_index[w, v] = f + i
        bounds = np.r_[d.starts, d.n]
        self.blocks = []  # (first pair, last pair + 1): at most BLOCK battles (or one pair)
        first = 0
        for p in range(1, len(d.starts) + 1):
            if p == len(d.starts) or bounds[p + 1] - bounds[first] > BLOCK:
                self.blocks.append((first, p))
                first = p
        self._cache: dict[int, np.ndarray] = {}
        self._cacheable = d.n * len(self.channels) * 8 <= CACHE_BYTES
        if self._cacheable:  # built now, once, rather than by each thread at its first round
            for block in range(len(self.blocks)):
                self._columns(block)

    def _columns(self, block: int) -> np.ndarray:
        """float64[channels, battles of the block]: l^(|m|)(z_n) * xi_n^m per channel m."""
        if block in self._cache:
            return self._cache[block]
        bounds = np.r_[self.d.starts, self.d.n]
        lo, hi = bounds[self.blocks[block][0]], bounds[self.blocks[block][1]]
        xi = self.xi[:, lo:hi]
        out = np.empty((len(self.channels), hi - lo))
        row = {}
        for i, m in enumerate(self.channels):  # each monomial from one of a degree lower
            down, v = _step_down(m)
            if sum(down) == 0:
                out[i] = xi[v]
            else:
                np.multiply(out[row[down]], xi[v], out=out[i])
            row[m] = i
        for i, m in enumerate(self.channels):  # every monomial built: each row scaled in place
            np.multiply(out[i], self.ders[sum(m) - 1][lo:hi], out=out[i])
        if self._cacheable:
            self._cache[block] = out
        return out

    def moments(self, counts: np.ndarray) -> np.ndarray:
        """float64[R, channels, P]: each round's moments per pair (``counts`` float64[R, N])."""
        d, bounds = self.d, np.r_[self.d.starts, self.d.n]
        out = np.empty((len(d.starts), len(counts), len(self.channels)))
        for block, (first, last) in enumerate(self.blocks):
            cols, lo = self._columns(block), bounds[first]
            for p in range(first, last):
                np.matmul(counts[:, bounds[p]:bounds[p + 1]], cols[:, bounds[p] - lo:bounds[p + 1] - lo].T, out=out[p])
        return np.ascontiguousarray(out.transpose(1, 2, 0))

    def solve(self, moments: np.ndarray, reg: float, tol: float = 1e-5, max_iter: int = 30):
        """(theta float64[R, K + F], ok bool[R]): Newton on each round's expanded loss from the
        point fit, until a step is at most ``tol`` (what is left: about its square); ``ok`` is
        False where the expansion cannot be trusted (see ``U_MAX``): there theta is the expansion's
        answer where it is finite (a start for an exact refit), else the point fit."""
        d, k, f, alpha = self.d, self.d.k, self.d.f, self.alpha
        r, _, p = moments.shape
        own = []  # per entry, per power j of c_0: (the moments of its terms [R, terms, P], their feature parts)
        for ch, j, fp in self.own:
            own.append([(j_, np.ascontiguousarray(moments[:, ch[j == j_]]), fp[j == j_]) for j_ in np.unique(j)])
        ch_s, j_s, fp_s = (np.concatenate(col) for col in zip(*self.shared))
        rows = np.repeat(np.arange(len(self.shared)), [len(e[0]) for e in self.shared])
        delta = np.zeros((r, k + f))
        converged = np.zeros(r, dtype=bool)
        with np.errstate(all="ignore"):
            for _ in range(max_iter):
                c0 = alpha * (delta[:, d.pair_a] - delta[:, d.pair_b])  # [R, P]
                psi = _scaled_powers(c0[:, :, None], [(j,) for j in range(self.orders)])  # [R, P, J]
                sigma = _scaled_powers(delta[:, k:], self.feature_parts)  # [R, S]
                per_pair = [sum(psi[:, :, j_] * (sigma[:, None, fp] @ m)[:, 0] for j_, m, fp in groups)
                            for groups in own]
                a = np.matmul(moments, psi)  # [R, channels, J]: summed over the pairs
                shared = np.zeros((r, len(self.shared)))
                np.add.at(shared.T, rows, (sigma[:, fp_s] * a[:, ch_s, j_s]).T)
                sums = LossSums(g_pair=per_pair[0], g_beta=shared[:, :f], h_pair=per_pair[1],
                                h_cross=np.stack(per_pair[2:], axis=2), h_beta=shared[:, self.hb_index])
                grad, hess = assemble(d, self.theta_hat + delta, sums, alpha, reg)
                step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
                step[converged] = 0.0
                delta -= step
                converged |= np.abs(step).max(axis=1) <= tol
                if converged.all() or not np.all(np.isfinite(delta)):
                    break
            reach = np.zeros(r)
            if p:
                played = moments[:, self.own[1][0][0]] > 0  # the pair has battles in this round
                c0 = np.abs(alpha * (delta[:, d.pair_a] - delta[:, d.pair_b]))  # [R, P]
                # |x_n . dbeta| <= |dbeta| . (the pair's largest |x_n| per feature): where that
                # bound keeps a round within U_MAX, so does the exact reach, which is not needed.
                reach = np.where(played, c0 + np.abs(delta[:, k:]) @ self.x_max.T, 0.0).max(axis=1)
                near = np.flatnonzero(reach > U_MAX * (1 - 1e-9))
                if len(near):
                    moved = np.abs(delta[near, k:] @ self.d.x.T)  # [R', N]: |x_n . dbeta|
                    moved = np.maximum.reduceat(moved, d.starts, axis=1) + c0[near]  # [R', P]
                    reach[near] = np.where(played[near], moved, 0.0).max(axis=1)
        finite = np.all(np.isfinite(delta), axis=1)
        ok = converged & finite & (reach <= U_MAX)
        return self.theta_hat + np.where(finite[:, None], delta, 0.0), ok


# -- the bootstrap ------------------------------------------------------------------------------
def bootstrap_style(d: Design, rounds: int, seed: int, theta_hat: np.ndarray, reg: float = REG,
                    alpha: float = LN10, threads: int | None = None, expand: bool = True) -> np.ndarray:
    """float64[rounds, K + F]: the fits of ``rounds`` resamples of the battles around the point fit
    ``theta_hat`` float64[K + F]; ``threads`` (default: one per usable core, at most
    ``MAX_THREADS``) do not change the result. ``expand=False`` (and a log of fewer than
    ``EXPAND_MIN`` battles) refits every round exactly."""
    if rounds <= 0 or d.n == 0:
        return np.tile(np.asarray(theta_hat, dtype=np.float64), (max(rounds, 0), 1))
    per = max(1, min(CHUNK_CELLS // d.n, math.ceil(rounds / BOOT_CHUNKS)))
    sizes = [min(per, rounds - s) for s in range(0, rounds, per)]
    seeds = np.random.SeedSequence(seed).spawn(len(sizes))
    expansion = Expansion(d, theta_hat, alpha) if expand and d.n >= EXPAND_MIN else None

    def chunk(i: int) -> np.ndarray:
        counts = draw_counts(d.n, sizes[i], np.random.default_rng(seeds[i]))
        if expansion is None:
            return fit_style(d, counts, reg, alpha, start=theta_hat)
        theta, ok = expansion.solve(expansion.moments(counts), reg)
        if not ok.all():
            theta[~ok] = fit_style(d, counts[~ok], reg, alpha, start=theta[~ok])
        return theta

    workers = min(len(sizes), threads or min(usable_cpus(), MAX_THREADS))
    with one_blas_thread():  # a thread per core, each on one BLAS thread
        if workers <= 1:
            return np.concatenate([chunk(i) for i in range(len(sizes))])
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            return np.concatenate(list(pool.map(chunk, range(len(sizes)))))
