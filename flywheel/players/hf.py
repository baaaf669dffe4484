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

    def close(self) -> None:
        del self.model
