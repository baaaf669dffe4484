"""A reward model read as a scorer: a sequence-classification checkpoint with one output (one a run
trained with ``train.method: reward``, or any other) scores each (prompt, answer) with one scalar.

The reward-model judge (``judges/reward_model.py``) decides battles with it; learning measures the
reward models it trains with it and builds GRPO rewards from it (``flywheel/learning/``).

A sequence is read as TRL reads it in training: plain text is ``prompt + completion`` followed by
the tokenizer's end-of-sequence token; a conversation goes through the tokenizer's chat template.
The score is the classification head's logit at the sequence's last token.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flywheel.ground.atomic import DamagedFileError
from flywheel.ground.chat import as_text, assistant


def load_classifier(path: str, **kwargs: Any):
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


def pad_token(tokenizer, model) -> None:
    """A sequence-classification model finds a sequence's last token by its pad token: the
    tokenizer's (its end-of-sequence token when it has none), set on the model's config."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id


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

        from flywheel.players.hf import LOCAL, resolve_device, resolve_dtype  # torch: imported when asked for

        self.path = str(path)
        self.device = resolve_device(device)
        with LOCAL:  # loading is not thread-safe (flywheel/players/hf.py)
            tokenizer = AutoTokenizer.from_pretrained(self.path)
            model = load_classifier(self.path, dtype=resolve_dtype(dtype, self.device)).to(self.device)
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
            pad_token(tokenizer, model)
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
