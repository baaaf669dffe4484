"""vLLM in-process (``vllm.LLM``), imported only when a config asks for it (CUDA machines)."""

from __future__ import annotations

import time

from flywheel.players.base import Player, SamplingParams
from flywheel.records import Generation, Prompt


class VLLMPlayer(Player):
    def __init__(self, name: str, path: str, gpu_memory_utilization: float = 0.9, **_: object) -> None:
        try:
            from vllm import LLM
        except ImportError as e:
            raise ValueError(f"player {name}: kind 'vllm' needs the vllm package (pip install -e .[vllm]): {e}") from None
        self.name = name
        self.llm = LLM(model=path, gpu_memory_utilization=gpu_memory_utilization)

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        from vllm import SamplingParams as VSP

        t0 = time.perf_counter()
        outs = self.llm.generate([p.text for p in prompts],
                                 VSP(max_tokens=params.max_new_tokens, temperature=params.temperature, seed=params.seed))
        dt = (time.perf_counter() - t0) / max(len(prompts), 1)
        return [Generation(self.name, p.id, o.outputs[0].text.strip(), None, dt) for p, o in zip(prompts, outs)]
