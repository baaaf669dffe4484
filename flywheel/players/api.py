"""What every API player shares: bounded concurrency, timeouts, one retry policy, usage and cost.

A subclass implements ``_complete(prompt, params) -> Completion`` for one prompt; this module
runs a batch of them concurrently (at most ``max_concurrency`` in flight), retries failures
that can pass (429, 5xx, timeouts, dropped connections, malformed bodies) with exponential
backoff and full jitter, honouring ``Retry-After`` / ``retry-after-ms``, and turns a call that
stays failed into a ``Generation`` with ``error`` set - never an empty answer.

The SDKs' own retries are switched off (``max_retries=0``) so that this is the one retry loop.
"""

from __future__ import annotations

import abc
import asyncio
import email.utils
import json
import random
import threading
import time
from dataclasses import dataclass

from flywheel.ground.ledger import SpendLedger
from flywheel.ground.records import Generation, Prompt
from flywheel.players.player import Player, PlayerSetup, SamplingParams


class MalformedResponse(Exception):
    """The server answered 2xx with a body that is not a usable completion."""


class BudgetExhausted(Exception):
    """The run's spending cap is reached; no more paid calls are made."""


BUDGET_STOP = "budget of $"  # how the error of a call the budget stopped begins


def stopped_by_budget(error: str | None) -> bool:
    """Whether a failed generation's error is the budget's stop (not a failure of the server)."""
    return bool(error) and error.startswith(BUDGET_STOP)


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    token_logprobs: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry ``attempt`` (1-based): the server's Retry-After when it
        gave one, else exponential backoff with full jitter."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_s)
        return rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))


def retry_after_s(exc: BaseException) -> float | None:
    """The wait a failed response asked for (``retry-after-ms``, ``Retry-After`` seconds or date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def should_retry_header(exc: BaseException) -> bool | None:
    """The server's own word on retrying (``x-should-retry: true|false``), or None."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    value = headers.get("x-should-retry") if headers is not None else None
    return {"true": True, "false": False}.get(str(value).strip().lower()) if value is not None else None


def is_retryable(exc: BaseException) -> bool:
    """The server's ``x-should-retry`` header when it sent one; else 429, 408, 409, 5xx,
    timeouts, connection errors and malformed bodies may pass on retry, and other 4xx (bad
    request, auth, not found) will not."""
    told = should_retry_header(exc)
    if told is not None:
        return told
    if isinstance(exc, MalformedResponse | asyncio.TimeoutError | json.JSONDecodeError):
        return True
    name = type(exc).__name__
    if name in ("APITimeoutError", "APIConnectionError", "APIResponseValidationError", "ReadTimeout",
                "ConnectError", "RemoteProtocolError"):
        return True
    status = getattr(exc, "status_code", None)
    return status is not None and (status in (408, 409, 429) or status >= 500)


class Budget:
    """A spending cap shared by every API player of a run (``max_usd`` None: no cap).

    Alone it counts what this process spends (``spent_usd`` to start from), its threads sharing
    it. Bound to the run's ``SpendLedger`` (the roster binds it), it counts every process of the
    run: ``add`` appends each paid call to the ledger and ``check``, before every call, reads the
    ledger's total. A call starts only while the total is under the cap, and calls already in
    flight when it is reached finish and are counted, so a run ends at most one batch over the
    cap: the calls in flight at once across all workers, at their price."""

    def __init__(self, max_usd: float | None = None, spent_usd: float = 0.0,
                 ledger: SpendLedger | None = None) -> None:
        self.max_usd = max_usd
        self.ledger = ledger
        self._spent = spent_usd
        self._lock = threading.Lock()

    @property
    def spent_usd(self) -> float:
        return self.ledger.total() if self.ledger is not None else self._spent

    def check(self) -> None:
        """Raise ``BudgetExhausted`` once the cap is reached."""
        if self.max_usd is None:
            return
        spent = self.spent_usd
        if spent >= self.max_usd:
            raise BudgetExhausted(f"{BUDGET_STOP}{self.max_usd:.4f} exhausted (spent ${spent:.4f})")

    def add(self, usd: float) -> None:
        """Count one call's cost."""
        if self.ledger is not None:
            if usd:
                self.ledger.append(usd)
            return
        with self._lock:
            self._spent += usd


