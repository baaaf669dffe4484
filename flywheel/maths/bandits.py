"""Multi-armed bandits for choosing what the flywheel spends battles on. Pure numpy, seeded.

Every policy has the same small contract:

- ``select(k, rng) -> int64[k]``: k arm indices for one round (repeats allowed);
- ``update(arms, rewards)``: rewards in [0, 1] for arms pulled in one round;
- ``state() / from_state(d)``: a JSON-serialisable dict and back;
- ``stats() -> list[dict]``: per arm, its pulls and current value estimate.

Policies: ``uniform``; ``ucb`` (UCB1); ``thompson`` (Beta-Bernoulli); ``gaussian`` (Gaussian
Thompson sampling); ``exp3``. ``discount`` (gamma < 1) forgets old rewards geometrically each
round and ``window`` keeps only the last W rounds, for rewards that drift, as they do here: the
target improves every iteration, so an arm that taught a lot yesterday may teach little today.

Batch selection: UCB picks arms one at a time, counting each pick as a virtual pull so a batch
spreads over near-equal arms; Thompson draws a fresh posterior sample per slot; EXP3 samples
its distribution.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

POLICIES = ("uniform", "ucb", "thompson", "gaussian", "exp3")


@dataclass
class Bandit:
    """One bandit over ``arms`` (names). ``policy`` is one of ``POLICIES``."""

    arms: list[str]
    policy: str = "thompson"
    discount: float = 1.0
    window: int = 0
    exploration: float = 1.0  # UCB's c; EXP3's gamma is min(1, exploration * 0.1)
    pulls: np.ndarray = field(init=False)
    reward_sum: np.ndarray = field(init=False)
    reward_sq: np.ndarray = field(init=False)
    log_weights: np.ndarray = field(init=False)
    rounds: int = field(init=False, default=0)
    history: deque = field(init=False)
    total_pulls: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown bandit policy {self.policy!r}; known: {', '.join(POLICIES)}")
        if not 0 < self.discount <= 1:
            raise ValueError(f"discount must be in (0, 1], got {self.discount}")
        if self.window < 0:
            raise ValueError(f"window must be >= 0, got {self.window}")
        if not self.arms:
            raise ValueError("a bandit needs at least one arm")
        n = len(self.arms)
        self.pulls = np.zeros(n)
        self.reward_sum = np.zeros(n)
        self.reward_sq = np.zeros(n)
        self.log_weights = np.zeros(n)
        self.total_pulls = np.zeros(n, dtype=np.int64)
        self.history = deque()

    # -- choosing ---------------------------------------------------------------------------
    def means(self) -> np.ndarray:
        """Current value estimate per arm (posterior mean for Thompson, 0.5 when unpulled)."""
        if self.policy == "thompson":
            return (1 + self.reward_sum) / (2 + self.pulls)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.pulls > 0, self.reward_sum / np.maximum(self.pulls, 1e-12), 0.5)

    def probabilities(self) -> np.ndarray:
        """EXP3's sampling distribution."""
        n = len(self.arms)
        gamma = min(1.0, 0.1 * self.exploration)
        w = np.exp(self.log_weights - self.log_weights.max())
        return (1 - gamma) * w / w.sum() + gamma / n

    def select(self, k: int, rng: np.random.Generator) -> np.ndarray:
        n = len(self.arms)
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        if self.policy == "uniform":
            return rng.integers(0, n, k)
        if self.policy == "exp3":
            return rng.choice(n, size=k, p=self.probabilities())
        if self.policy == "thompson":
            a, b = 1 + self.reward_sum, 1 + (self.pulls - self.reward_sum)
            return np.argmax(rng.beta(a[None, :], b[None, :], size=(k, n)), axis=1)
        if self.policy == "gaussian":
            mean = self.means()
            var = np.where(self.pulls > 1, self.reward_sq / np.maximum(self.pulls, 1) - mean**2, 0.25)
            sd = np.sqrt(np.maximum(var, 1e-4) / np.maximum(self.pulls, 1)) * self.exploration
            sd = np.where(self.pulls > 0, sd, 1.0)
            return np.argmax(mean[None, :] + sd[None, :] * rng.standard_normal((k, n)), axis=1)
        # UCB1 with virtual pulls inside the batch; unpulled arms first, in random order.
        pulls = self.pulls.copy()
        mean = self.means()
        out = np.empty(k, dtype=np.int64)
        tiebreak = rng.random(n) * 1e-9
        for i in range(k):
            total = max(pulls.sum(), 1.0)
            bonus = self.exploration * np.sqrt(2 * math.log(total + 1) / np.maximum(pulls, 1e-12))
            score = np.where(pulls > 0, mean + bonus, np.inf) + tiebreak
            out[i] = int(np.argmax(score))
            pulls[out[i]] += 1
        return out

    # -- learning ---------------------------------------------------------------------------
    def update(self, arms: np.ndarray | list[int], rewards: np.ndarray | list[float]) -> None:
        """One round's feedback. Rewards are clipped to [0, 1]."""
        arms = np.asarray(arms, dtype=np.int64)
        rewards = np.clip(np.asarray(rewards, dtype=np.float64), 0.0, 1.0)
        n = len(self.arms)
        if self.discount < 1:
            for arr in (self.pulls, self.reward_sum, self.reward_sq):
                arr *= self.discount
        if self.policy == "exp3" and len(arms):
            p = self.probabilities()
            # Each pull is one EXP3 step (importance-weighted reward estimates, summed).
            est = np.bincount(arms, weights=rewards / p[arms], minlength=n)
            self.log_weights += min(1.0, 0.1 * self.exploration) * est / n
        round_pulls = np.bincount(arms, minlength=n).astype(float)
        round_sum = np.bincount(arms, weights=rewards, minlength=n)
        round_sq = np.bincount(arms, weights=rewards**2, minlength=n)
        self.pulls += round_pulls
        self.reward_sum += round_sum
        self.reward_sq += round_sq
        self.total_pulls += round_pulls.astype(np.int64)
        if self.window:
            self.history.append((round_pulls, round_sum, round_sq))
            while len(self.history) > self.window:
                old_p, old_s, old_q = self.history.popleft()
                self.pulls -= old_p
                self.reward_sum -= old_s
                self.reward_sq -= old_q
            np.maximum(self.pulls, 0, out=self.pulls)
        self.rounds += 1

    def add_arms(self, names: list[str]) -> None:
        """New arms, unpulled (EXP3: at the mean weight): arms added to a running bandit, as
        evolved prompt cells are. Names it has already are ignored."""
        new = [a for a in dict.fromkeys(names) if a not in self.arms]
        if not new:
            return
        pad = lambda a, fill=0.0: np.concatenate([a, np.full(len(new), fill, dtype=a.dtype)])  # noqa: E731
        self.arms = self.arms + new
        self.pulls, self.reward_sum, self.reward_sq = pad(self.pulls), pad(self.reward_sum), pad(self.reward_sq)
        self.log_weights = pad(self.log_weights, float(self.log_weights.mean()))
        self.total_pulls = pad(self.total_pulls, 0)
        self.history = deque(tuple(pad(x) for x in entry) for entry in self.history)

    # -- persistence and reporting ----------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "arms": self.arms, "policy": self.policy, "discount": self.discount, "window": self.window,
            "exploration": self.exploration, "rounds": self.rounds,
            "pulls": self.pulls.tolist(), "reward_sum": self.reward_sum.tolist(),
            "reward_sq": self.reward_sq.tolist(), "log_weights": self.log_weights.tolist(),
            "total_pulls": self.total_pulls.tolist(),
            "history": [[p.tolist(), s.tolist(), q.tolist()] for p, s, q in self.history],
        }

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Bandit:
        b = cls(list(d["arms"]), d["policy"], d["discount"], d["window"], d["exploration"])
        b.rounds = int(d["rounds"])
        for name in ("pulls", "reward_sum", "reward_sq", "log_weights"):
            setattr(b, name, np.asarray(d[name], dtype=np.float64))
        b.total_pulls = np.asarray(d["total_pulls"], dtype=np.int64)
        b.history = deque((np.asarray(p), np.asarray(s), np.asarray(q)) for p, s, q in d["history"])
        return b

    def stats(self) -> list[dict[str, Any]]:
        means = self.means()
        return [{"arm": a, "pulls": int(self.total_pulls[i]), "effective_pulls": round(float(self.pulls[i]), 2),
                 "value": round(float(means[i]), 4)} for i, a in enumerate(self.arms)]


