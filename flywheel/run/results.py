"""What each stage returns: frozen records, kept on disk as JSON in their historical layout
(``iter-000k/stages/<stage>.json``, and summary.json's entries)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from flywheel.learning.allocation import Allocation
from flywheel.maths.ratings import Rating

R = TypeVar("R", bound="StageRecord")


class StageRecord:
    """JSON round trip: fields by name; a field that is None and marked ``omit_none`` is left out
    (the files never had it then); missing optional fields take their defaults (older runs)."""

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = _plain(value)
        return out

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any]) -> R:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})


def _plain(value: Any) -> Any:
    if isinstance(value, StageRecord | Allocation):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def optional(default: Any = None) -> Any:
    """A field left out of the JSON while it is None."""
    return field(default=default, metadata={"omit_none": True})


@dataclass(frozen=True)
class SelectResult(StageRecord):
    battles: int
    policy: str
    arms: dict[str, int]
    # select.prompt_floor auto: per target, the share of this round's battles spread evenly.
    floors: dict[str, float] | None = optional()
    # Several askers (world.conversation.asker): battles per asker the asker bandits chose.
    askers: dict[str, int] | None = optional()


@dataclass(frozen=True)
class RewardResult(StageRecord):
    """One round's rewards to the bandits: ``select.reward``, per target the battles that rewarded
    its bandits and their mean reward (a target whose bandits had learnt the round before: none)."""

    reward: str
    battles: dict[str, int]
    mean: dict[str, float]


@dataclass(frozen=True)
class EvolveResult(StageRecord):
    """Prompts evolved after the iteration's battles (``select.evolve``): who rewrote them, the arms
    the parents came from with their yield per battle, how many parents, how many new prompts by
    method, and how many rewrites were refused, by why (None where a kill came between the
    prompts' file and this record: the file was kept, the refusals not counted)."""

    evolver: str
    arms: dict[str, float]
    parents: int
    evolved: dict[str, int]
    refused: dict[str, int] | None = optional()


@dataclass(frozen=True)
class TeachResult(StageRecord):
    """One teaching round (``select.teaching``): lessons per target, failed lessons (a generation
    failed: no reward), and per teacher its lessons and the targets' accuracy without and with its
    examples (``{"lessons": n, "without": a, "with": b, "lift": b - a}``)."""

    lessons: dict[str, int]
    failed: int
    teachers: dict[str, dict[str, float]]


@dataclass(frozen=True)
class BattleResult(StageRecord):
    planned: int
    logged: int
    played_here: int


@dataclass(frozen=True)
class JudgeResult(StageRecord):
    judged: int
    judged_here: int
    outcomes: dict[str, int]


@dataclass(frozen=True)
class RateResult(StageRecord):
    leaderboard: list[dict[str, Any]]
    online_elo: dict[str, float]
    target_score_by_arm: dict[str, float]


@dataclass(frozen=True)
class CurateResult(StageRecord):
    sft_examples: int
    dpo_pairs: int
    dropped: dict[str, int]


@dataclass(frozen=True)
class TargetTraining(StageRecord):
    """One target's new version: TRL steps taken, final loss, examples seen."""

    version: str
    steps: int
    loss: float | None
    examples: int
    served_as: str | None = None
    rewards: dict | None = None  # GRPO: answers scored and failed, mean reward, share of flat groups
    reward_model: dict | None = None  # method reward: its folder, steps, pairs, pair accuracy on validation
    sampling: dict | None = None  # own answers sampled before training: answers, flat groups, pass@k by category
    mix: dict | None = optional()  # train.gap_mix: per category, how many times a row appeared in the data, on average
    picks: dict | None = optional()  # train.rl.gap_pick: per category, what its prompts' pick scores were multiplied by
    # the Trainer's logs: per logged step its phase, step (over the phases) and figures (loss, grad_norm, ...)
    log: list[dict] | None = optional()


class PerTarget(StageRecord):
    """A stage result with one record per target, stored as ``{target: record}``; a subclass
    is a dataclass with the field ``targets`` and names its record type in ``item``."""

    item: ClassVar[type[StageRecord]]
    targets: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {t: r.to_json() for t, r in self.targets.items()}

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any]) -> R:
        return cls({t: cls.item.from_json(r) for t, r in data.items()})  # type: ignore[attr-defined,call-arg]


