"""One config tree for the whole flywheel: a pydantic model per section, every field with a
default and a description (``parts`` holds the players', the judge's and Hanabi's,
``world_settings`` the world's, ``train_settings`` the train section's, ``select_settings`` the
select section's, ``evolve_settings`` and ``teach_settings`` its evolve and teaching sections).
Loading it from YAML, with overrides, is ``loading``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from flywheel.config.evolve_settings import PROCEDURAL, EvolveConfig  # noqa: F401 - the tree's select.evolve
from flywheel.config.parts import JudgeConfig, PlayerConfig, Share, Strict
from flywheel.config.select_settings import SelectConfig
from flywheel.config.teach_settings import TeachingConfig  # noqa: F401 - the tree's select.teaching
from flywheel.config.train_settings import (  # noqa: F401 - the tree's train section
    ONLINE_METHODS,
    RL_METHODS,
    Method,
    RLConfig,
    TrainConfig,
    picks_online,
    picks_prompts,
    samples_first,
)
from flywheel.config.world_settings import (  # noqa: F401 - the tree's world section
    CATEGORIES,
    ConversationConfig,
    GamesConfig,
    ModelSpec,
    PromptPoolConfig,
    TaskSuiteConfig,
    WorldConfig,
)

# What each task runner but the default needs beyond the package: the modules its extra installs.
RUNNER_MODULES: dict[str, tuple[str, ...]] = {"dask": ("prefect_dask",), "ray": ("prefect_ray", "ray")}


def runner_needs(kind: str) -> str:
    """The one line that says what ``run.task_runner: <kind>`` needs installed, and how."""
    names = " and ".join(m.replace("_", "-") for m in RUNNER_MODULES[kind])
    return f"run.task_runner {kind} needs {names}: pip install 'flywheel[{kind}]'"


class RunConfig(Strict):
    name: str | None = Field(None, description="Run id (directory name); default: a timestamp.")
    root: Path = Field(Path("data/runs"), description="Directory that holds run directories.")
    iterations: int = Field(4, ge=1, le=1000, description="Flywheel iterations after the baseline.")
    seed: int = Field(0, description="Seed for selection, seating, training and bootstraps.")
    shard_size: int = Field(500, ge=1, description="Battles per log shard (the unit a kill can lose).")
    max_failed_calls: Share = Field(0.9, description="Share of one batch of a player's calls (a shard's answers, "
                                    "an evaluation) that may stay failed after retries, each recorded as failed and "
                                    "never counted; above it the run stops (exit 1) before the batch is used, and "
                                    "--resume asks those calls again (a server that died, say). Calls the budget "
                                    "stopped do not count.")
    cache_dir: Path | None = Field(None, description="Generation cache shared by runs (e.g. data/cache), so a "
                                   "repeated run does not pay twice; default: the run's own cache/. Share it only "
                                   "while models at a path do not change.")
    task_runner: Literal["default", "dask", "ray"] = Field(
        "default", description="Where mapped battle and judgment shards run: Prefect's thread pool, a Dask "
        "cluster (flywheel[dask]) or a Ray instance or cluster (flywheel[ray]).")
    runner_address: str | None = Field(None, description="Address of an existing Dask scheduler or Ray cluster; "
                                       "unset: dask starts a local cluster, ray a local instance.")
    workers: int = Field(1, ge=1, description="Shards at once: threads (default runner), local Dask worker "
                         "processes or a local Ray instance's CPUs. Threads help API players; local models take "
                         "turns in one process.")


class RatingConfig(Strict):
    bootstrap_rounds: int = Field(100, ge=0, description="Bootstrap rounds for the CIs.")
    ci: float = Field(0.95, gt=0, lt=1, description="Confidence level of the intervals.")
    scale: float = Field(400.0, gt=0, description="Elo scale.")
    base: float = Field(10.0, gt=1, description="Elo base.")
    init: float = Field(1000.0, description="Mean rating (the rating at zero log-strength).")
    online_k: float = Field(4.0, gt=0, description="K factor of the online Elo shown for live progress.")
    prior: float | None = Field(None, ge=0, description="Virtual ties of each model against a mean-rated "
                                "reference. Unset: none where the maximum-likelihood fit exists (ratings equal "
                                "Chatbot Arena's fit), 0.1 where it does not (a model that never lost stays finite).")


class CurateConfig(Strict):
    include_target_wins: bool = Field(True, description="Also SFT on the target's own wins (self-distillation).")
    include_target_ties: bool = Field(True, description="Also SFT on the target's own answer where a battle was a "
                                      "tie with both answers good (winner 'tie', never 'tie (bothbad)'): under a "
                                      "verifier, its correct answers that the opponent also got right. With "
                                      "include_target_wins this keeps what the target already knows in its data, "
                                      "which lost battles alone under-represent (the forgetting they cause). "
                                      "Prompt worlds; a games world's draws teach nothing (flywheel/learning/game_curation.py).")
    dedup: bool = Field(True, description="One example per prompt text per iteration.")
    max_completion_chars: int = Field(8192, ge=1, description="Drop longer completions.")
    min_completion_chars: int = Field(1, ge=1, description="Drop shorter completions.")
    min_margin: float = Field(0.0, ge=0, description="Drop decisive verdicts weaker than this (judge margin: "
                              "1 better, 2 much better; a verifier's score difference).")
    style_control: bool = Field(False, description="Refuse decisive wins that the judge's taste for style "
                                "explains: a contextual Bradley-Terry model (ratings plus length and markdown "
                                "features, as Chatbot Arena's style control) is fitted on the iteration's judged "
                                "train battles, and a win whose style term alone raises its winner's log-odds by "
                                "more than style_tolerance becomes neither an SFT row nor a DPO pair "
                                "(flywheel/learning/style_filter.py). Prompt worlds.")
    style_tolerance: float = Field(0.2, ge=0, description="style_control: the largest raise of a winner's "
                                   "log-odds that its style may explain and the win still be learnt from "
                                   "(0.2: odds x1.22).")


class EvaluateConfig(Strict):
    bootstrap_seed: int = Field(0, description="Seed of the eval-Elo bootstrap.")
    sampling: Literal["full", "active"] = Field(
        "full", description="full: every new version battles every opponent on every eval prompt; active: eval "
        "battles are drawn in rounds toward the pairs whose order is uncertain and the widest intervals "
        "(flywheel/maths/active_eval.py), until the target CI width or max_battles. Accuracy is measured on the whole "
        "eval split either way. Prompt worlds only: a games world refuses active.")
    round_size: int = Field(60, ge=1, description="active: eval battles per round.")
    target_ci_width: float = Field(150.0, gt=0, description="active: stop once every new version's 95% Elo "
                                   "interval is at most this wide and no neighbouring rank around one is uncertain.")
    max_battles: int | None = Field(None, ge=1, description="active: most eval battles per iteration (default: "
                                    "as many as full sampling plays).")
    width_weight: float = Field(3.0, ge=0, description="active: weight of the CI widths against the uncertain "
                                "orders of neighbouring ranks when choosing the next round's pairs.")
    promotion: Literal["validation", "always"] = Field(
        "validation", description="validation: a target's new version replaces its current one only if its "
        "validation accuracy (games: win-or-draw rate) is at least the current one's minus promotion_margin; "
        "otherwise the current version keeps playing and is trained on in the next iteration, and the new one "
        "stays on disk, recorded as not promoted (Arena Learning's practice; the eval split is never read). "
        "always: every new version replaces the last.")
    promotion_margin: float = Field(0.0, ge=0, le=1, description="validation promotion: how far below the "
                                    "current version's validation figure a new version may be and still replace "
                                    "it (0: at least as good).")


class BudgetConfig(Strict):
    max_usd: float | None = Field(None, gt=0, description="Stop paid API calls once this much is spent "
                                  "by all the run's processes together (later calls are recorded as failed, never "
                                  "judged).")


class AllocateConfig(Strict):
    """How the next iteration's training steps and battles are shared among the targets
    (ModelArena's compute allocation; see flywheel/learning/allocation.py)."""

    policy: Literal["uniform", "proportional", "successive-halving", "selective", "random"] = Field(
        "uniform", description="uniform; proportional (share ~ learning rate, smoothed, floored); "
        "successive-halving (drop the slowest fraction every k iterations); selective (top k only); random "
        "(a control arm for selective: k targets drawn at random each iteration, seeded by run.seed).")
    warmup: int = Field(1, ge=0, description="Training iterations at equal shares before a policy acts.")
    window: int = Field(2, ge=1, description="Iterations over which a target's learning rate is measured.")
    compute: Literal["steps", "params"] = Field("steps", description="Unit of compute in the learning rate: "
                                                "training steps, or steps x parameters.")
    signal: Literal["accuracy", "loss"] = Field(
        "accuracy", description="What a learning rate measures the gain of: validation accuracy (any target), or "
        "the drop of the validation loss on reference answers (local transformers targets; smoother, it moves first).")
    smoothing: float = Field(0.5, ge=0, lt=1, description="proportional: weight of the previous share.")
    floor: float = Field(0.05, ge=0, lt=1, description="proportional: the least share a target gets.")
    halving_every: int = Field(1, ge=1, description="successive-halving: iterations between drops.")
    halving_fraction: float = Field(0.5, gt=0, lt=1, description="successive-halving: share of the remaining "
                                    "targets dropped each time (at least one stays).")
    top_k: int = Field(1, ge=1, description="selective and random: targets that train each iteration.")
    sharing: Literal["competitive", "cooperative", "federated", "mixed"] = Field(
        "competitive", description="competitive: a target learns from its own battles; cooperative: "
        "the targets pool their winning traces; federated: each learns from its own battles, then "
        "same-architecture targets are merged, weighted by validation accuracy; mixed: pooled while the "
        "targets learn at similar rates, separate (for good) once their rates diverge (mixed_spread).")
    mixed_spread: float = Field(0.05, ge=0, description="mixed: the targets separate once the spread of their "
                                "learning rates (fastest minus slowest validation gain, per train.steps of "
                                "compute) exceeds this.")
    gpu_memory: float | None = Field(None, gt=0, le=1, description="In-process vllm targets: the GPU-memory "
                                     "fraction they share; each engine gets this x its compute share (unset: each "
                                     "target's own gpu_memory_utilization).")
    min_gpu_memory: float = Field(0.05, gt=0, le=1, description="gpu_memory: the least fraction a target's engine "
                                  "gets (it still answers eval prompts with no training share).")
    merge_strength: float = Field(0.5, ge=0, le=1, description="federated: how far each target moves to the "
                                  "weighted average (0 = not at all, 1 = every target becomes the average).")
    merge_temperature: float = Field(0.05, gt=0, description="federated: merge weights are a softmax of validation "
                                     "accuracy / this (lower = the best target dominates).")


class ServeConfig(Strict):
    """A model server the flywheel starts before a run and stops after (flywheel/players/server.py):
    ``transformers serve`` on a CPU, ``vllm serve`` on a GPU. Players reach it by base_urls."""

    command: list[str] = Field([], description="The server's command, without --host and --port (added from "
                               "host and port): e.g. [transformers, serve, --device, cpu] or [vllm, serve, "
                               "/models/m, --enable-lora]. Empty: no server is started (start your own and point "
                               "the players' base_urls at it).")
    host: str = Field("127.0.0.1", description="Address the server listens on.")
    port: int = Field(8000, ge=1, le=65535, description="Port the server listens on: the players' base_urls are "
                      "http://<host>:<port>/v1.")
    startup_timeout_s: float = Field(180.0, gt=0, description="How long the server may take to answer its health "
                                     "check before the run is refused (nothing is written).")
    health_path: str = Field("/health", description="The path that answers 200 once the server is up.")


class ScheduleConfig(Strict):
    """What a scheduled trigger does (``flywheel schedule``)."""

    mode: Literal["continue", "fresh"] = Field("continue", description="continue: every trigger adds one "
                                               "iteration to the run run.root/run.name; fresh: a new run per trigger.")
    lock_wait_s: float = Field(0.0, ge=0, description="A trigger that finds the run in use waits this long, "
                               "then refuses (the run is left untouched).")


class TrackingConfig(Strict):
    """An experiment tracker that gets each iteration's figures (``flywheel/ground/tracking.py``);
    the run directory stays the record, the tracker a view of it."""

    kind: Literal["none", "mlflow"] = Field("none", description="none: no tracker; mlflow: one MLflow run per "
                                           "flywheel run gets the config as params and each finished iteration's "
                                           "figures as metrics (step = iteration), the trainer's logs with them "
                                           "(pip install 'flywheel[tracking]').")
    uri: str | None = Field(None, description="MLflow tracking URI: a SQLite store (sqlite:///path/mlflow.db), an "
                            "MLflow server (http://host:5000) or any URI MLflow takes; unset: "
                            "sqlite:///<run.root>/mlflow.db, shared by the runs under run.root.")
    experiment: str = Field("flywheel", min_length=1, description="MLflow experiment the run's MLflow run goes in "
                            "(created when missing).")


class FlywheelConfig(Strict):
    run: RunConfig = Field(default_factory=RunConfig)
    world: WorldConfig = Field(default_factory=WorldConfig)
    targets: list[PlayerConfig] = Field(
        default_factory=lambda: [PlayerConfig(name="student")], min_length=1
    )
    opponents: list[PlayerConfig] = Field(
        default_factory=lambda: [PlayerConfig(name=n) for n in ("calc", "scribe", "generalist")],
        min_length=1,
    )
    askers: list[PlayerConfig] = Field([], description="Players that write users' follow-up turns "
                                       "(world.conversation.asker names one or several): kind procedural (the "
                                       "embedded world's, see procedure) or any player kind, asked with an "
                                       "asker prompt.")
    select: SelectConfig = Field(default_factory=SelectConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    rating: RatingConfig = Field(default_factory=RatingConfig)
    curate: CurateConfig = Field(default_factory=CurateConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    allocate: AllocateConfig = Field(default_factory=AllocateConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="after")
    def _unique_names(self) -> FlywheelConfig:
        names = [p.name for p in self.targets + self.opponents + self.askers]
        named = self.world.conversation.askers
        if isinstance(self.world.conversation.asker, list) and not named:
            raise ValueError("world.conversation.asker: an empty list names no asker (leave it unset for none)")
        for asker in named:
            if asker not in {p.name for p in self.askers}:
                known = ", ".join(p.name for p in self.askers) or "none"
                raise ValueError(f"world.conversation.asker {asker!r} is not a configured player: name one of "
                                 f"askers (configured: {known})")
        if len(set(named)) < len(named):
            raise ValueError(f"world.conversation.asker names an asker twice: {named}")
        talks = bool(named) or self.world.conversation.turns > 1
        if self.world.kind == "games" and talks:
            raise ValueError("world.conversation: a games world plays moves, not conversations")
        if talks and self.evaluate.sampling == "active":
            raise ValueError("evaluate.sampling: active measures single answers; conversations are evaluated in "
                             "full (every version against every opponent on every eval prompt)")
        folded = [n.casefold() for n in names]
        dupes = sorted({n for n, f in zip(names, folded) if folded.count(f) > 1})
        if dupes:
            raise ValueError(f"player names must be unique (ignoring case): {dupes}")
        if self.allocate.floor * len(self.targets) > 1:
            raise ValueError(f"allocate.floor {self.allocate.floor} x {len(self.targets)} targets exceeds 1")
        if self.allocate.signal == "loss":
            remote = [p.name for p in self.targets if p.kind != "transformers"]
            if remote:
                raise ValueError(f"allocate.signal: loss needs local transformers targets (validation loss on the "
                                 f"reference answers); not: {', '.join(remote)}")
        if self.select.gap_spread and self.select.prompt_floor == 0:
            raise ValueError("select.gap_spread weighs the battles select.prompt_floor spreads over the cells; "
                             "with prompt_floor 0 the bandit picks them all")
        if (self.world.kind == "games") != (self.judge.kind == "game"):
            raise ValueError("world.kind games and judge.kind game go together (the rules judge the games)")
        if self.world.kind == "games":
            if self.allocate.signal == "loss":
                raise ValueError("allocate.signal: loss needs reference answers; a games world has none")
            if self.world.prompt_pools:
                raise ValueError("world.prompt_pools: a games world plays start positions, not prompts")
            if self.evaluate.sampling == "active":
                raise ValueError("evaluate.sampling: active is for prompt worlds; a games world plays every eval "
                                 "position against every reference player (its win-or-draw rates need them all)")
            if self.curate.style_control:
                raise ValueError("curate.style_control is for prompt worlds: a game's rules judge moves, not style")
            for name, on in (("train.gap_mix", self.train.gap_mix), ("train.rl.gap_pick", self.train.rl.gap_pick),
                             ("select.gap_spread", self.select.gap_spread)):
                if on:
                    raise ValueError(f"{name} weighs by each category's validation accuracy; a games world "
                                     "validates on games, not categories")
            bad = sorted({c for m in self.world.models for c in m.categories} - set(self.world.games.games))
            if bad:
                raise ValueError(f"world.models: categories {bad} are not games of world.games.games")
            self._hanabi_is_playable(names)
        if any("@" in n for n in names):
            raise ValueError("player names may not contain '@' (it marks versions)")
        if any("+" in n for n in names):
            raise ValueError("player names may not contain '+' (it joins the players of a team)")
        self._rl_is_usable()
        return self

    def _hanabi_is_playable(self, names: list[str]) -> None:
        gc = self.world.games
        hanabi = "hanabi" in gc.games
        for p in self.targets + self.opponents:
            if hanabi and p.kind == "minimax" or not hanabi and p.kind == "cautious":
                plays = "hanabi" if p.kind == "cautious" else "tic-tac-toe and Connect Four"
                raise ValueError(f"player {p.name}: kind {p.kind} plays {plays}, not {', '.join(gc.games)}")
        if not hanabi:
            return
        if len(gc.games) > 1:
            raise ValueError("world.games.games: hanabi is played alone (its battles are team battles in duplicate)")
        for t in gc.hanabi.teams:
            unknown = [n for n in t if n not in names]
            if unknown:
                raise ValueError(f"world.games.hanabi.teams: {', '.join(unknown)} in team {t} is not a player "
                                 f"(targets and opponents: {', '.join(names)})")

    def _rl_is_usable(self) -> None:
        """GRPO iterations need a reward they can use: a prompt world, groups that fill a batch,
        a reward that reads conversations in a conversation world, and a reward model that exists
        before the first GRPO iteration asks for it."""
        tc = self.train
        plan = [tc.method_of(k) for k in range(1, max(self.run.iterations, len(tc.schedule)) + 1)]
        rl = [k for k, m in enumerate(plan, 1) if m in RL_METHODS]
        if self.world.kind == "games" and (rl or "reward" in plan):
            raise ValueError("train.method grpo and reward: a games world has no reward for single moves nor "
                             "validation pairs yet; use sft or dpo")
        if tc.rl.gap_pick and not any(picks_prompts(tc, m) for m in plan):
            raise ValueError("train.rl.gap_pick weighs how prompts are picked for the target's own answers, and no "
                             "iteration picks them (train.schedule: expert, onpolicy_dpo, grpo or rloo with "
                             "train.rl.dynamic_sampling, or with train.rl.pick_online in one process)")
        if not rl:
            return
        if any(m in ONLINE_METHODS for m in plan) and tc.batch_size % tc.rl.generations:
            raise ValueError(f"train.batch_size {tc.batch_size} is not a multiple of train.rl.generations "
                             f"{tc.rl.generations} (each batch holds whole groups)")
        if tc.rl.reward in ("verifier", "judge") and not 0 < tc.rl.pass_reward <= 1:
            passes = ("no answer would pass" if tc.rl.pass_reward > 1
                      else "an answer scored 0 (wrong, or a loss) would pass")
            raise ValueError(f"train.rl.pass_reward {tc.rl.pass_reward:g}: the {tc.rl.reward} rewards an answer 0 to "
                             f"1, so {passes}; give a threshold above 0 and at most 1")
        if tc.rl.prompts == "train" and tc.rl.reward == "judge":
            raise ValueError("train.rl.prompts train: the judge reward compares an answer with the battles' baseline "
                             "answer, which a prompt never battled has not; use train.rl.prompts battles, or a reward "
                             "that reads the prompt alone (verifier, reward_model, module:function)")
        talks = bool(self.world.conversation.askers) or self.world.conversation.turns > 1
        if talks and tc.rl.reward == "judge" and self.judge.kind == "reward_model":
            raise ValueError("train.rl.reward judge: the reward-model judge (judge.kind reward_model) reads an answer "
                             "after the first user turn alone, not after a conversation's history; use "
                             "train.rl.reward reward_model (it reads the history)")
        if tc.rl.reward == "reward_model" and tc.rl.reward_model is None and "reward" not in plan[:rl[0] - 1]:
            raise ValueError(f"train.rl.reward reward_model: iteration {rl[0]} trains with grpo, but no reward model "
                             "is named (train.rl.reward_model) and no earlier iteration trains one (method reward "
                             "in train.schedule)")
