"""The ``train`` section of the one config tree (flywheel/config/tree.py): how each iteration
trains its targets (imitation, GRPO on rewards, a reward model) and GRPO's settings. Import them
from ``flywheel.config.tree``."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from flywheel.config.parts import Strict

Method = Literal["sft", "dpo", "sft+dpo", "grpo", "sft+grpo", "rloo", "sft+rloo", "expert", "sft+expert",
                 "onpolicy_dpo", "sft+onpolicy_dpo", "reward"]
# Methods that learn from rewards of the target's own sampled answers (train.rl).
RL_METHODS = ("grpo", "sft+grpo", "rloo", "sft+rloo", "expert", "sft+expert", "onpolicy_dpo", "sft+onpolicy_dpo")
# Of those, the ones that sample while they train (TRL's online trainers); the others sample first
# (flywheel.arena.own_answers), then train on what passed.
ONLINE_METHODS = ("grpo", "sft+grpo", "rloo", "sft+rloo")


class RLConfig(Strict):
    """Learning from the target's own answers (``train.method``: grpo, rloo, expert, onpolicy_dpo,
    each alone or after SFT): the target samples ``generations`` answers to each prompt the select
    stage chose for it this iteration, a reward scores each answer, and the method learns from the
    answers that beat the others: TRL's GRPOTrainer or RLOOTrainer toward those above their group's
    mean (or the others' mean), expert iteration by SFT on the passed ones, on-policy DPO on
    (passed, failed) pairs of one prompt."""

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
    prompts: Literal["battles", "train"] = Field("battles", description="The prompts a phase learns on: battles "
                                                 "(those the select stage chose for the target's train battles of the "
                                                 "iteration) or train (also every other train-split prompt with a "
                                                 "reference answer; a reward that needs the battles' baseline answer, "
                                                 "judge, cannot score those).")
    pass_reward: float = Field(1.0, allow_inf_nan=False, description="An answer passes at this reward or more: "
                               "expert iteration trains on it, on-policy DPO pairs it (chosen) with an answer of the "
                               "same prompt that does not (rejected), and the learnability posterior counts it a "
                               "pass. The verifier and the "
                               "judge reward 0 to 1, so with them it must be above 0 and at most 1; a reward "
                               "model's or your function's scores may lie anywhere: name the score that passes.")
    dynamic_sampling: bool = Field(True, description="grpo and rloo: before training, sample generations answers to "
                                   "prompts (the answer budget below): with pick_online, those groups start the "
                                   "posterior the trainer picks by; without, the trainer learns only on the prompts "
                                   "whose answers got more than one reward (a flat group's prompt is replaced, not "
                                   "trained on). expert and onpolicy_dpo always drop flat groups.")
    pick_online: bool = Field(True, description="grpo and rloo: the trainer picks its prompts a generation batch at "
                              "a time, those likeliest to get answers that differ (the posterior mean chance, from "
                              "the learnability posterior that the groups sampled before the phase and the trainer's "
                              "own groups update as it trains); a prompt picked rests while half of the prompts "
                              "likelier to teach than not are picked. false: shuffled passes over the prompts (with "
                              "dynamic_sampling, those whose answers differed). Under several processes the passes "
                              "are shuffled.")
    thin_known: bool = Field(False, description="sft+expert: each curated row is kept with chance min(1, 4 (1 - p)), "
                             "p the pass rate of the target's own sampled answers in the row's category (rows "
                             "without one: its answers to prompts without one): all where it passes three answers "
                             "in four or fewer, fewer the more surely it answers right, so that the phase's steps go "
                             "to what it does not know yet. false: every curated row.")
    answers: int | None = Field(None, ge=1, description="Own answers sampled per target before a phase trains "
                                "(expert, onpolicy_dpo, dynamic sampling), in rounds that pick the prompts with the "
                                "highest learnability; default: the phase's steps x train.batch_size, what a GRPO "
                                "phase of those steps samples.")
    prior_strength: float = Field(2.0, gt=0, description="The learnability posterior: a prompt not yet sampled takes "
                                  "its cell's (category x level) pass rate as its prior, worth this many answers.")
    gap_pick: float = Field(0.0, ge=0, description="Picking prompts by category: a prompt's learnability (before "
                            "the own answers are sampled) and chance to teach (GRPO's and RLOO's online picks) are "
                            "multiplied by 1 + gap_pick x g, g the best opponent's validation accuracy in the prompt's "
                            "category minus that of the version trained from (at least 0), so that more of the answers "
                            "go to the categories the target trails. 0: the posterior alone. Task worlds only.")
    leave_out: list[str] = Field([], description="Categories whose prompts the target's own answers leave out: "
                                 "never sampled before a phase, never picked by GRPO or RLOO (e.g. one where a right "
                                 "sampled answer is a guess: its commonest answer scores as well as the target). "
                                 "Their curated rows still train.")
    max_failed: float = Field(0.5, ge=0, le=1, description="A phase whose share of failed rewards (errors, no "
                              "verdict, no reference) is over this stops the run with an error; no version is made "
                              "from it.")
    args: dict[str, Any] = Field({}, description="Extra trl.GRPOConfig (method grpo) or trl.RLOOConfig (rloo) fields "
                                 "(override the ones built here), e.g. {loss_type: dr_grpo}.")

    @field_validator("reward")
    @classmethod
    def _reward_kind(cls, v: str) -> str:
        if v not in ("verifier", "judge", "reward_model") and not re.fullmatch(r"[\w.]+:[\w.]+", v):
            raise ValueError(f"{v!r}: expected verifier, judge, reward_model or module:function")
        return v

    @field_validator("args")
    @classmethod
    def _grpo_fields(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v:
            import dataclasses

            import trl

            known = {f.name for c in (trl.GRPOConfig, trl.RLOOConfig) for f in dataclasses.fields(c)}
            unknown = sorted(set(v) - known)
            if unknown:
                raise ValueError(f"not fields of trl.GRPOConfig nor trl.RLOOConfig: {unknown}")
        return v


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
                           "curated datasets); grpo, rloo (reinforcement learning on rewards: train.rl), expert "
                           "(expert iteration: SFT on the target's own passed answers), onpolicy_dpo (DPO on pairs "
                           "of its own passed and failed answers), each also after SFT (sft+grpo, ...; sft+expert "
                           "mixes the curated rows and the passed answers in one SFT phase); or "
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
    gap_mix: float = Field(0.0, ge=0, description="Weights the SFT rows (curated, and expert iteration's own passed "
                           "answers) by category: a row appears 1 + gap_mix x g times in the data on average, g "
                           "the best opponent's validation accuracy there minus that of the version trained from "
                           "(at least 0); train.steps stay the same, so the categories the target trails get a "
                           "larger share of them. 0: every row once. Task worlds only.")
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


def picks_prompts(tc: TrainConfig, method: str) -> bool:
    """Whether an iteration of ``method`` picks prompts by the learnability posterior: it samples
    the target's own answers first, or it is GRPO or RLOO picking online."""
    return samples_first(tc, method) or picks_online(tc, method)


def picks_online(tc: TrainConfig, method: str) -> bool:
    """Whether GRPO's or RLOO's trainer picks its prompts online (``train.rl.pick_online``): in one
    process only (under several, each sees only its share of the rewards, and passes are shuffled)."""
    return method in ONLINE_METHODS and tc.rl.pick_online and (tc.launcher == "inline" or tc.num_processes == 1)


def samples_first(tc: TrainConfig, method: str) -> bool:
    """Whether an iteration of ``method`` samples the target's own answers before it trains:
    expert iteration and on-policy DPO always, GRPO and RLOO with dynamic sampling."""
    return method in RL_METHODS and (method not in ONLINE_METHODS or tc.rl.dynamic_sampling)