@dataclass(frozen=True)
class TrainResult(PerTarget):
    """Per target (stored as ``{target: TargetTraining}``)."""

    item = TargetTraining
    targets: dict[str, TargetTraining]

    def steps(self, target: str) -> int:
        r = self.targets.get(target)
        return r.steps if r else 0


@dataclass(frozen=True)
class MergeGroup(StageRecord):
    targets: list[str]
    weights: dict[str, float]
    accuracy_before: dict[str, float]


@dataclass(frozen=True)
class MergeResult(StageRecord):
    groups: list[MergeGroup]
    strength: float | None = optional()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MergeResult:
        return cls([MergeGroup.from_json(g) for g in data.get("groups", [])], data.get("strength"))


@dataclass(frozen=True)
class Validation(StageRecord):
    """A target version on the validation split: what steers the run."""

    prompts: int
    accuracy: float
    accuracy_by_category: dict[str, float]
    loss: float | None = optional()
    # conversations: the accuracy of each user turn (``accuracy`` pools every checked turn)
    accuracy_by_turn: list[float] | None = optional()


@dataclass(frozen=True)
class TurnAccuracy(StageRecord):
    """A model's accuracy on one user turn of the eval conversations, with its 95% interval over
    prompts (Wilson's)."""

    accuracy: float
    lower: float
    upper: float
    prompts: int  # prompts whose turn was checked


@dataclass(frozen=True)
class SecondTurn(StageRecord):
    """A model's turn 2 on the eval split, two ways (docs/worlds.md#turn-2-two-ways).

    ``own_answer``: turn 2 on its own first answer, as the eval battles ask it: its reference is
    built on the answer the model gave (each model its own question). ``fixed``: the second turn
    fixed up front, as in MT-Bench: one text and one reference per prompt, written before any model
    answers (on the prompt's reference answer), asked of every model after its own first answer;
    None where no second turn has a checkable answer up front."""

    own_answer: TurnAccuracy
    fixed: TurnAccuracy | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SecondTurn:
        fixed = data.get("fixed")
        return cls(TurnAccuracy.from_json(data["own_answer"]), TurnAccuracy.from_json(fixed) if fixed else None)


@dataclass(frozen=True)
class VersionEval(StageRecord):
    """A model on the eval split (reported only); a target version's validation figures too.
    In a games world ``accuracy`` is the win-or-draw rate over the eval games (by game in
    ``accuracy_by_category``), and ``games`` has the tally against each opponent."""

    accuracy: float
    accuracy_by_category: dict[str, float]
    elo: float | None
    elo_ci: list[float] | None
    elo_by_subset: dict[str, float | None] = field(default_factory=dict)
    eval_loss: float | None = optional()
    validation: Validation | None = optional()
    # games world: per opponent, the games, wins, draws, losses and win-or-draw rate
    games: dict[str, dict[str, float]] | None = optional()
    # conversations: the accuracy of each user turn (``accuracy`` pools every checked turn)
    accuracy_by_turn: list[float] | None = optional()
    # conversations: turn 2 on the model's own first answer and the fixed second turn, with intervals
    turn2: SecondTurn | None = optional()

    @classmethod
    def rated(cls, rating: Rating | None, **figures: Any) -> VersionEval:
        """A model's ``figures`` (the other fields, by name) with its Elo and 95% interval from its
        leaderboard row (``rating``; None: the model is not on the leaderboard)."""
        return cls(elo=rating.rating if rating else None, elo_ci=[rating.lower, rating.upper] if rating else None,
                   **figures)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VersionEval:
        val, turn2 = data.get("validation"), data.get("turn2")
        return cls(accuracy=data["accuracy"], accuracy_by_category=data.get("accuracy_by_category", {}),
                   elo=data.get("elo"), elo_ci=data.get("elo_ci"), elo_by_subset=data.get("elo_by_subset", {}),
                   eval_loss=data.get("eval_loss"), validation=Validation.from_json(val) if val is not None else None,
                   games=data.get("games"), accuracy_by_turn=data.get("accuracy_by_turn"),
                   turn2=SecondTurn.from_json(turn2) if turn2 is not None else None)

    def standing(self, measure: str) -> float | None:
        """The version's standing for steering: its validation ``accuracy``, or minus its
        validation ``loss``. Runs made before the validation split existed have only the eval
        split's figures, and those are used for them."""
        if self.validation is None:
            value = self.accuracy if measure == "accuracy" else self.eval_loss
        else:
            value = self.validation.accuracy if measure == "accuracy" else self.validation.loss
        if value is None:
            return None
        return value if measure == "accuracy" else -value


