"""How the next iteration's compute is shared among targets."""

from __future__ import annotations

from dataclasses import dataclass, field

from flywheel.config import AllocateConfig


@dataclass(frozen=True)
class Allocation:
    """Per target: its compute share, training steps and battle budget for the next iteration."""

    shares: dict[str, float]
    train_steps: dict[str, int]
    battles: dict[str, int]
    learning_rates: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"shares": self.shares, "train_steps": self.train_steps, "battles": self.battles,
                "learning_rates": self.learning_rates}


def allocate(cfg: AllocateConfig, targets: list[str], steps_per_target: int, battles_per_target: int,
             history: dict[str, list[float]] | None = None) -> Allocation:
    """``uniform``: every target gets an equal share of the total steps and battles.

    ``history`` (target -> eval accuracy per iteration) is where the learning-rate-driven
    policies plug in; the uniform policy records the rates but does not act on them."""
    n = len(targets)
    rates = {}
    for t in targets:
        h = (history or {}).get(t, [])
        rates[t] = round(h[-1] - h[-2], 4) if len(h) >= 2 else 0.0
    shares = {t: round(1.0 / n, 6) for t in targets}
    return Allocation(
        shares=shares,
        train_steps={t: int(round(steps_per_target * n * shares[t])) for t in targets},
        battles={t: int(round(battles_per_target * n * shares[t])) for t in targets},
        learning_rates=rates,
    )
