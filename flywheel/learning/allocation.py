"""How the next iteration's compute is shared among targets (ModelArena).

A target's *learning rate* is its validation-accuracy gain per unit of compute over the last
``window`` iterations: (acc[k] - acc[k-window]) / compute spent in between (training steps, or
steps x parameters). With ``signal: loss`` the same is computed on minus the validation loss of
the reference answers, which moves while exact-match accuracy is still flat. The validation
split steers; the eval split is only reported. Policies turn the rates
into shares of the total training steps and battles:

- ``uniform``: equal shares (the rates are still recorded);
- ``proportional``: share ~ max(rate, 0), smoothed against the previous share
  (``smoothing`` x previous + (1 - smoothing) x new) and floored so that none starves:
  share = floor + (1 - n x floor) x smoothed;
- ``successive-halving``: every ``halving_every`` iterations the slowest ``halving_fraction``
  of the remaining targets is dropped (share 0; at least one remains); the rest share equally;
- ``selective``: only the ``top_k`` fastest train this iteration, equally;
- ``random``: a control arm for ``selective`` (benchmarks/allocation.py): the same concentration
  (``top_k`` targets train, equally), but the targets are drawn at random each iteration, seeded by
  the run's seed and the number of iterations trained, whatever their rates.

For the first ``warmup`` training iterations every policy gives equal shares (no rates yet).
With ``gpu_memory`` set, in-process vLLM targets also get that GPU-memory fraction x their share.

``sharing: mixed`` decides here, with the shares, whether the next iteration's targets pool their
winning traces (as ``cooperative``) or learn from their own (as ``competitive``): pooled from the
start; separate from the first allocation where the spread of the targets' learning rates,
fastest minus slowest and expressed per ``train.steps`` of compute (validation gain per
iteration's worth of training), exceeds ``mixed_spread``; once separate, separate for good
(rates measured on pooled data only drift further apart once the data differ).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from flywheel.config.tree import AllocateConfig


@dataclass(frozen=True)
class Allocation:
    """Per target: its compute share, training steps and battle budget for the next iteration."""

    shares: dict[str, float]
    train_steps: dict[str, int]
    battles: dict[str, int]
    learning_rates: dict[str, float] = field(default_factory=dict)
    policy: str = "uniform"
    acting: bool = False  # False during warm-up (equal shares whatever the policy)
    gpu_memory: dict[str, float] | None = None  # in-process vLLM engines' fraction, with allocate.gpu_memory
    pooled: bool | None = None  # sharing: mixed: whether the next iteration pools the targets' traces
    spread: float | None = None  # sharing: mixed: the rate spread that decided it (None before any rates)

    def to_json(self) -> dict:
        return {"policy": self.policy, "acting": self.acting, "shares": self.shares,
                "train_steps": self.train_steps, "battles": self.battles, "learning_rates": self.learning_rates,
                "gpu_memory": self.gpu_memory, "pooled": self.pooled, "spread": self.spread}

    @classmethod
    def from_json(cls, data: dict) -> Allocation:
        return cls(shares=data["shares"], train_steps=data["train_steps"], battles=data["battles"],
                   learning_rates=data.get("learning_rates", {}), policy=data.get("policy", "uniform"),
                   acting=data.get("acting", False), gpu_memory=data.get("gpu_memory"), pooled=data.get("pooled"),
                   spread=data.get("spread"))


def learning_rates(accuracy: dict[str, list[float]], compute: dict[str, list[float]], window: int) -> dict[str, float]:
    """Per target: accuracy gain per unit of compute over the last ``window`` iterations.
    ``accuracy[t][i]`` is the validation accuracy after iteration i (0 = baseline); ``compute[t][i]``
    the compute spent in iteration i (0 for the baseline)."""
    rates = {}
    for t, acc in accuracy.items():
        if len(acc) < 2:
            rates[t] = 0.0
            continue
        lo = max(0, len(acc) - 1 - window)
        spent = sum(compute.get(t, [])[lo + 1:len(acc)])
        rates[t] = (acc[-1] - acc[lo]) / spent if spent > 0 else 0.0
    return rates


def equal(targets: list[str], among: list[str] | None = None) -> dict[str, float]:
    among = targets if among is None else among
    return {t: (1.0 / len(among) if t in among else 0.0) for t in targets}


def proportional(rates: dict[str, float], previous: dict[str, float], smoothing: float, floor: float) -> dict[str, float]:
    targets = list(rates)
    n = len(targets)
    positive = {t: max(r, 0.0) for t, r in rates.items()}
    total = sum(positive.values())
    new = {t: positive[t] / total for t in targets} if total > 0 else equal(targets)
    prev = {t: previous.get(t, 1.0 / n) for t in targets}
    mixed = {t: smoothing * prev[t] + (1 - smoothing) * new[t] for t in targets}
    norm = sum(mixed.values())
    return {t: floor + (1 - n * floor) * mixed[t] / norm for t in targets}


def successive_halving(rates: dict[str, float], previous: dict[str, float], drop_now: bool, fraction: float) -> dict[str, float]:
    targets = list(rates)
    alive = [t for t in targets if previous.get(t, 1.0) > 0] or targets
    if drop_now and len(alive) > 1:
        n_drop = min(len(alive) - 1, max(1, math.floor(len(alive) * fraction)))
        ranked = sorted(alive, key=lambda t: (rates[t], -targets.index(t)))  # slowest first; ties: later first
        alive = [t for t in alive if t not in ranked[:n_drop]]
    return equal(targets, alive)


def selective(rates: dict[str, float], top_k: int) -> dict[str, float]:
    targets = list(rates)
    ranked = sorted(targets, key=lambda t: (-rates[t], targets.index(t)))
    return equal(targets, ranked[:top_k])


def random_top(targets: list[str], top_k: int, seed: int, trained: int) -> dict[str, float]:
    """``random``: ``top_k`` targets drawn at random (the same draw for the same seed and number of
    iterations trained, on any machine), equal shares among them, as ``selective`` gives its top k."""
    drawn = random.Random(f"allocate-random:{seed}:{trained}").sample(targets, min(top_k, len(targets)))
    return equal(targets, drawn)


def mixed_sharing(rates: dict[str, float], trained: int, steps_per_target: int, spread_limit: float,
                  was_pooled: bool) -> tuple[bool, float | None]:
    """``sharing: mixed``: (pool the next iteration's traces?, the rate spread behind it) - see
    the module docstring."""
    if trained < 1 or len(rates) < 2:
        return was_pooled, None
    spread = (max(rates.values()) - min(rates.values())) * steps_per_target
    return was_pooled and spread <= spread_limit, round(spread, 6)


def allocate(cfg: AllocateConfig, targets: list[str], steps_per_target: int, battles_per_target: int,
             accuracy: dict[str, list[float]] | None = None, compute: dict[str, list[float]] | None = None, *,
             previous: dict[str, float] | None = None, was_pooled: bool = True, seed: int = 0) -> Allocation:
    """The next iteration's allocation after ``len(accuracy[t]) - 1`` training iterations
    (``previous``: the shares of the allocation before, which ``proportional`` smooths against and
    ``successive-halving`` keeps dropped targets out of; ``was_pooled``: whether the iteration just
    trained pooled its traces, with ``sharing: mixed``; ``seed``: the run's seed, which
    ``policy: random`` draws with)."""
    accuracy = accuracy or {t: [] for t in targets}
    compute = compute or {}
    rates = learning_rates({t: accuracy.get(t, []) for t in targets}, compute, cfg.window)
    trained = max((len(a) - 1 for a in accuracy.values()), default=0)
    acting = cfg.policy != "uniform" and trained >= max(cfg.warmup, 1)
    prev = previous or equal(targets)
    if not acting:
        shares = equal(targets)
    elif cfg.policy == "proportional":
        shares = proportional(rates, prev, cfg.smoothing, cfg.floor)
    elif cfg.policy == "successive-halving":
        since = trained - max(cfg.warmup, 1)
        shares = successive_halving(rates, prev, since % cfg.halving_every == 0, cfg.halving_fraction)
    elif cfg.policy == "random":
        shares = random_top(targets, cfg.top_k, seed, trained)
    else:
        shares = selective(rates, cfg.top_k)
    n = len(targets)
    pooled, spread = (mixed_sharing(rates, trained, steps_per_target, cfg.mixed_spread, was_pooled)
                      if cfg.sharing == "mixed" else (None, None))
    return Allocation(
        shares={t: round(shares[t], 6) for t in targets},
        train_steps={t: round(steps_per_target * n * shares[t]) for t in targets},
        battles={t: round(battles_per_target * n * shares[t]) for t in targets},
        learning_rates={t: round(r, 8) for t, r in rates.items()},
        policy=cfg.policy,
        acting=acting,
        gpu_memory=gpu_memory_shares(cfg, shares),
        pooled=pooled,
        spread=spread,
    )


def gpu_memory_shares(cfg: AllocateConfig, shares: dict[str, float]) -> dict[str, float] | None:
    """Each target's GPU-memory fraction: ``gpu_memory`` x its compute share, at least
    ``min_gpu_memory``; None when ``allocate.gpu_memory`` is unset."""
    if cfg.gpu_memory is None:
        return None
    return {t: round(max(cfg.min_gpu_memory, cfg.gpu_memory * s), 4) for t, s in shares.items()}
