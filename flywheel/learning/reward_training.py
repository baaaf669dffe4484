"""A reward model from the arena's preference pairs (issue 37): TRL's ``RewardTrainer`` on a
sequence-classification head (one scalar) over a target's checkpoint, measured with the scorer that
reads it (``judges.reward_scorer.RewardScorer``).

The pairs are what DPO trains on: ``prompt``, ``chosen``, ``rejected``, either plain text or TRL's
conversational format (lists of ``{"role", "content"}`` messages), or without ``prompt`` (TRL's
implicit prompt: ``chosen`` and ``rejected`` hold the whole sequence). The model learns
Bradley-Terry scores: ``sigmoid(score(chosen) - score(rejected))`` is the chance it gives that the
chosen answer is the better one.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.config.tree import TrainConfig
from flywheel.ground import progress
from flywheel.ground.cards import hub_card
from flywheel.ground.checkpoints import save_checkpoint
from flywheel.learning.training import (
    Hardware,
    activation_checkpointing,
    is_main_process,
    max_length,
    resume_point,
    stage_loss,
    training_args,
)
from judges.reward_scorer import RewardScorer, load_classifier, pad_token

log = logging.getLogger("flywheel")

PAIR_COLUMNS = ("prompt", "chosen", "rejected")


@dataclass(frozen=True)
class RewardModelResult:
    """One reward-model training: optimizer ``steps``, mean training ``loss`` (None when no step
    was logged), the ``pairs`` it trained on (after TRL dropped those longer than
    ``train.max_length``), ``train_accuracy``: the share of those pairs the final weights rank
    right, and ``accuracy``: the share of held-out pairs, which the caller measures
    (``pair_accuracy``) and fills in with ``dataclasses.replace``."""

    steps: int
    loss: float | None
    pairs: int
    train_accuracy: float | None = None
    accuracy: float | None = None


def train_reward_model(base: str, out: Path, pairs, cfg: TrainConfig, steps: int, seed: int,
                       state_dir: Path | None = None) -> RewardModelResult:
    """Train a reward model initialised from ``base`` (a target's checkpoint: its architecture and
    weights, with a new one-scalar head) on ``pairs`` (a ``datasets.Dataset`` with columns
    ``chosen``, ``rejected`` and usually ``prompt``, text or conversational) for ``steps`` optimizer
    steps, and save it with its tokenizer and a ``README.md`` card to ``out`` (the main process).

    The Trainer's arguments are the SFT and DPO phases' (``training_args``: batch size, learning
    rate, precision from ``train.precision`` and the hardware, ``train.max_length``...), then
    ``train.reward_args`` (extra ``trl.RewardConfig`` fields) where the config has them.

    ``state_dir`` (with ``train.checkpoint_steps``): where the Trainer keeps its checkpoints
    (``state_dir/reward``); called again after a kill, training resumes from the latest and ends
    with the same weights and loss as if never interrupted. The caller removes it when done.

    Every weight is trained (``train.lora`` does not apply). After training, the main process
    scores the pairs it trained on with the final weights (``RewardModelResult.train_accuracy``).
    Raises ``ValueError`` for no steps or no pairs: there would be nothing but a random head."""
    import torch
    from transformers import AutoTokenizer, set_seed

    if steps <= 0 or pairs is None or not len(pairs):
        raise ValueError(f"reward model {out.name}: nothing to train on ({steps} steps, "
                         f"{0 if pairs is None else len(pairs)} pairs)")
    extra: dict[str, Any] = dict(getattr(cfg, "reward_args", None) or {})
    if cfg.lora:
        log.warning("reward %s: train.lora is not applied to reward models; all weights are trained", out.name)
    tokenizer = AutoTokenizer.from_pretrained(base)
    set_seed(seed)  # the new head's initial weights
    model = load_classifier(base, dtype=getattr(torch, cfg.dtype))
    pad_token(tokenizer, model)
    hw, length = Hardware.detect(), max_length(cfg, model)
    columns = [c for c in PAIR_COLUMNS if c in pairs.column_names]
    keep = state_dir is not None and cfg.checkpoint_steps > 0
    with tempfile.TemporaryDirectory(prefix="flywheel-reward-") as tmp:
        scratch = str(state_dir / "reward") if keep else tmp
        resume, saved_at = (resume_point(Path(scratch)) if keep else None) or (None, 0)
        from trl import RewardConfig, RewardTrainer

        args = RewardConfig(**{**training_args(cfg, steps, seed, scratch, length, hw),
                               "activation_checkpointing": activation_checkpointing(cfg, model, extra), **extra})
        trainer = RewardTrainer(model=model, args=args, train_dataset=pairs.select_columns(columns),
                                processing_class=tokenizer)
        trainer.add_callback(progress.trainer_callback(f"train reward {out.name}", steps))
        if os.environ.get("FLYWHEEL_TRAINER_LOGS") != "1":  # `flywheel run -v` shows the trainer's log dicts
            from transformers import PrinterCallback

            trainer.remove_callback(PrinterCallback)
        used = len(trainer.train_dataset)
        if used < len(pairs):
            log.warning("reward %s: %d of %d pairs are longer than %d tokens and were left out", out.name,
                        len(pairs) - used, len(pairs), args.max_length)
        if resume:
            log.info("reward %s: resuming from %s", out.name, Path(resume).name)
        if resume and saved_at >= steps:
            # Training had finished: its last weights, not one step more (as train() would run).
            from transformers import TrainerState

            trainer._load_from_checkpoint(resume)  # what train(resume_from_checkpoint=...) loads first
            trainer.state = TrainerState.load_from_json(os.path.join(resume, "trainer_state.json"))
        else:
            trainer.train(resume_from_checkpoint=resume)
        done, loss, model = trainer.state.global_step, stage_loss(trainer.state.log_history), trainer.model
    result = RewardModelResult(done, loss, used)
    if is_main_process():  # under accelerate every process trains; one measures and saves
        # The pairs as the Trainer tokenized them (its map rewrites the text columns): the same ids.
        kept = trainer.train_dataset
        scorer = RewardScorer.from_model(model, tokenizer, batch_size=2 * cfg.batch_size)
        scores = scorer.score_ids(list(kept["chosen_ids"]) + list(kept["rejected_ids"]))
        right = sum(1 for c, r in zip(scores[:used], scores[used:]) if c > r)
        result = RewardModelResult(done, loss, used, right / used if used else None)
        save_checkpoint(model, tokenizer, out, {"README.md": model_card(base, out, result, pairs, extra)})
    log.info("reward %s: %d steps on %d pairs, loss %s, training pair accuracy %s", out.name, done, used,
             "n/a" if loss is None else f"{loss:.4f}",
             "n/a" if result.train_accuracy is None else f"{result.train_accuracy:.3f}")
    return result


def model_card(base: str, out: Path, result: RewardModelResult, pairs, extra: dict) -> str:
    """The ``README.md`` saved with a reward model: what it was trained from and on, and how well
    it ranks its training pairs."""
    fmt = "conversational" if pairs.num_rows and not isinstance(pairs[0]["chosen"], str) else "text"
    fmt += "" if "prompt" in pairs.column_names else ", implicit prompt"
    fmt_acc = "n/a" if result.train_accuracy is None else f"{result.train_accuracy:.3f}"
    text = (
        f"# Reward model {out.name}\n\n"
        "A Bradley-Terry reward model trained with TRL's `RewardTrainer`: a sequence-classification head "
        "(one scalar) on the weights of\n"
        f"`{base}`.\n\n"
        f"- pairs: {result.pairs} (prompt, chosen, rejected; {fmt}) of the arena's judged battles\n"
        f"- steps: {result.steps}; mean training loss: "
        f"{'n/a' if result.loss is None else f'{result.loss:.4f}'}\n"
        f"- pair accuracy on its training pairs (chosen scored above rejected, final weights): {fmt_acc}\n"
        + (f"- extra RewardConfig fields: {extra}\n" if extra else "")
        + "\nScore an answer with `judges.reward_scorer.RewardScorer(path).score(prompts, answers)`; "
        "judge battles with it as `judge.kind: reward_model`.\n"
    )
    return hub_card("model", text, library_name="transformers", tags=["trl", "reward-model", "flywheel"])


def pair_accuracy(scorer: RewardScorer, pairs) -> float | None:
    """The share of ``pairs`` (columns ``chosen``, ``rejected`` and optionally ``prompt``; a
    ``datasets.Dataset`` or a list of dicts) whose chosen answer scores above the rejected one;
    None for no pairs. Equal scores count as wrong."""
    rows = list(pairs)
    if not rows:
        return None
    prompts = [r.get("prompt", "" if isinstance(r["chosen"], str) else []) for r in rows]
    scores = scorer.score(prompts + prompts, [r["chosen"] for r in rows] + [r["rejected"] for r in rows])
    n = len(rows)
    return sum(1 for c, r in zip(scores[:n], scores[n:]) if c > r) / n