def gini(values: np.ndarray | list[float]) -> float:
    """The Gini coefficient of non-negative ``values``: 0 when all are equal, approaching 1 when
    one holds everything (mean absolute difference over twice the mean); 0 for all zeros."""
    x = np.clip(np.asarray(values, dtype=np.float64), 0, None)
    if len(x) < 2 or x.sum() <= 0:
        return 0.0
    return float(np.abs(x[:, None] - x[None, :]).mean() / (2 * x.mean()))


def pfsp_weights(win_rates: np.ndarray, mode: str = "hard", p: float = 2.0) -> np.ndarray:
    """Prioritized fictitious self-play weights over opponents from the target's win rate x
    against each: ``hard`` = (1 - x)^p (favour opponents the target loses to), ``variance`` =
    x (1 - x) (favour even matches). Normalised to sum to 1; all-zero weights become uniform."""
    x = np.clip(np.asarray(win_rates, dtype=np.float64), 0, 1)
    if mode == "hard":
        w = (1 - x) ** p
    elif mode == "variance":
        w = x * (1 - x)
    else:
        raise ValueError(f"unknown PFSP mode {mode!r}; use 'hard' or 'variance'")
    total = w.sum()
    return w / total if total > 0 else np.full(len(x), 1 / len(x))


def validation_progress(gains: list[dict[str, float]], weight: float) -> dict[str, float]:
    """The ``validation-progress`` reward per cell from the target's training steps, oldest first
    (``flywheel.arena.bandit_rewards.cell_gains`` of each step's version against the version it was
    trained from): |m| x 2, at most 1 (the scale of ``progress``), where m is an exponential moving
    average of the cell's gains that starts at the first step's gain and gives each later step ``weight``: an older
    step's gain fades by (1 - weight) per step, as the target drifts away from it, and noise that
    goes up and down cancels before the absolute value. Empty before the first training step."""
    ema: dict[str, float] = {}
    for step in gains:
        for c, g in step.items():
            ema[c] = g if c not in ema else weight * g + (1 - weight) * ema[c]
    return {c: min(1.0, abs(m) * 2) for c, m in sorted(ema.items())}
