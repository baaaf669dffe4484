"""A reward model from the arena's preference pairs (issue 37): TRL's ``RewardTrainer`` on a
sequence-classification head (one scalar) over a target's checkpoint, and a scorer that reads it.

The pairs are what DPO trains on: ``prompt``, ``chosen``, ``rejected``, either plain text or TRL's
conversational format (lists of ``{"role", "content"}`` messages), or without ``prompt`` (TRL's
implicit prompt: ``chosen`` and ``rejected`` hold the whole sequence). The model learns
Bradley-Terry scores: ``sigmoid(score(chosen) - score(rejected))`` is the chance it gives that the
chosen answer is the better one.

A sequence is read as TRL reads it in training: plain text is ``prompt + completion`` followed by
the tokenizer's end-of-sequence token; a conversation goes through the tokenizer's chat template.
The score is the classification head's logit at the sequence's last token.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.ground import progress
from flywheel.ground.atomic import DamagedFileError
from flywheel.ground.chat import as_text, assistant
from flywheel.ground.checkpoints import save_checkpoint
from flywheel.ground.config import TrainConfig
from flywheel.learning.training import (
    Hardware, activation_checkpointing, is_main_process, max_length, resume_point, stage_loss, training_args,
)

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


def _load_classifier(path: str, **kwargs: Any):
    """``AutoModelForSequenceClassification`` with one label from ``path``: a causal LM checkpoint
    gets a new, randomly initialised head (TRL's notice of the missing head and the unused LM head
    is silenced; both are expected)."""
    from contextlib import nullcontext

    from safetensors import SafetensorError
    from transformers import AutoModelForSequenceClassification

    try:
        from trl.trainer.reward_trainer import suppress_seqcls_warning
    except ImportError:  # a TRL without it: the notice is only noise
        suppress_seqcls_warning = nullcontext
    try:
        with suppress_seqcls_warning():
            return AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, **kwargs)
    except SafetensorError as e:
        raise DamagedFileError(f"{path}: its weights cannot be read ({e}); restore the checkpoint from a copy") from e


def _pad_token(tokenizer, model) -> None:
    """A sequence-classification model finds a sequence's last token by its pad token: the
    tokenizer's (its end-of-sequence token when it has none), set on the model's config."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id


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
    model = _load_classifier(base, dtype=getattr(torch, cfg.dtype))
    _pad_token(tokenizer, model)
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
    return (
        "---\nlibrary_name: transformers\ntags: [trl, reward-model, flywheel]\n---\n\n"
        f"# Reward model {out.name}\n\n"
        "A Bradley-Terry reward model trained with TRL's `RewardTrainer`: a sequence-classification head "
        "(one scalar) on the weights of\n"
        f"`{base}`.\n\n"
        f"- pairs: {result.pairs} (prompt, chosen, rejected; {fmt}) of the arena's judged battles\n"
        f"- steps: {result.steps}; mean training loss: "
        f"{'n/a' if result.loss is None else f'{result.loss:.4f}'}\n"
        f"- pair accuracy on its training pairs (chosen scored above rejected, final weights): {fmt_acc}\n"
        + (f"- extra RewardConfig fields: {extra}\n" if extra else "")
        + "\nScore an answer with `flywheel.learning.reward_model.RewardScorer(path).score(prompts, answers)`; "
        "judge battles with it as `judge.kind: reward_model`.\n"
    )


class RewardScorer:
    """A saved reward model (or any sequence-classification checkpoint with one label), loaded once.

    ``score(prompts, completions)`` returns the scalar reward of each ``prompt + completion``,
    batched, without gradients. A prompt is text (read as ``prompt + completion`` and the
    end-of-sequence token, as TRL trains on text) or a conversation (a list of messages: the
    completion, text or messages, is its assistant turn, read through the tokenizer's chat template;
    a tokenizer without one reads the turns' text). Sequences longer than the model's context keep
    their end: the score is read at the last token.

    ``device``: ``auto`` is cuda when a GPU is visible, else cpu; ``dtype``: ``auto`` is bfloat16
    on a GPU that supports it, else float32."""

    def __init__(self, path: str | Path, device: str = "auto", batch_size: int = 64, dtype: str = "auto") -> None:
        from transformers import AutoTokenizer

        from flywheel.players.hf import LOCAL, resolve_device, resolve_dtype

        self.path = str(path)
        self.device = resolve_device(device)
        with LOCAL:  # loading is not thread-safe (flywheel/players/hf.py)
            tokenizer = AutoTokenizer.from_pretrained(self.path)
            model = _load_classifier(self.path, dtype=resolve_dtype(dtype, self.device)).to(self.device)
        self._setup(model, tokenizer, batch_size)

    @classmethod
    def from_model(cls, model, tokenizer, batch_size: int = 64) -> RewardScorer:
        """A scorer over a model already loaded (where it is), e.g. one just trained."""
        self = cls.__new__(cls)
        self.path = getattr(model, "name_or_path", "")
        self.device = str(next(model.parameters()).device)
        self._setup(model, tokenizer, batch_size)
        return self

    def _setup(self, model, tokenizer, batch_size: int) -> None:
        if getattr(model.config, "num_labels", 1) != 1:
            raise ValueError(f"{self.path}: a reward model has one output; this one has {model.config.num_labels}")
        self.model, self.tokenizer, self.batch_size = model.eval(), tokenizer, max(1, batch_size)
        if model.config.pad_token_id is None:
            _pad_token(tokenizer, model)
        self.pad_id = model.config.pad_token_id
        self.context = max_context(model)

    @property
    def chat(self) -> bool:
        """Whether the tokenizer has a chat template (conversations are read through it)."""
        return self.tokenizer.chat_template is not None

    def ids(self, prompt, completion) -> list[int]:
        """The token ids the model reads for one (prompt, completion), as TRL tokenizes a pair."""
        if isinstance(prompt, str) and isinstance(completion, str):
            text = prompt + completion
            eos = self.tokenizer.eos_token
            if eos and not text.endswith(eos):
                text += eos
            ids = list(self.tokenizer(text)["input_ids"])
        else:
            turns = list(prompt) if not isinstance(prompt, str) else [{"role": "user", "content": prompt}]
            turns += assistant(completion) if isinstance(completion, str) else list(completion)
            if self.chat:
                ids = list(self.tokenizer.apply_chat_template(turns, tokenize=True, return_dict=True)["input_ids"])
            else:  # no template: the turns' text, as the target was asked in raw text
                return self.ids(as_text(turns[:-1]), as_text(turns[-1:]))
        return ids

    def score(self, prompts: Sequence, completions: Sequence) -> list[float]:
        """The reward of each (prompt, completion): same length and order."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        return self.score_ids([self.ids(p, c) for p, c in zip(prompts, completions)])

    def score_ids(self, seqs: Sequence[Sequence[int]]) -> list[float]:
        """The reward of each tokenized sequence (its ``ids``): same length and order."""
        import torch

        seqs = [list(s)[-self.context:] for s in seqs]
        out: list[float] = []
        with torch.no_grad():
            for start in range(0, len(seqs), self.batch_size):
                chunk = seqs[start : start + self.batch_size]
                width = max(len(s) for s in chunk)
                # Right padding, as the Trainer's collator pads: positions as in training.
                ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for i, s in enumerate(chunk):
                    ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
                    mask[i, : len(s)] = 1
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                out.extend(logits[:, 0].float().cpu().tolist())
        return out


def max_context(model) -> int:
    """The longest sequence the model reads: its position embeddings' count (no limit known: 1M)."""
    c = model.config
    n = getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", None)
    return int(n) if n else 1_000_000


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
