"""Reinforcement learning from rewards: a GRPO phase (TRL's ``GRPOTrainer``) whose reward is a
scorer the caller builds from the run's judges (flywheel/learning/judge_rewards.py), and the
rollouts it trained on, kept as a dataset.

A scorer takes ``(prompts, completions, columns)`` (the answers' texts and the prompts' dataset
columns) and returns one ``(reward, error)`` per answer. A prompt may be a later user turn of a
conversation: then its ``history`` column holds the messages before it (JSON) and ``turn`` its
number. A reward of None is a failed call: it is recorded with its error and handed to TRL as
None, which leaves the answer out of its group's baseline with an advantage of 0: never scored 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.ground.atomic import append_bytes, atomic_write_dir, atomic_write_text
from flywheel.ground.cards import hub_card, parquet_config
from flywheel.ground.row_files import read_jsonl

Scored = tuple[float | None, str | None]
Scorer = Callable[[list[str], list[str], dict[str, list]], list[Scored]]
ROLLOUT_COLUMNS = ["prompt", "completion", "reward", "advantage", "error", "step", "group", "prompt_id",
                   "category", "iteration", "target", "turn", "history"]


class RewardsFailed(RuntimeError):
    """More of a phase's rewards failed than ``train.rl.max_failed`` allows: the run stops, and no
    version is made from the phase."""


def check_rewards(rl, target: str, rewards: list, errors: list) -> None:
    """Raise ``RewardsFailed`` where the share of failed rewards (None, or not a finite number: what
    the trainer takes as None) is over ``rl.max_failed`` (``train.rl``), before any version is made
    from them."""
    share = sum(finite(r) is None for r in rewards) / len(rewards) if rewards else 0.0
    if share > rl.max_failed:
        first = next((str(e) for r, e in zip(rewards, errors) if finite(r) is None and e), "no error recorded")
        raise RewardsFailed(f"train.rl.reward {rl.reward}: {share:.0%} of target {target}'s rewards failed (over "
                            f"train.rl.max_failed {rl.max_failed:.0%}; the first: {first}); no version was made: "
                            "fix the reward, then resume the run")


@dataclass(frozen=True)
class RLPhase:
    """What a GRPO phase needs besides the trainer's settings (``train.rl``): the prompts (columns
    ``prompt`` and whatever the scorer reads: ``reference``, ``baseline``, ...), the scorer, and
    the file its rollouts are appended to (kept across a kill: see ``RolloutLog``)."""

    prompts: Any  # datasets.Dataset
    scorer: Scorer
    rollouts: Path
    max_completion_length: int
    vllm_url: str | None = None
    weights: Mapping[str, float] | None = None  # per category, what the picks multiply a prompt's chance by (gap_pick)


def text_of(completion: Any) -> str:
    """An answer's text: TRL hands conversational answers as a list of assistant turns."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


