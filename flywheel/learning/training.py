"""Fine-tune a target version with TRL (SFT, DPO, GRPO, RLOO, or SFT then one of them), full or LoRA."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flywheel.config.tree import TrainConfig
from flywheel.ground import progress
from flywheel.ground.checkpoints import load_checkpoint, save_checkpoint
from flywheel.learning.onpolicy import OnlinePicker, outcomes_of
from flywheel.learning.rl import (
    RecordedReward,
    RewardsFailed,
    RewardSummary,
    RLPhase,
    RolloutLog,
    check_rewards,
    fill_position_ids,
    grpo_args,
    picking,
    with_advantages,
)

log = logging.getLogger("flywheel")


@dataclass(frozen=True)
class TrainResult:
    steps: int
    loss: float | None
    examples: int
    rollouts: list[dict] | None = None  # GRPO: every scored answer, with its advantage
    # The Trainer's logs (loss, grad_norm, learning_rate, ...), each with its ``phase`` and its
    # ``step`` counted over the phases of this training (an experiment tracker's curves).
    history: tuple[dict, ...] = ()


def is_main_process() -> bool:
    """Rank 0 of a distributed launch (``accelerate launch``), or the only process."""
    return int(os.environ.get("RANK", "0")) == 0


@dataclass(frozen=True)
class Hardware:
    """What the training process runs on (``detect()``), so the arguments can be built and
    tested for any machine."""

    cuda: bool
    bf16: bool

    @staticmethod
    def detect() -> Hardware:
        import torch

        cuda = torch.cuda.is_available()
        return Hardware(cuda, cuda and torch.cuda.is_bf16_supported())


def precision(cfg: TrainConfig, hw: Hardware) -> str:
    """``bf16``, ``fp16`` or ``fp32``: ``train.precision``, where ``auto`` is bf16 wherever the
    hardware supports it and fp32 elsewhere (the CPU)."""
    if cfg.precision != "auto":
        return cfg.precision
    return "bf16" if hw.bf16 else "fp32"


def max_length(cfg: TrainConfig, model) -> int:
    """``train.max_length``, else the model's context length capped at 1024 tokens."""
    if cfg.max_length is not None:
        return cfg.max_length
    context = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    return min(int(context or 1024), 1024)


