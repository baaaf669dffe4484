"""A local transformers model as a player: batched greedy or sampled generation, left padding,
asked through its chat template when it has one (``flywheel/ground/chat.py``)."""

from __future__ import annotations

import threading
import time

import torch

from flywheel.ground.chat import cut_at_stop, history_of, messages, note_raw_text, raw_prompt, uses_chat
from flywheel.ground.checkpoints import load_checkpoint
from flywheel.ground.records import Generation, Prompt
from flywheel.players.player import Player, SamplingParams

# Loading (transformers initialises weights on the meta device through process-wide state) and
# generation (the global RNG when sampling) are not safe in concurrent threads, and a local model
# gains nothing from them on one machine: mapped shards in threads take turns here.
LOCAL = threading.RLock()


def resolve_device(device: str = "auto") -> str:
    """``auto``: cuda when a GPU is visible, else cpu; any other value is a torch device."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """``auto``: bfloat16 on a GPU that supports it, else float32."""
    if dtype == "auto":
        bf16 = device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    return getattr(torch, dtype)


class TransformersPlayer(Player):
    """Loads ``path`` with ``AutoTokenizer`` / ``AutoModelForCausalLM`` and answers in batches."""

    def __init__(self, name: str, path: str, batch_size: int = 256, chat: str = "auto",
                 system_prompt: str | None = None, device: str = "auto", dtype: str = "auto", **_: object) -> None:
        with LOCAL:
            self._load(name=name, path=path, batch_size=batch_size, chat=chat, system_prompt=system_prompt,
                       device=device, dtype=dtype)

    def _load(self, *, name: str, path: str, batch_size: int, chat: str, system_prompt: str | None,
              device: str, dtype: str) -> None:
        from transformers import AutoTokenizer

        self.name = name
        self.path = path
        self.batch_size = batch_size
        self.system_prompt = system_prompt
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.chat = uses_chat(self.tokenizer.chat_template, chat, name)
        if not self.chat and chat == "auto":
            note_raw_text(name)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = resolve_device(device)
        self.model = load_checkpoint(path, dtype=resolve_dtype(dtype, self.device)).to(self.device)
        self.model.eval()

    def render(self, prompt: Prompt) -> str:
        """The text the model reads for ``prompt``: the chat template's rendering (with the
        generation prompt), or the raw prompt after the system prompt, if any; after the prompt's
        earlier messages, when it has some (``flywheel.ground.chat``)."""
        if self.chat:
            return self.tokenizer.apply_chat_template(messages(prompt.text, self.system_prompt, history_of(prompt)),
                                                      tokenize=False, add_generation_prompt=True)
        return raw_prompt(prompt.text, self.system_prompt, history_of(prompt))

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        with LOCAL:
            return self._generate(prompts, params)

    @torch.no_grad()
    def _generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            t0 = time.perf_counter()
            enc = self.tokenizer([self.render(p) for p in chunk], return_tensors="pt", padding=True,
                                 add_special_tokens=False).to(self.device)
            sampling = not params.greedy
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
                **({"stop_strings": list(params.stop), "tokenizer": self.tokenizer} if params.stop else {}),
            )
            texts = self.tokenizer.batch_decode(ids[:, enc.input_ids.shape[1] :], skip_special_tokens=True)
            dt = (time.perf_counter() - t0) / len(chunk)
            out += [Generation(self.name, p.id, cut_at_stop(t, params.stop).strip(), None, dt)
                    for p, t in zip(chunk, texts)]
        return out

    def reference_loss(self, prompts: list[Prompt]) -> float | None:
        """Mean per-token negative log-likelihood of the reference answers (and the end of text
        after them, as SFT trains) given the prompts as the model reads them: a smooth measure of
        learning that moves before exact-match accuracy does. Prompts without a reference are
        skipped (None if none has one)."""
        with LOCAL:
            return self._reference_loss([p for p in prompts if p.reference is not None])

    @torch.no_grad()
    def _reference_loss(self, prompts: list[Prompt]) -> float | None:
        tok, total, count = self.tokenizer, 0.0, 0
        eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
        for start in range(0, len(prompts), self.batch_size):
            rows = [(tok(self.render(p), add_special_tokens=False).input_ids,
                     tok(str(p.reference), add_special_tokens=False).input_ids + eos)
                    for p in prompts[start:start + self.batch_size]]
            width = max(len(a) + len(b) for a, b in rows)
            ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
            labels = torch.full((len(rows), width), -100, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, (a, b) in enumerate(rows):  # right padding: positions are those of training
                ids[i, :len(a) + len(b)] = torch.tensor(a + b)
                labels[i, len(a):len(a) + len(b)] = torch.tensor(b)
                mask[i, :len(a) + len(b)] = 1
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits[:, :-1]
            target = labels[:, 1:].to(self.device)
            nll = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                    ignore_index=-100, reduction="sum")
            total += float(nll)
            count += int((target != -100).sum())
        return round(total / count, 6) if count else None

    def close(self) -> None:
        del self.model