class RolloutLog:
    """Every scored answer of a GRPO phase, appended as JSON lines with the optimizer step that
    sampled it. After a kill the phase resumes from its last checkpoint: ``truncate(step)`` drops
    the lines of the steps after it, which are sampled and scored again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.calls = 0

    def truncate(self, step: int) -> None:
        """Keep the rollouts of the steps up to ``step`` (a line cut short by a kill is dropped)."""
        self.rewrite([r for r in self.read() if r["step"] <= step])

    def rewrite(self, rows: list[dict]) -> None:
        """The log holds ``rows`` alone, written at once."""
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in rows))

    def read(self) -> list[dict]:
        return read_jsonl(self.path)

    def append(self, rows: list[dict]) -> None:
        append_bytes(self.path, "".join(json.dumps(r) + "\n" for r in rows))


class RecordedReward:
    """The reward function TRL calls: the scorer's rewards, each answer logged (``RolloutLog``)."""

    __name__ = "reward"  # TRL logs it as rewards/reward/mean

    def __init__(self, scorer: Scorer, log: RolloutLog, generations: int, outcomes: list | None = None,
                 at: float = 1.0) -> None:
        self.scorer, self.log, self.generations = scorer, log, generations
        self.outcomes, self.at = outcomes, at  # where each scored group is told to an OnlinePicker
        self.given = self.failed = 0  # rewards asked for and failed since this process started the phase

    def __call__(self, prompts: list, completions: list, completion_ids=None, trainer_state=None,
                 **columns: Any) -> list[float | None]:
        columns = {k: v for k, v in columns.items() if k not in ("log_extra", "log_metric")}
        texts = [text_of(c) for c in completions]
        prompt_texts = columns.get("prompt_text") or [text_of(p) if isinstance(p, list) else str(p) for p in prompts]
        scored = scored_safely(self.scorer, list(prompt_texts), texts, columns)
        self.given += len(scored)
        self.failed += sum(finite(r) is None for r, _ in scored)
        step = (trainer_state.global_step if trainer_state is not None else 0) + 1  # the step being taken
        call, self.log.calls = self.log.calls, self.log.calls + 1
        self.log.append([{"prompt": prompt_texts[i], "completion": texts[i], "reward": r, "error": err,
                          "step": step, "group": f"{step}-{call}-{i // self.generations}",
                          "prompt_id": _at(columns, "prompt_id", i), "category": _at(columns, "category", i),
                          "turn": _at(columns, "turn", i) or 1, "history": _at(columns, "history", i) or ""}
                         for i, (r, err) in enumerate(scored)])
        if self.outcomes is not None:
            from flywheel.learning.onpolicy import Outcome

            for g in range(0, len(scored), self.generations):
                got = [r for r, _ in scored[g:g + self.generations] if finite(r) is not None]
                self.outcomes.append(Outcome(step, str(_at(columns, "prompt_id", g)), sum(x >= self.at for x in got),
                                             len(got)))
        return [finite(r) for r, _ in scored]


