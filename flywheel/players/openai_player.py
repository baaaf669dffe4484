"""Any OpenAI-compatible chat endpoint: the OpenAI API, ``vllm serve``, and others.

Several base URLs are balanced round-robin (one vLLM server per GPU, say). New target versions
trained as LoRA adapters can be served without a restart through vLLM's
``/v1/load_lora_adapter`` (the server needs ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``).
"""

from __future__ import annotations

import itertools
import os

from flywheel.ground.chat import history_of, raw_prompt
from flywheel.ground.chat import messages as chat_messages
from flywheel.ground.records import Prompt
from flywheel.players.api import APIPlayer, Completion, MalformedResponse
from flywheel.players.player import SamplingParams


def api_key(env: str | None, player: str, required: bool) -> str:
    """The key from the environment variable named in the config (never from the config)."""
    if env is None:
        if required:
            raise ValueError(f"player {player}: set api_key_env to the environment variable that holds the key")
        return "EMPTY"  # local OpenAI-compatible servers (vLLM) accept any key
    key = os.environ.get(env)
    if not key:
        raise ValueError(f"player {player}: environment variable {env} is not set")
    return key


class OpenAIPlayer(APIPlayer):
    def __init__(self, name: str, model: str, base_urls: list[str] | None = None, api_key_env: str | None = None,
                 system_prompt: str | None = None, max_tokens_field: str = "max_completion_tokens", **kw) -> None:
        super().__init__(name, **{k: v for k, v in kw.items() if k in _API_KWARGS})
        self.model = model
        self.base_urls = base_urls or [None]
        self._key = api_key(api_key_env, name, required=not base_urls)
        self.system_prompt = system_prompt
        self.max_tokens_field = max_tokens_field
        self._clients: list = []
        self._next = itertools.count()

    chat = True  # False: raw text through /v1/completions (a served checkpoint without a chat template)

    @classmethod
    def extra_config(cls, pc) -> dict:
        return {"max_tokens_field": pc.max_tokens_field}

    @classmethod
    def from_config(cls, pc, name: str, setup):
        player = super().from_config(pc, name, setup)
        player.chat = setup.chat
        return player

    async def _open(self) -> None:
        from openai import AsyncOpenAI

        self._clients = [AsyncOpenAI(api_key=self._key, base_url=u, max_retries=0, timeout=self.timeout_s)
                         for u in self.base_urls]

    async def _close(self) -> None:
        for c in self._clients:
            await c.close()
        self._clients = []

    async def _complete(self, prompt: Prompt, params: SamplingParams) -> Completion:
        client = self._clients[next(self._next) % len(self._clients)]
        if not self.chat:
            return await self._complete_raw(client, prompt, params)
        messages = chat_messages(prompt.text, self.system_prompt, history_of(prompt))
        resp = await client.chat.completions.create(model=self.model, messages=messages, **self.payload(params))
        try:
            text = resp.choices[0].message.content
            usage = resp.usage
            if not isinstance(text, str):
                raise TypeError("no text content")
            return Completion(text.strip(), int(getattr(usage, "prompt_tokens", 0) or 0),
                              int(getattr(usage, "completion_tokens", 0) or 0), chat_logprobs(resp.choices[0]))
        except (AttributeError, IndexError, TypeError, ValueError) as e:
            raise MalformedResponse(f"malformed chat completion: {e}") from None

    async def _complete_raw(self, client, prompt: Prompt, params: SamplingParams) -> Completion:
        """The prompt in raw text (``raw_prompt``, as a local player without a chat template reads
        it) through the legacy completions API, which takes ``max_tokens``."""
        body = self.payload(params)
        body["max_tokens"] = body.pop(self.max_tokens_field)
        if params.logprobs:
            body["logprobs"] = 1  # the legacy API's count of alternatives per token
        text = raw_prompt(prompt.text, self.system_prompt, history_of(prompt))
        resp = await client.completions.create(model=self.model, prompt=text, **body)
        try:
            out = resp.choices[0].text
            if not isinstance(out, str):
                raise TypeError("no text")
            usage = resp.usage
            return Completion(out.strip(), int(getattr(usage, "prompt_tokens", 0) or 0),
                              int(getattr(usage, "completion_tokens", 0) or 0), raw_logprobs(resp.choices[0]))
        except (AttributeError, IndexError, TypeError, ValueError) as e:
            raise MalformedResponse(f"malformed completion: {e}") from None

    def payload(self, params: SamplingParams) -> dict:
        """The request's sampling fields: the length limit under ``max_tokens_field``
        (``max_completion_tokens``, which reasoning models require; ``max_tokens`` for old
        servers), a temperature only when one is set, stop strings only when there are some."""
        out: dict = {self.max_tokens_field: params.max_new_tokens, "seed": params.seed}
        if params.temperature is not None:
            out["temperature"] = params.temperature
        if params.stop:
            out["stop"] = list(params.stop)
        if params.logprobs:
            out["logprobs"] = True
        return out

    def load_lora_adapter(self, lora_name: str, lora_path: str) -> None:
        """Ask every base URL (vLLM) to load an adapter under ``lora_name``; raises on failure."""
        import httpx

        for base in self.base_urls:
            if base is None:
                raise ValueError(f"player {self.name}: LoRA loading needs a base URL (a vLLM server)")
            r = httpx.post(f"{base.rstrip('/')}/load_lora_adapter", json={"lora_name": lora_name, "lora_path": lora_path},
                           headers={"Authorization": f"Bearer {self._key}"}, timeout=self.timeout_s)
            if r.status_code >= 400:
                raise RuntimeError(f"{base}: load_lora_adapter {lora_name} failed: {r.status_code} {r.text[:200]}")


def chat_logprobs(choice) -> tuple[tuple[str, float], ...]:
    """(token, log-probability) of each generated token of a chat choice; none where not returned."""
    content = getattr(getattr(choice, "logprobs", None), "content", None) or []
    return tuple((str(t.token), float(t.logprob)) for t in content)


def raw_logprobs(choice) -> tuple[tuple[str, float], ...]:
    """The same for a legacy completions choice (``logprobs.tokens`` beside ``logprobs.token_logprobs``)."""
    lp = getattr(choice, "logprobs", None)
    tokens, values = getattr(lp, "tokens", None) or [], getattr(lp, "token_logprobs", None) or []
    return tuple((str(t), float(v)) for t, v in zip(tokens, values) if v is not None)


_API_KWARGS = {"max_concurrency", "timeout_s", "retry", "price_input_per_mtok", "price_output_per_mtok", "budget", "seed"}
