"""The Anthropic Messages API (or anything that speaks it).

Since API version 2026-10-21 (the default of the 2.x SDKs) the Messages API rejects
``temperature``, ``top_p`` and ``top_k`` with a 400, even at their defaults, and the SDK no
longer has them: this player sends no sampling settings. ``temperature`` in its config is only
part of the generation-cache key.
"""

from __future__ import annotations

from flywheel.ground.chat import history_of
from flywheel.ground.chat import messages as chat_messages
from flywheel.ground.records import Prompt
from flywheel.players.api import APIPlayer, Completion, MalformedResponse
from flywheel.players.openai_player import _API_KWARGS, api_key
from flywheel.players.player import SamplingParams


class AnthropicPlayer(APIPlayer):
    def __init__(self, name: str, model: str, base_urls: list[str] | None = None, api_key_env: str | None = None,
                 system_prompt: str | None = None, **kw) -> None:
        super().__init__(name, **{k: v for k, v in kw.items() if k in _API_KWARGS})
        self.model = model
        self.base_url = (base_urls or [None])[0]
        self._key = api_key(api_key_env or "ANTHROPIC_API_KEY", name, required=True)
        self.system_prompt = system_prompt
        self._client = None

    async def _open(self) -> None:
        from anthropic import AsyncAnthropic

        self._client = AsyncAnthropic(api_key=self._key, base_url=self.base_url, max_retries=0, timeout=self.timeout_s)

    async def _close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _complete(self, prompt: Prompt, params: SamplingParams) -> Completion:
        extra: dict = {"system": self.system_prompt} if self.system_prompt else {}
        if params.stop:
            extra["stop_sequences"] = list(params.stop)
        resp = await self._client.messages.create(
            model=self.model, max_tokens=params.max_new_tokens,
            messages=chat_messages(prompt.text, None, history_of(prompt)), **extra,
        )
        try:
            text = "".join(b.text for b in resp.content if getattr(b, "type", None) == "text")
            if not resp.content:
                raise ValueError("empty content")
            return Completion(text.strip(), int(resp.usage.input_tokens or 0), int(resp.usage.output_tokens or 0))
        except (AttributeError, TypeError, ValueError) as e:
            raise MalformedResponse(f"malformed message: {e}") from None
