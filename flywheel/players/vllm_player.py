"""vLLM in-process (``vllm.LLM``), imported only when a config asks for it (CUDA machines).

A model whose tokenizer has a chat template is asked through ``LLM.chat`` (with the system
prompt), as the transformers player asks it; otherwise through ``LLM.generate`` on raw text."""

from __future__ import annotations

import time

from flywheel.ground.chat import cut_at_stop, history_of, messages, note_raw_text, raw_prompt, uses_chat
from flywheel.ground.records import Generation, Prompt
from flywheel.players.player import Player, PlayerSetup, SamplingParams


class VLLMPlayer(Player):
    @classmethod
    def from_config(cls, pc, name: str, setup: PlayerSetup) -> Player:
        if not setup.path:
            raise ValueError(f"player {name}: kind vllm needs 'path'")
        return cls(name, setup.path, setup.gpu_memory_utilization or pc.gpu_memory_utilization, pc.chat, pc.system_prompt)

    def __init__(self, name: str, path: str, gpu_memory_utilization: float = 0.9, chat: str = "auto",
                 system_prompt: str | None = None, **_: object) -> None:
        try:
            from vllm import LLM
        except ImportError as e:
            raise ValueError(f"player {name}: kind 'vllm' needs the vllm package (pip install -e .[vllm]): {e}") from None
        self.name = name
        self.system_prompt = system_prompt
        self.llm = LLM(model=path, gpu_memory_utilization=gpu_memory_utilization)
        self.chat = uses_chat(self.llm.get_tokenizer().chat_template, chat, name)
        if not self.chat and chat == "auto":
            note_raw_text(name)

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        from vllm import SamplingParams as VSP

        sampling = VSP(max_tokens=params.max_new_tokens, temperature=params.temperature or 0.0, seed=params.seed,
                       stop=list(params.stop) or None)
        t0 = time.perf_counter()
        if self.chat:
            outs = self.llm.chat([messages(p.text, self.system_prompt, history_of(p)) for p in prompts], sampling,
                                 use_tqdm=False)
        else:
            texts = [raw_prompt(p.text, self.system_prompt, history_of(p)) for p in prompts]
            outs = self.llm.generate(texts, sampling, use_tqdm=False)
        dt = (time.perf_counter() - t0) / max(len(prompts), 1)
        return [Generation(self.name, p.id, cut_at_stop(o.outputs[0].text, params.stop).strip(), None, dt)
                for p, o in zip(prompts, outs)]
