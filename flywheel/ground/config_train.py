"""The ``train`` section of the one config tree (flywheel/ground/config.py): how each iteration
trains its targets (imitation, GRPO on rewards, a reward model) and GRPO's settings. Import them
from ``flywheel.ground.config``."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from flywheel.ground.config_parts import Strict

Method = Literal["sft", "dpo", "sft+dpo", "grpo", "sft+grpo", "reward"]
# Methods that train the target by reinforcement learning, on rewards (train.rl).
RL_METHODS = ("grpo", "sft+grpo")


class RLConfig(Strict):
    """GRPO (``train.method: grpo`` or ``sft+grpo``): the target samples ``generations`` answers to
    each prompt the select stage chose for it this iteration, a reward scores each answer, and TRL's
    GRPOTrainer moves the target toward the answers that beat their group's mean."""

    reward: str = Field("verifier", description="What scores an answer: verifier (the world's reference check, "
                        "judge.verifier's settings), judge (the run's judge, against the best opponent's answer to "
                        "the prompt from the battle log: 1 a win, 0.5 a tie, 0 a loss), reward_model (a reward "
                        "model: train.rl.reward_model, else the latest a train.method reward iteration made), or "
                        "module:function (prompts, completions, **columns) -> list of float or None). An answer "
                        "whose reward fails (an API error, an unparseable verdict) is recorded and left out, never "
                        "scored 0.")
    reward_model: str | None = Field(None, description="reward_model: the reward model's folder (a run's "
                                     "reward-models/<target>@<k>, or any sequence-classification checkpoint).")
    generations: int = Field(8, ge=2, description="Answers sampled per prompt (a GRPO group); train.batch_size must "
                             "be a multiple of it.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the answers.")
    beta: float = Field(0.0, ge=0, description="KL penalty toward the version trained from (0: none, no reference "
                        "model kept).")
    learning_rate: float | None = Field(None, gt=0, description="GRPO's peak learning rate (default "
                                        "train.learning_rate).")
    weight_decay: float = Field(0.0, ge=0, description="GRPO's AdamW weight decay (train.weight_decay is SFT's and "
                                "DPO's): most GRPO groups carry no gradient, and decay alone would shrink the weights.")
    max_completion_length: int | None = Field(None, ge=1, description="Longest sampled answer in tokens (default: "
                                              "the target's max_new_tokens).")
    use_vllm: bool = Field(False, description="Sample through a vLLM server (TRL's use_vllm, server mode; TRL "
                           "pushes the weights into it as they train, so it needs --weight-transfer-config); CUDA only.")
    vllm_url: str | None = Field(None, description="use_vllm: the server GRPO samples from, e.g. http://127.0.0.1:8001 "
                                 "(default: the target's first base_url, without /v1).")
    args: dict[str, Any] = Field({}, description="Extra trl.GRPOConfig fields (override the ones built here), e.g. "
                                 "{loss_type: dr_grpo}.")

    @field_validator("reward")
    @classmethod
    def _reward_kind(cls, v: str) -> str:
        if v not in ("verifier", "judge", "reward_model") and not re.fullmatch(r"[\w.]+:[\w.]+", v):
            raise ValueError(f"{v!r}: expected verifier, judge, reward_model or module:function")
        return v

    @field_validator("args")
    @classmethod
    def _grpo_fields(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _trl_fields_of("GRPOConfig", v)


def _trl_fields_of(config: str, v: dict[str, Any]) -> dict[str, Any]:
    """``v``, once every key is a field of ``trl.<config>``."""
    if v:
        import dataclasses

        import trl

        unknown = sorted(set(v) - {f.name for f in dataclasses.fields(getattr(trl, config))})
        if unknown:
            raise ValueError(f"not fields of trl.{config}: {unknown}")
    return v


class TrainConfig(Strict):
    method: Method = Field("sft", description="What each iteration trains: sft, dpo, sft+dpo (imitation, on the "
                           "curated datasets), grpo or sft+grpo (reinforcement learning on rewards: train.rl), or "
                           "reward (a reward model on the decisive judged pairs, reward-models/<target>@<k>; the "
                           "target's version is carried forward unchanged).")
    schedule: list[Method] = Field([], description="The method of iterations 1, 2, 3, ... in turn, the last one "
                                   "repeating (e.g. [sft, sft, grpo]); empty: train.method every iteration.")
    rl: RLConfig = Field(default_factory=RLConfig)
    steps: int = Field(1200, ge=0, description="Optimizer steps per target per iteration.")
    batch_size: int = Field(32, ge=1, description="Per-device batch size.")
    learning_rate: float = Field(1.5e-3, gt=0, description="Peak learning rate.")
    weight_decay: float = Field(1.0, ge=0, description="AdamW's decoupled weight decay (transformers leaves biases "
                                "and norms out): higher pulls the weights toward zero harder, which keeps a small "
                                "model from memorizing its teachers' answers.")
    replay: bool = Field(True, description="Also train on earlier iterations' SFT data.")
    checkpoint_steps: int = Field(200, ge=0, description="Save the Trainer's whole state (weights, optimizer, "
                                  "scheduler, RNG) in the run directory every this many steps (and at a phase's end; "
                                  "the latest kept), so that a run killed while training resumes from there, with the "
                                  "same result as one never interrupted; removed once the version is saved. 0: never.")
    dpo_beta: float = Field(0.1, gt=0, description="DPO beta.")
    lora: bool = Field(False, description="Train a LoRA adapter (peft) instead of all weights.")
    lora_r: int = Field(8, ge=1, description="LoRA rank.")
    launcher: Literal["inline", "accelerate"] = Field(
        "inline", description="inline: train in the flow's process; accelerate: `accelerate launch` one "
        "training process per device (multi-GPU data parallel; --cpu where there is no GPU).")
    num_processes: int = Field(1, ge=1, description="accelerate: processes (devices) per training run.")
    max_length: int | None = Field(None, ge=8, description="Longest training sequence in tokens (prompt + answer); "
                                   "unset: the model's context length, at most 1024.")
    precision: Literal["auto", "bf16", "fp16", "fp32"] = Field(
        "auto", description="Mixed precision: auto is bf16 where the hardware supports it (CUDA), else fp32.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="dtype the weights are loaded in for training (float32 master weights suit mixed "
        "precision).")
    activation_checkpointing: bool | None = Field(
        None, description="Recompute activations in the backward pass instead of keeping them (transformers' "
        "activation checkpointing): less memory, more compute, the same weights. Unset: on for models of at least "
        "100M parameters (TRL's default), off for smaller ones, where activations take little memory.")
    sft_args: dict[str, Any] = Field({}, description="Extra trl.SFTConfig fields (override the ones built here), "
                                     "e.g. {gradient_accumulation_steps: 4}.")
    dpo_args: dict[str, Any] = Field({}, description="Extra trl.DPOConfig fields, e.g. {loss_type: ipo}.")
    reward_args: dict[str, Any] = Field({}, description="Extra trl.RewardConfig fields (method reward).")

    @field_validator("sft_args", "dpo_args", "reward_args")
    @classmethod
    def _trl_fields(cls, v: dict[str, Any], info) -> dict[str, Any]:
        names = {"sft_args": "SFTConfig", "dpo_args": "DPOConfig", "reward_args": "RewardConfig"}
        return _trl_fields_of(names[info.field_name], v)

    def method_of(self, k: int) -> str:
        """The method iteration ``k`` (from 1) trains with."""
        return self.schedule[min(k, len(self.schedule)) - 1] if self.schedule else self.method

    def methods(self, iterations: int) -> set[str]:
        """Every method iterations 1..``iterations`` train with."""
        return {self.method_of(k) for k in range(1, iterations + 1)}
