"""A local transformers model as a player: batched greedy or sampled generation, left padding."""

from __future__ import annotations

import threading
import time

import torch

from flywheel.players.base import Player, SamplingParams
from flywheel.records import Generation, Prompt


# Loading (transformers initialises weights on the meta device through process-wide state) and
# generation (the global RNG when sampling) are not safe in concurrent threads, and a local model
# gains nothing from them on one machine: mapped shards in threads take turns here.
LOCAL = threading.RLock()


class TransformersPlayer(Player):
    """Loads ``path`` with ``AutoTokenizer`` / ``AutoModelForCausalLM`` and answers in batches."""

    def __init__(self, name: str, path: str, batch_size: int = 256, **_: object) -> None:
        with LOCAL:
            self._load(name, path, batch_size)

    def _load(self, name: str, path: str, batch_size: int) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = name
        self.path = path
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(path)
        self.model.eval()

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        with LOCAL:
            return self._generate(prompts, params)

    @torch.no_grad()
    def _generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            t0 = time.perf_counter()
            enc = self.tokenizer(
                [p.text for p in chunk], return_tensors="pt", padding=True, add_special_tokens=False
            )
            sampling = params.temperature > 0
            if sampling:
                torch.manual_seed(params.seed)
            ids = self.model.generate(
                **enc,
                max_new_tokens=params.max_new_tokens,
                do_sample=sampling,
                temperature=params.temperature if sampling else None,
                top_k=None,
                top_p=None,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
            texts = self.tokenizer.batch_decode(ids[:, enc.input_ids.shape[1] :], skip_special_tokens=True)
            dt = (time.perf_counter() - t0) / len(chunk)
            out += [Generation(self.name, p.id, t.strip(), None, dt) for p, t in zip(chunk, texts)]
        return out

    def reference_loss(self, prompts: list[Prompt]) -> float | None:
        """Mean per-token negative log-likelihood of the reference answers (and the end of text
        after them, as SFT trains) given the prompts: a smooth measure of learning that moves
        before exact-match accuracy does. Prompts without a reference are skipped (None if
        none has one)."""
        with LOCAL:
            return self._reference_loss([p for p in prompts if p.reference is not None])

    @torch.no_grad()
    def _reference_loss(self, prompts: list[Prompt]) -> float | None:
        tok, total, count = self.tokenizer, 0.0, 0
        eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
        for start in range(0, len(prompts), self.batch_size):
            rows = [(tok(p.text, add_special_tokens=False).input_ids,
                     tok(str(p.reference), add_special_tokens=False).input_ids + eos) for p in prompts[start:start + self.batch_size]]
            width = max(len(a) + len(b) for a, b in rows)
            ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
            labels = torch.full((len(rows), width), -100, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, (a, b) in enumerate(rows):  # right padding: positions are those of training
                ids[i, :len(a) + len(b)] = torch.tensor(a + b)
                labels[i, len(a):len(a) + len(b)] = torch.tensor(b)
                mask[i, :len(a) + len(b)] = 1
            logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1]
            target = labels[:, 1:]
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                    ignore_index=-100, reduction="sum")
            total += float(nll)
            count += int((target != -100).sum())
        return round(total / count, 6) if count else None

    def close(self) -> None:
        del self.model