def logging_every(steps: int) -> int:
    """Log the training loss every this many steps: the largest divisor of ``steps`` up to a fifth
    of it, so that the last step is logged and the logs cover every step (``stage_loss``)."""
    return max(d for d in range(1, max(1, steps // 5) + 1) if steps % d == 0)


def stage_loss(log_history: list[dict]) -> float | None:
    """The mean training loss over a stage's steps, from the Trainer's logged losses (each the mean
    over its interval). A stage resumed from a checkpoint gets the logs before it from the
    checkpoint, so its loss is the same as if it had never been interrupted."""
    total, last = 0.0, 0
    for e in log_history:
        if "loss" in e:
            total, last = total + e["loss"] * (e["step"] - last), e["step"]
    return total / last if last else None


def training_args(cfg: TrainConfig, steps: int, seed: int, out: str, length: int, hw: Hardware) -> dict:
    """The fields shared by ``SFTConfig`` and ``DPOConfig``. Nothing here names a device: the
    Trainer (or ``accelerate launch``) places the model where the hardware is. With
    ``train.checkpoint_steps`` the Trainer saves its whole state (weights, optimizer, scheduler,
    RNG) under ``out`` that often, keeping the latest."""
    mode = precision(cfg, hw)
    every = cfg.checkpoint_steps
    return dict(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        lr_scheduler_type="cosine",
        warmup_steps=min(10, max(steps // 10, 0)),
        logging_steps=logging_every(steps),
        save_strategy="steps" if every else "no",
        save_steps=max(every, 1),
        save_total_limit=1,
        report_to=[],
        bf16=mode == "bf16",
        fp16=mode == "fp16",
        seed=seed,
        data_seed=seed,
        dataloader_num_workers=0,
        dataloader_pin_memory=hw.cuda,  # pinned memory helps only a GPU (and warns without one)
        disable_tqdm=True,
        max_length=length,
    )


# Models this large keep TRL's default of activation checkpointing (``train.activation_checkpointing``
# unset); smaller ones train without it.
CHECKPOINTING_FROM_PARAMS = 100_000_000


def activation_checkpointing(cfg: TrainConfig, model, extra: dict) -> bool:
    """Whether a phase recomputes activations in the backward pass: its ``extra`` TRL fields
    (``train.sft_args`` / ``dpo_args``) where they name it, else ``train.activation_checkpointing``,
    else TRL's default (on) for models of at least ``CHECKPOINTING_FROM_PARAMS`` parameters and
    off below: a small model's activations take little memory, and recomputing them costs it as
    much time as the rest of the step. Either way the weights come out the same. TRL calls it
    ``gradient_checkpointing``, which transformers now names ``activation_checkpointing`` (the old
    name warns, and the new one wins where both are given: both are passed, the same)."""
    for name in ("activation_checkpointing", "gradient_checkpointing"):
        if extra.get(name) is not None:
            return bool(extra[name])
    if cfg.activation_checkpointing is not None:
        return cfg.activation_checkpointing
    return sum(p.numel() for p in model.parameters()) >= CHECKPOINTING_FROM_PARAMS


def resume_point(folder: Path) -> tuple[str, int] | None:
    """The latest complete Trainer checkpoint under ``folder`` (its ``trainer_state.json``, written
    last, reads back whole) and its step, or None. Checkpoints a kill cut short are removed."""
    if not folder.is_dir():
        return None
    complete: dict[int, Path] = {}
    for d in folder.glob("checkpoint-*"):
        try:
            step = json.loads((d / "trainer_state.json").read_text())["global_step"]
            if d.name == f"checkpoint-{step}":
                complete[step] = d
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if is_main_process():
            shutil.rmtree(d, ignore_errors=True)
    return (str(complete[max(complete)]), max(complete)) if complete else None


def _peft_config(cfg: TrainConfig):
    if not cfg.lora:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=2 * cfg.lora_r, target_modules="all-linear", task_type="CAUSAL_LM")


@dataclass(frozen=True)
class TrainJob:
    """One version's training: ``base`` (a checkpoint folder or Hub name) trained into ``out`` for
    ``steps`` steps from ``seed``, by ``method`` (None: ``train.method``).

    ``keep_adapter`` (LoRA): ``out`` holds the adapter alone, not merged weights, so a vLLM server
    can load it; ``adapter`` continues training an earlier version's adapter on top of ``base``.

    ``state_dir`` (with ``train.checkpoint_steps``): where the Trainer keeps its checkpoints, one
    folder per phase (``sft``, ``dpo``). Called again after a kill, each phase resumes from its
    latest checkpoint (a finished phase from its last step, so nothing is trained twice) and ends
    with the same weights and loss as a run never interrupted. The caller removes it when done."""

    base: str
    out: Path
    steps: int
    seed: int
    method: str | None = None
    adapter: str | None = None
    keep_adapter: bool = False
    state_dir: Path | None = None


def failed_rewards_stop(reward: RecordedReward, max_failed: float, steps: int):
    """A TrainerCallback that ends a GRPO or RLOO phase after a tenth of its ``steps`` (at least one)
    where more of its rewards so far failed than ``max_failed``: the check at the phase's end then
    stops the run, without the rest of the steps. In one process only: under several, each sees its
    own share of the rewards, and one stopping alone would leave the others waiting."""
    from transformers import TrainerCallback

    at = max(1, steps // 10)

    class _Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if (args.world_size == 1 and state.global_step == at and reward.given
                    and reward.failed / reward.given > max_failed):
                log.warning("%d of the phase's first %d rewards failed: it stops here", reward.failed, reward.given)
                control.should_training_stop = True

    return _Stop()


def train_version(job: TrainJob, cfg: TrainConfig, sft_data=None, dpo_data=None, *,
                  rl: RLPhase | None = None, callbacks: tuple = ()) -> TrainResult:
    """Train ``job.base`` into ``job.out`` by ``job.method`` (default ``cfg.method``): SFT on
    ``sft_data``, DPO on ``dpo_data``, GRPO or RLOO on ``rl``'s prompts and rewards, or SFT then one
    of the others. With no steps or no data the new version is a copy (the version still advances,
    so every iteration has one version per target). ``callbacks``: more ``TrainerCallback``s for
    every phase (a learning curve's measurements)."""
    import torch
    from transformers import AutoTokenizer

    base, out, steps, seed = job.base, job.out, job.steps, job.seed
    adapter, keep_adapter, state_dir = job.adapter, job.keep_adapter, job.state_dir
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = load_checkpoint(base, dtype=getattr(torch, cfg.dtype))
    hw, length = Hardware.detect(), max_length(cfg, model)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
    elif keep_adapter:
        from peft import get_peft_model

        model = get_peft_model(model, _peft_config(cfg.model_copy(update={"lora": True})))
    method = job.method or cfg.method
    plan: list = []
    if method in ("sft", "sft+dpo", "sft+grpo", "sft+rloo") and sft_data is not None and len(sft_data):
        plan.append(("sft", sft_data))
    if method in ("dpo", "sft+dpo") and dpo_data is not None and len(dpo_data):
        plan.append(("dpo", dpo_data))
    if method in ("grpo", "sft+grpo", "rloo", "sft+rloo") and rl is not None and len(rl.prompts):
        plan.append((method.removeprefix("sft+"), rl.prompts))
    if steps <= 0 or not plan:
        if is_main_process():
            save_checkpoint(model, tokenizer, out)
        return TrainResult(0, None, 0)
    per_stage = max(1, steps // len(plan))
    total, loss, examples, rollouts, history = 0, None, 0, None, []
    wrapped = adapter is not None or keep_adapter  # the model already carries its adapter
    peft = None if wrapped else _peft_config(cfg)
    keep = state_dir is not None and cfg.checkpoint_steps > 0
    with tempfile.TemporaryDirectory(prefix="flywheel-train-") as tmp:
        for kind, data in plan:
            scratch = str(state_dir / kind) if keep else tmp
            resume, saved_at = (resume_point(Path(scratch)) if keep else None) or (None, 0)
            if kind == "sft":
                from trl import SFTConfig, SFTTrainer

                args = SFTConfig(**{**training_args(cfg, per_stage, seed, scratch, length, hw),
                                    "activation_checkpointing": activation_checkpointing(cfg, model, cfg.sft_args),
                                    "completion_only_loss": True, "packing": False, **cfg.sft_args})
                trainer = SFTTrainer(model=model, args=args, train_dataset=data.select_columns(["prompt", "completion"]),
                                     processing_class=tokenizer, peft_config=peft)
            elif kind in ("grpo", "rloo"):
                import trl

                record = RolloutLog(Path(rl.rollouts))
                record.truncate(saved_at if resume else 0)  # the steps after the checkpoint are sampled again
                base_args = {**training_args(cfg, per_stage, seed, scratch, length, hw),
                             "activation_checkpointing": activation_checkpointing(cfg, model, cfg.rl.args)}
                config, trainer_class = (trl.GRPOConfig, trl.GRPOTrainer) if kind == "grpo" else \
                    (trl.RLOOConfig, trl.RLOOTrainer)
                args = config(**grpo_args(base_args, cfg.rl, rl, hw.cuda, config))
                positions = fill_position_ids(model)
                picks = cfg.rl.pick_online and "prompt_id" in data.column_names  # the posterior is per prompt
                outcomes = outcomes_of(record.read(), cfg.rl.pass_reward) if picks else None
                if outcomes is not None:
                    trainer_class = picking(trainer_class, online_picker(data, outcomes, cfg.rl, rl.weights))
                reward = RecordedReward(rl.scorer, record, cfg.rl.generations, outcomes, cfg.rl.pass_reward)
                trainer = trainer_class(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                                        reward_funcs=reward, peft_config=peft)
                trainer.add_callback(failed_rewards_stop(reward, cfg.rl.max_failed, per_stage))
            else:
                from trl import DPOConfig, DPOTrainer

                args = DPOConfig(**{**training_args(cfg, per_stage, seed, scratch, length, hw), "beta": cfg.dpo_beta,
                                    "activation_checkpointing": activation_checkpointing(cfg, model, cfg.dpo_args),
                                    **cfg.dpo_args})
                trainer = DPOTrainer(model=model, args=args,
                                     train_dataset=data.select_columns(["prompt", "chosen", "rejected"]),
                                     processing_class=tokenizer, peft_config=peft)
            trainer.add_callback(progress.trainer_callback(f"train {kind} {out.name}", per_stage))
            for callback in callbacks:
                trainer.add_callback(callback)
            if os.environ.get("FLYWHEEL_TRAINER_LOGS") != "1":  # `flywheel run -v` shows the trainer's log dicts
                from transformers import PrinterCallback

                trainer.remove_callback(PrinterCallback)
            if resume:
                log.info("train %s %s: resuming from %s", kind, out.name, Path(resume).name)
            if resume and saved_at >= per_stage:
                # The phase had finished: its last weights, not one step more (as train() would run).
                from transformers import TrainerState

                trainer._load_from_checkpoint(resume)  # what train(resume_from_checkpoint=...) loads first
                trainer.state = TrainerState.load_from_json(os.path.join(resume, "trainer_state.json"))
            else:
                trainer.train(resume_from_checkpoint=resume)
            steps_done = trainer.state.global_step
            history += trainer_logs(trainer.state.log_history, kind, total)
            total += steps_done
            loss = stage_loss(trainer.state.log_history)
            if kind in ("grpo", "rloo"):
                positions.remove()
                rollouts = with_advantages([r for r in record.read() if r["step"] > 0])  # not those sampled before
                log.info("%s %s: rewards %s", kind, out.name, RewardSummary.of(rollouts).to_json())
                try:
                    check_rewards(cfg.rl, out.name, [r["reward"] for r in rollouts], [r["error"] for r in rollouts])
                except RewardsFailed:  # resumed once the reward is fixed, the phase trains again from its start
                    if keep:
                        shutil.rmtree(scratch, ignore_errors=True)
                    record.rewrite([r for r in record.read() if r["step"] <= 0])
                    raise
            examples += len(data)
            # Without keep_adapter, LoRA adapters are merged: the version is a plain checkpoint.
            model = trainer.model.merge_and_unload() if (cfg.lora and not wrapped) else trainer.model
            log.info("%s %s: %d steps on %d rows, loss %s", kind, out.name, steps_done, len(data),
                     "n/a" if loss is None else f"{loss:.4f}")  # n/a: sft_args/dpo_args logged no step
    if is_main_process():  # under accelerate every process trains; one saves
        save_checkpoint(model, tokenizer, out)
    return TrainResult(total, loss, examples, rollouts, tuple(history))


def online_picker(prompts, outcomes: list, rl, weights=None) -> Callable[[int, int], OnlinePicker]:
    """How a trainer builds its ``OnlinePicker`` over the phase's ``prompts`` (a dataset with
    ``prompt_id``, ``category``, ``level``), fed by ``outcomes`` (``train.rl``: the answers per
    prompt, the posterior's prior strength, what passes; ``weights``: per category, ``train.rl.gap_pick``'s)."""
    cols = [c for c in ("prompt_id", "category", "level") if c in prompts.column_names]
    rows = prompts.select_columns(cols).to_list()
    return lambda per_chunk, seed: OnlinePicker(rows, outcomes, k=rl.generations, per_chunk=per_chunk, seed=seed,
                                                strength=rl.prior_strength, weights=weights)


def trainer_logs(log_history: list[dict], phase: str, before: int) -> list[dict]:
    """A phase's Trainer logs as plain numbers, each with its ``phase`` and its ``step`` after the
    ``before`` steps of the earlier phases (a resumed phase has its logs from the checkpoint). The
    closing entry (``train_runtime``, speeds: this machine's, not the training's) is left out."""
    return [{"phase": phase, "step": before + int(e["step"]),
             **{k: float(v) for k, v in e.items() if k != "step" and isinstance(v, int | float)}}
            for e in log_history if "step" in e and "train_runtime" not in e]