@dataclass
class Usage:
    """Counters of one player: calls, retries, failures, tokens and cost."""

    calls: int = 0
    retries: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def to_dict(self) -> dict:
        return {**self.__dict__, "cost_usd": round(self.cost_usd, 6)}


def _run(coro):
    """Run a coroutine to completion from sync code, also when a loop already runs here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", asyncio.run(coro)))
    t.start()
    t.join()
    return out["r"]


class APIPlayer(Player):
    """A remote model answering one prompt per request, many requests in flight."""

    def __init__(
        self,
        name: str,
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        price_input_per_mtok: float = 0.0,
        price_output_per_mtok: float = 0.0,
        budget: Budget | None = None,
        seed: int = 0,
    ) -> None:
        self.name = name
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.prices = (price_input_per_mtok, price_output_per_mtok)
        self.budget = budget or Budget()
        self.usage = Usage()
        self._rng = random.Random(seed)

    @classmethod
    def from_config(cls, pc, name: str, setup: PlayerSetup) -> Player:
        """Any API player, built-in or a user's subclass: the config's retries, concurrency,
        timeout and prices, and the run's budget."""
        return cls(name=name, model=setup.model or pc.model, base_urls=pc.base_urls,  # type: ignore[call-arg]
                   api_key_env=pc.api_key_env, system_prompt=pc.system_prompt, max_concurrency=pc.max_concurrency,
                   timeout_s=pc.timeout_s, retry=RetryPolicy(pc.max_retries, pc.backoff_s, pc.max_backoff_s),
                   price_input_per_mtok=pc.price_input_per_mtok, price_output_per_mtok=pc.price_output_per_mtok,
                   budget=setup.budget, seed=setup.seed, **cls.extra_config(pc))

    @classmethod
    def extra_config(cls, pc) -> dict:
        """Constructor arguments of a subclass's own config fields."""
        return {}

    @abc.abstractmethod
    async def _complete(self, prompt: Prompt, params: SamplingParams) -> Completion:
        """One request for one prompt; raise on failure (``MalformedResponse`` for bad bodies)."""

    async def _open(self) -> None:
        """Create clients bound to the running event loop."""

    async def _close(self) -> None:
        """Close them."""

    def cost(self, c: Completion) -> float:
        return (c.input_tokens * self.prices[0] + c.output_tokens * self.prices[1]) / 1e6

    async def _one(self, prompt: Prompt, params: SamplingParams, gate: asyncio.Semaphore) -> Generation:
        attempt = 0
        async with gate:
            t0 = time.perf_counter()
            while True:
                attempt += 1
                try:
                    self.budget.check()
                    self.usage.calls += 1
                    c = await asyncio.wait_for(self._complete(prompt, params), self.timeout_s + 1)
                    usd = self.cost(c)
                    self.budget.add(usd)
                    self.usage.input_tokens += c.input_tokens
                    self.usage.output_tokens += c.output_tokens
                    self.usage.cost_usd += usd
                    return Generation(self.name, prompt.id, c.text, None, time.perf_counter() - t0, c.token_logprobs)
                except BudgetExhausted as e:
                    self.usage.failures += 1
                    return Generation(self.name, prompt.id, "", str(e), time.perf_counter() - t0)
                except Exception as e:  # noqa: BLE001 - every failure is recorded, never swallowed
                    if attempt > self.retry.max_retries or not is_retryable(e):
                        self.usage.failures += 1
                        error = f"{type(e).__name__} after {attempt} attempt(s): {str(e)[:300]}"
                        return Generation(self.name, prompt.id, "", error, time.perf_counter() - t0)
                    self.usage.retries += 1
                    await asyncio.sleep(self.retry.delay(attempt, retry_after_s(e), self._rng))

    async def _batch(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        await self._open()
        try:
            gate = asyncio.Semaphore(self.max_concurrency)
            return list(await asyncio.gather(*(self._one(p, params, gate) for p in prompts)))
        finally:
            await self._close()

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Generation]:
        return _run(self._batch(prompts, params))