class PickedSampler:
    """A GRPO or RLOO trainer's sampler whose prompts an ``OnlinePicker`` chooses a chunk (one
    generation batch) at a time, laid out as TRL's ``RepeatSampler`` lays them: each chunk's
    ``per_chunk`` prompts ``k`` times each, the chunk ``repeat`` times (TRL's steps_per_generation x
    num_iterations). Chunk c is first read as batch b = c x repeat; the trainer reads ``accumulation``
    batches an optimizer step and accelerate one batch ahead, so by then the groups of every step
    up to b // accumulation - 1 are scored. The picker reads those of the steps up to one less: the
    same groups whenever the chunk is picked, in a phase never interrupted or in a resumed one
    replaying its skipped batches. ``chunks`` a pass: enough for the phase in one."""

    def __init__(self, picker, *, k: int, repeat: int, accumulation: int, chunks: int) -> None:
        self.picker, self.k, self.repeat, self.accumulation, self.chunks = picker, k, repeat, accumulation, chunks
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        self.picker.reset()
        for c in range(self.epoch * self.chunks, (self.epoch + 1) * self.chunks):
            picked = self.picker.chunk(c, max(c * self.repeat // self.accumulation - 2, 0))  # 0: sampled before
            for _ in range(self.repeat):
                for i in picked:
                    yield from [i] * self.k

    def __len__(self) -> int:
        return self.chunks * self.picker.per_chunk * self.repeat * self.k


def picking(trainer_class: type, make_picker: Callable[[int, int], Any]) -> type:
    """``trainer_class`` (TRL's GRPOTrainer or RLOOTrainer) with its prompts picked online:
    ``make_picker(per_chunk, seed)`` builds the ``OnlinePicker``. Under several processes, whose
    rewards each sees only in part, with fewer prompts than a generation batch holds, or with
    dataloader workers (which read batches further ahead than the picks allow for), the trainer
    keeps TRL's shuffled sampler."""

    class Picking(trainer_class):
        def _get_train_sampler(self, dataset=None):
            per_chunk = self.args.generation_batch_size // self.num_generations
            if (dataset is not None and dataset is not self.train_dataset) or self.accelerator.num_processes > 1 \
                    or len(self.train_dataset) < per_chunk or self.args.dataloader_num_workers > 0:
                return super()._get_train_sampler(dataset)
            repeat = self.num_iterations * self.args.steps_per_generation
            accumulation = self.args.gradient_accumulation_steps
            chunks = -(-max(self.args.max_steps, 1) * accumulation // repeat) + 1
            return PickedSampler(make_picker(per_chunk, self.args.seed), k=self.num_generations, repeat=repeat,
                                 accumulation=accumulation, chunks=chunks)

    Picking.__name__ = Picking.__qualname__ = f"Picking{trainer_class.__name__}"
    return Picking


def scored_safely(scorer: Scorer, prompts: list[str], texts: list[str], columns: dict[str, list]) -> list[Scored]:
    """``scorer``'s (reward, error) for each answer; a call that raises, or returns another number of
    scores than answers, leaves every answer without a reward, with why (recorded, never a 0)."""
    try:
        scored = scorer(prompts, texts, columns)
        if len(scored) != len(texts):
            raise ValueError(f"the reward returned {len(scored)} scores for {len(texts)} answers")
    except Exception as e:  # noqa: BLE001 - a failed reward call leaves its answers out, recorded
        return [(None, f"reward failed: {e!r}"[:500])] * len(texts)
    return scored


def finite(x: float | None) -> float | None:
    """A reward as a trainer takes it: None where it failed or is not a finite number."""
    return None if x is None or not math.isfinite(x) else float(x)


def _at(columns: dict[str, list], name: str, i: int) -> Any:
    values = columns.get(name)
    return values[i] if values is not None and i < len(values) else None


def with_advantages(rows: list[dict]) -> list[dict]:
    """Each rollout with its group's advantage as GRPO computed it: (reward - the group's mean)
    / (the group's standard deviation + 1e-4), over the answers that have a reward; an answer
    without one has advantage 0."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        if r["reward"] is not None:
            groups.setdefault(r["group"], []).append(r["reward"])
    out = []
    for r in rows:
        g = groups.get(r["group"], [])
        if r["reward"] is None or not g:
            adv = 0.0
        else:
            mean = sum(g) / len(g)
            std = math.sqrt(sum((x - mean) ** 2 for x in g) / (len(g) - 1)) if len(g) > 1 else 0.0
            adv = (r["reward"] - mean) / (std + 1e-4)
        out.append({**r, "advantage": adv})
    return out


@dataclass(frozen=True)
class RewardSummary:
    """A GRPO phase's rewards: answers scored, failed (left out), mean reward, and the share of
    groups whose answers all got one reward (no signal to learn from)."""

    scored: int
    failed: int
    mean: float | None
    flat_groups: float | None

    @staticmethod
    def of(rows: list[dict]) -> RewardSummary:
        got = [r["reward"] for r in rows if r["reward"] is not None]
        groups: dict[str, set] = {}
        for r in rows:
            if r["reward"] is not None:
                groups.setdefault(r["group"], set()).add(r["reward"])
        flat = sum(len(v) == 1 for v in groups.values()) / len(groups) if groups else None
        return RewardSummary(len(got), len(rows) - len(got), sum(got) / len(got) if got else None, flat)

    def to_json(self) -> dict:
        return {"scored": self.scored, "failed": self.failed, "mean": self.mean, "flat_groups": self.flat_groups}


def fill_position_ids(model):
    """Give ``model``'s forward the position ids of a left-padded batch where a caller passes none
    (a handle; ``.remove()`` undoes it). GRPO scores left-padded prompts with their completions,
    and TRL passes no position ids: a model with learned absolute positions (GPT-2) would read
    each answer at positions shifted by its padding, not where ``generate`` sampled it (which
    counts positions from the attention mask), and learn from log-probabilities of another
    conditional. Rotary models are shift-invariant; the filled ids change nothing there."""

    def hook(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if kwargs.get("position_ids") is None and mask is not None and kwargs.get("past_key_values") is None \
                and mask.dim() == 2:
            kwargs["position_ids"] = (mask.long().cumsum(-1) - 1).clamp(min=0)
        return args, kwargs

    return model.register_forward_pre_hook(hook, with_kwargs=True)


def grpo_args(base: dict, rl, phase: RLPhase, hw_cuda: bool, config: type | None = None) -> dict:
    """``trl.GRPOConfig`` (or ``config``: ``trl.RLOOConfig``) fields: the shared training fields
    (``base``, from ``training_args``: GRPO takes no ``max_length``), the group, sampling and KL
    settings of ``train.rl``, and vLLM's server mode where configured (CUDA only), then those of
    ``train.rl.args`` that ``config`` has."""
    args = {k: v for k, v in base.items() if k != "max_length"}
    args.update(num_generations=rl.generations, temperature=rl.temperature, beta=rl.beta,
                max_completion_length=phase.max_completion_length, log_completions=False,
                weight_decay=rl.weight_decay)
    if rl.learning_rate is not None:
        args["learning_rate"] = rl.learning_rate
    if rl.use_vllm:
        if not hw_cuda:
            raise RuntimeError("train.rl.use_vllm: vLLM samples on CUDA only; this machine has no GPU")
        args.update(use_vllm=True, vllm_mode="server")
        if phase.vllm_url:
            args["vllm_server_base_url"] = phase.vllm_url
    if config is None:
        return {**args, **rl.args}
    import dataclasses

    known = {f.name for f in dataclasses.fields(config)}
    if dropped := sorted(set(rl.args) - known):
        import logging

        logging.getLogger("flywheel").warning("train.rl.args %s: not fields of trl.%s, left out", dropped,
                                              config.__name__)
    return {k: v for k, v in {**args, **rl.args}.items() if k in known}


# What each method's rollouts are, for their card's title.
ROLLOUTS_OF = {"grpo": "GRPO rollouts", "rloo": "RLOO rollouts", "expert": "Own answers (expert iteration)",
               "onpolicy_dpo": "Own answers (on-policy DPO)"}


def save_rollouts(rows: list[dict], out: Path, iteration: int, rl, method: str = "grpo") -> int:
    """Write rollouts as a dataset folder in the curated datasets' layout (``data/*.parquet`` and
    a ``README.md`` card), atomically; reward and advantage stay numbers (a failed reward is null).
    Expert iteration's and on-policy DPO's are the answers sampled before training (step 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"reward": pa.float64(), "advantage": pa.float64(), "step": pa.int64(), "iteration": pa.int64(),
             "turn": pa.int64()}
    schema = pa.schema([(c, types.get(c, pa.string())) for c in ROLLOUT_COLUMNS])
    table = pa.Table.from_pylist([{c: r.get(c) for c in ROLLOUT_COLUMNS} for r in rows], schema=schema)
    trained, before = [r for r in rows if r["step"] > 0], [r for r in rows if r["step"] <= 0]
    summary = RewardSummary.of(trained or before)
    ahead = RewardSummary.of(before)
    whose = "the trainer's answers (step 1 on)" if trained else "the answers sampled before training"
    text = (
        f"# {ROLLOUTS_OF.get(method.removeprefix('sft+'), 'Rollouts')}, iteration {iteration}\n\n"
        f"- rows: {len(rows)} (one per sampled answer; {rl.generations} answers per prompt make a group)\n"
        f"- reward: {rl.reward}; failed rewards (null, left out of training): {summary.failed}\n"
        f"- {whose}: mean reward {summary.mean}; share of groups with one reward for all (nothing to learn): "
        f"{summary.flat_groups}\n"
        + (f"- sampled before training (step 0, dynamic sampling): {len(before)} answers, mean reward {ahead.mean}, "
           f"flat groups {ahead.flat_groups}\n" if trained and before else "")
        + "- advantage: (reward - the group's mean) / (the group's standard deviation + 1e-4), 0 where the "
        "reward failed\n- step: the optimizer step that sampled the answer (0: sampled before training, "
        "by the learnability posterior's rounds)\n"
        "- turn: the user turn answered (1: the task; 2 and on: a conversation's later turn, after the "
        "messages in history, JSON)\n\n"
        "Open with `datasets.load_dataset(\"parquet\", data_dir=\"<this directory>/data\", split=\"train\")` or "
        "`pandas.read_parquet(\"<this directory>/data\")`.\n")
    card = hub_card("dataset", text, license="other", task_categories=["text-generation"],
                    tags=["trl", method.removeprefix("sft+").replace("_", "-"), "rollouts", "flywheel"],
                    configs=[parquet_config("default", "data/train-*.parquet")])

    def fill(tmp: Path) -> None:
        (tmp / "data").mkdir(parents=True)
        pq.write_table(table, tmp / "data" / "train-00000-of-00001.parquet")
        atomic_write_text(tmp / "README.md", card)

    atomic_write_dir(out, fill)
    return len(rows)