@dataclass(frozen=True)
class EvalResult(StageRecord):
    eval: dict[str, VersionEval]
    leaderboard: list[dict[str, Any]]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvalResult:
        return cls({m: VersionEval.from_json(v) for m, v in data.get("eval", {}).items()}, data.get("leaderboard", []))


@dataclass(frozen=True)
class Promotion(StageRecord):
    """Whether a target's new version replaced its current one, and on what validation figures
    (accuracy; win-or-draw rate in a games world). ``current`` plays and trains next."""

    candidate: str
    incumbent: str
    promoted: bool
    rule: str
    candidate_validation: float | None = None
    incumbent_validation: float | None = None

    @property
    def current(self) -> str:
        return self.candidate if self.promoted else self.incumbent


@dataclass(frozen=True)
class PromoteResult(PerTarget):
    """Per target (stored as ``{target: Promotion}``)."""

    item = Promotion
    targets: dict[str, Promotion]


@dataclass(frozen=True)
class IterationSummary(StageRecord):
    """One entry of summary.json: what iteration ``k`` did and what it reached."""

    iteration: int
    battles: int
    failed_battles: int
    sft_examples: int
    dpo_pairs: int
    train_steps: dict[str, int]
    eval: dict[str, VersionEval]
    opponents_eval: dict[str, VersionEval]
    allocation: Allocation | None
    merge: MergeResult | None
    arms: dict[str, int]
    usage: dict[str, dict[str, float]]
    judge: dict[str, Any]
    bandit: dict[str, list[dict[str, Any]]]
    wall_s: float
    # per target: the version in use after this iteration, and the promote stage's decision
    current: dict[str, str] = field(default_factory=dict)
    promotion: PromoteResult | None = optional()
    # per target: its method this iteration, GRPO's rewards (scored, failed, mean, flat groups) and
    # a reward model's figures (train.method reward)
    training: dict[str, dict[str, Any]] = field(default_factory=dict)
    # several askers: per target and asker, this iteration's battles and share, bandit pulls and value
    askers: dict[str, list[dict[str, Any]]] | None = optional()

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["allocation"] = out["allocation"] or {}
        out["merge"] = out["merge"] or {}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IterationSummary:
        """An entry of summary.json, its records typed (an empty allocation or merge: None)."""
        entry = super().from_json(data)
        promotion = data.get("promotion")
        return dataclasses.replace(
            entry, eval={m: VersionEval.from_json(v) for m, v in data.get("eval", {}).items()},
            opponents_eval={m: VersionEval.from_json(v) for m, v in data.get("opponents_eval", {}).items()},
            allocation=Allocation.from_json(data["allocation"]) if data.get("allocation") else None,
            merge=MergeResult.from_json(data["merge"]) if data.get("merge") else None,
            promotion=PromoteResult.from_json(promotion) if promotion is not None else None)


STAGE_RESULTS: dict[str, type] = {
    "select": SelectResult, "battle": BattleResult, "judge": JudgeResult, "rate": RateResult,
    "curate": CurateResult, "train": TrainResult, "merge": MergeResult, "evaluate": EvalResult,
    "promote": PromoteResult, "allocate": Allocation,
}
