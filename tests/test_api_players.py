"""OpenAI- and Anthropic-compatible players through the real SDKs against servers on 127.0.0.1."""

import time

import pytest

from flywheel.players import SamplingParams, create_player
from flywheel.players.api import APIPlayer, Budget, RetryPolicy
from flywheel.worlds.tasks import build_suite
from tests.fakeapi import FakeAPI, solve

PROMPTS = build_suite(1234, 10, 3)[1][:6]
FAST = RetryPolicy(max_retries=2, backoff_s=0.01, max_backoff_s=2)


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("FLYWHEEL_TEST_KEY", "fake-test-key-0123456789abcdefghij")


def openai_player(*servers, **kw):
    return create_player("openai", "oracle", model="oracle-1", base_urls=[s.url for s in servers],
                         api_key_env="FLYWHEEL_TEST_KEY", retry=kw.pop("retry", FAST), **kw)


def anthropic_player(server, **kw):
    return create_player("anthropic", "claude", model="claude-x", base_urls=[server.anthropic_url],
                         api_key_env="FLYWHEEL_TEST_KEY", retry=kw.pop("retry", FAST), **kw)


def test_success_tokens_cost_and_the_payload_sent():
    with FakeAPI() as s:
        p = openai_player(s, price_input_per_mtok=2.0, price_output_per_mtok=10.0)
        gens = p.generate(PROMPTS, SamplingParams(max_new_tokens=9, temperature=0.0, seed=3))
        assert [g.text for g in gens] == [solve(x.text) for x in PROMPTS] and all(g.ok for g in gens)
        sent = {r["body"]["messages"][-1]["content"]: r["body"] for r in s.requests}
        assert set(sent) == {x.text for x in PROMPTS}
        body = sent[PROMPTS[0].text]
        assert body["model"] == "oracle-1" and body["max_completion_tokens"] == 9 and body["seed"] == 3
        assert body["temperature"] == 0.0 and "max_tokens" not in body and "stop" not in body
        assert body["messages"] == [{"role": "user", "content": PROMPTS[0].text}]
        assert s.requests[0]["headers"]["authorization"] == "Bearer fake-test-key-0123456789abcdefghij"
        tin = sum(len(x.text) for x in PROMPTS)
        tout = sum(len(g.text) for g in gens)
        assert (p.usage.input_tokens, p.usage.output_tokens, p.usage.calls) == (tin, tout, 6)
        assert p.usage.cost_usd == pytest.approx((tin * 2 + tout * 10) / 1e6)


def test_payloads_that_current_models_accept():
    """Reasoning models reject `max_tokens` (400): the default sends `max_completion_tokens`, no
    temperature unless one is set, and stop strings only when there are some; old servers can
    still be sent `max_tokens`."""
    with FakeAPI() as s:
        s.reject_max_tokens = True
        gens = openai_player(s).generate(PROMPTS[:2], SamplingParams(max_new_tokens=5, stop=("\n",)))
        assert all(g.ok for g in gens)
        body = s.requests[-1]["body"]
        assert body["max_completion_tokens"] == 5 and body["stop"] == ["\n"]
        assert not {"temperature", "max_tokens"} & set(body)
        old = openai_player(s, max_tokens_field="max_tokens").generate(PROMPTS[:1], SamplingParams(max_new_tokens=5))
        assert not old[0].ok and "max_completion_tokens" in old[0].error  # this server refuses it, and says so
    with FakeAPI() as s:
        openai_player(s, max_tokens_field="max_tokens").generate(PROMPTS[:1], SamplingParams(max_new_tokens=5))
        assert s.requests[-1]["body"]["max_tokens"] == 5 and "max_completion_tokens" not in s.requests[-1]["body"]


def test_the_servers_x_should_retry_header_decides():
    with FakeAPI() as s:
        s.faults = ["500-no-retry"]
        p = openai_player(s)
        gens = p.generate(PROMPTS[:1], SamplingParams())
        assert not gens[0].ok and len(s.requests) == 1 and p.usage.retries == 0  # a 500 it says not to retry
        s.faults = ["400-retry"]
        gens = p.generate(PROMPTS[:1], SamplingParams())
        assert gens[0].ok and len(s.requests) == 3 and p.usage.retries == 1  # a 400 it says to retry


def test_429_honours_retry_after_and_500_is_retried():
    with FakeAPI() as s:
        s.faults = [429, 500]
        p = openai_player(s, max_concurrency=1)
        t0 = time.monotonic()
        gens = p.generate(PROMPTS[:1], SamplingParams())
        assert gens[0].ok and gens[0].text == solve(PROMPTS[0].text)
        assert p.usage.retries == 2 and len(s.requests) == 3
        assert s.requests[1]["t"] - s.requests[0]["t"] >= 0.95  # Retry-After: 1
        assert time.monotonic() - t0 >= 1.0


@pytest.mark.parametrize("fault, expect", [(500, "InternalServerError"), ("malformed", "JSONDecodeError"),
                                           ("slow", "Timeout"), ("empty", "MalformedResponse")])
def test_a_call_that_stays_failed_is_recorded_as_failed_never_as_an_answer(fault, expect):
    with FakeAPI() as s:
        s.faults = [fault] * 3
        p = openai_player(s, timeout_s=1.0, max_concurrency=1)
        gens = p.generate(PROMPTS[:2], SamplingParams())
        failed, ok = gens
        assert not failed.ok and failed.text == "" and expect in failed.error and "3 attempt(s)" in failed.error
        assert ok.ok and ok.text == solve(PROMPTS[1].text)
        assert p.usage.failures == 1 and p.usage.retries == 2


def test_client_errors_are_not_retried():
    with FakeAPI() as s:
        s.faults = [404]
        gens = openai_player(s).generate(PROMPTS[:1], SamplingParams())
        assert not gens[0].ok and "NotFoundError after 1 attempt(s)" in gens[0].error and len(s.requests) == 1


def test_base_urls_are_balanced_round_robin():
    with FakeAPI() as a, FakeAPI() as b:
        openai_player(a, b).generate(PROMPTS, SamplingParams())
        assert len(a.requests) == len(b.requests) == 3


@pytest.mark.parametrize("limit", [1, 3])
def test_concurrency_is_bounded(limit):
    with FakeAPI(delay_s=0.2) as s:
        gens = openai_player(s, max_concurrency=limit).generate(PROMPTS, SamplingParams())
        assert all(g.ok for g in gens)
        assert s.max_in_flight == limit  # never more requests in flight than allowed, and used fully


def test_budget_cap_stops_spending_cleanly():
    with FakeAPI() as s:
        budget = Budget(max_usd=1e-5)
        p = openai_player(s, max_concurrency=1, price_input_per_mtok=2000.0, budget=budget)
        gens = p.generate(PROMPTS, SamplingParams())
        assert gens[0].ok and all(not g.ok and "budget" in g.error for g in gens[1:])
        assert len(s.requests) == 1 and budget.spent_usd >= 1e-5


def test_anthropic_messages_api_with_retries_and_no_sampling_fields():
    with FakeAPI() as s:
        s.faults = [529]
        p = anthropic_player(s, price_input_per_mtok=3.0, price_output_per_mtok=15.0)
        gens = p.generate(PROMPTS[:3], SamplingParams(max_new_tokens=7))
        assert [g.text for g in gens] == [solve(x.text) for x in PROMPTS[:3]]
        body = s.requests[-1]["body"]
        assert s.requests[-1]["path"] == "/v1/messages" and body["max_tokens"] == 7
        assert not {"temperature", "top_p", "top_k"} & set(body)  # API 2026-10-21 rejects them
        assert p.usage.retries == 1 and p.usage.cost_usd > 0


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("FLYWHEEL_TEST_KEY")
    with pytest.raises(ValueError, match="FLYWHEEL_TEST_KEY is not set"):
        create_player("anthropic", "c", model="m", api_key_env="FLYWHEEL_TEST_KEY")


def test_vllm_lora_adapter_loading_posts_to_every_server():
    with FakeAPI() as a, FakeAPI() as b:
        openai_player(a, b).load_lora_adapter("student@2", "/models/student@2")
        for s in (a, b):
            assert s.requests[0]["path"] == "/v1/load_lora_adapter"
            assert s.requests[0]["body"] == {"lora_name": "student@2", "lora_path": "/models/student@2"}


class FakeVLLM:
    """A stand-in ``vllm`` module (vLLM is CUDA-only) for the in-process player: ``LLM`` and
    ``SamplingParams`` with vLLM's own argument names, so a misnamed one fails as it would there.
    Records the engines built and every ``chat`` / ``generate`` call; the i-th request of a call
    is answered `` answer i``, a newline and ``Q: more`` (where a stop string ``\\nQ:`` cuts it)."""

    def __init__(self, chat_template: str | None):
        import types

        self.engines, self.calls = [], []
        fake = self

        class SamplingParams:
            def __init__(self, *, n=1, temperature=1.0, top_p=1.0, seed=None, stop=None, max_tokens=16):
                self.n, self.temperature, self.top_p, self.seed, self.stop, self.max_tokens = (
                    n, temperature, top_p, seed, stop, max_tokens)

        class LLM:
            def __init__(self, model, *, gpu_memory_utilization=0.9, **engine_args):
                fake.engines.append({"model": model, "gpu_memory_utilization": gpu_memory_utilization, **engine_args})

            def get_tokenizer(self):
                return types.SimpleNamespace(chat_template=chat_template)

            def chat(self, messages, sampling_params=None, use_tqdm=True, lora_request=None, chat_template=None):
                return fake.answer("chat", messages, sampling_params, use_tqdm, lora_request)

            def generate(self, prompts, sampling_params=None, use_tqdm=True, lora_request=None):
                return fake.answer("generate", prompts, sampling_params, use_tqdm, lora_request)

        self.module = types.ModuleType("vllm")
        self.module.LLM, self.module.SamplingParams = LLM, SamplingParams

    def answer(self, method, requests, sampling, use_tqdm, lora_request):
        import types

        assert isinstance(sampling, self.module.SamplingParams)
        self.calls.append({"method": method, "requests": list(requests), "sampling": vars(sampling),
                           "use_tqdm": use_tqdm, "lora_request": lora_request})
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=f" answer {i}\nQ: more")])
                for i in range(len(requests))]


def fake_vllm(monkeypatch, chat_template: str | None = "{{ messages }}") -> FakeVLLM:
    import sys

    fake = FakeVLLM(chat_template)
    monkeypatch.setitem(sys.modules, "vllm", fake.module)
    return fake


def test_vllm_in_process_player_asks_a_target_version_with_its_config(monkeypatch, tmp_path):
    """Through the run's roster, as the arena asks it: the version's engine on its weights in the
    run directory with the GPU-memory share allocate.gpu_memory gives it (all of 0.8 for the one
    target before any allocation; not the player's own 0.4), one chat call for all prompts (system prompt, then
    the prompt), the config's sampling (length, temperature, run seed, stop strings), no LoRA;
    the answers cut at the stop string, stripped, and matched to their prompts in order."""
    from flywheel.arena.battles import generate_cached
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.store import RunStore
    from flywheel.worlds.world import Roster

    fake = fake_vllm(monkeypatch)
    cfg = FlywheelConfig.model_validate({
        "run": {"seed": 3}, "allocate": {"gpu_memory": 0.8},
        "targets": [{"name": "local", "kind": "vllm", "path": "/models/base", "max_new_tokens": 9, "temperature": 0.7,
                     "stop": ["\nQ:"], "system_prompt": "Answer briefly.", "gpu_memory_utilization": 0.4}],
        "opponents": [{"name": "oracle", "kind": "openai", "model": "o", "api_key_env": "FLYWHEEL_TEST_KEY"}]})
    store = RunStore(tmp_path / "run")
    roster = Roster(cfg, store)
    got = generate_cached(roster, store, "local@2", PROMPTS)
    roster.pool.release()
    assert fake.engines == [{"model": str(store.model_dir("local@2")), "gpu_memory_utilization": 0.8}]
    assert [c["method"] for c in fake.calls] == ["chat"]
    call = fake.calls[0]
    assert call["requests"] == [[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": p.text}]
                                for p in PROMPTS]
    assert call["sampling"] == {"n": 1, "temperature": 0.7, "top_p": 1.0, "seed": 3, "stop": ["\nQ:"], "max_tokens": 9}
    assert call["use_tqdm"] is False and call["lora_request"] is None
    assert [(got[p.id].player, got[p.id].text) for p in PROMPTS] == [("local@2", f"answer {i}")
                                                                     for i in range(len(PROMPTS))]


@pytest.mark.parametrize("template,chat", [(None, "auto"), ("{{ messages }}", "off")])
def test_vllm_in_process_player_asks_raw_text_without_chat(monkeypatch, template, chat):
    """No chat template (chat auto) or chat off: one generate call on the system prompt, a blank
    line and the prompt; greedy by default (temperature 0, no stop strings); the player's own
    GPU-memory share when the run gives none."""
    from flywheel.config.tree import PlayerConfig
    from flywheel.players.player import PlayerSetup
    from flywheel.players.registry import player_from_config

    fake = fake_vllm(monkeypatch, template)
    pc = PlayerConfig(name="local", kind="vllm", chat=chat, system_prompt="Answer briefly.", gpu_memory_utilization=0.6)
    player = player_from_config(pc, "local", PlayerSetup(path="/models/base"))
    gens = player.generate(PROMPTS[:3], SamplingParams())
    assert fake.engines == [{"model": "/models/base", "gpu_memory_utilization": 0.6}]
    assert [c["method"] for c in fake.calls] == ["generate"]
    assert fake.calls[0]["requests"] == [f"Answer briefly.\n\n{p.text}" for p in PROMPTS[:3]]
    assert fake.calls[0]["sampling"] == {"n": 1, "temperature": 0.0, "top_p": 1.0, "seed": 0, "stop": None,
                                         "max_tokens": 12}
    # no stop string: the whole answer, stripped
    assert [(g.player, g.prompt_id, g.text) for g in gens] == [("local", p.id, f"answer {i}\nQ: more")
                                                               for i, p in enumerate(PROMPTS[:3])]


def test_vllm_in_process_player_with_chat_on_needs_a_template(monkeypatch):
    from flywheel.ground.chat import ChatTemplateMissing
    from flywheel.players import create_player

    fake_vllm(monkeypatch, None)
    with pytest.raises(ChatTemplateMissing, match="player local: chat is 'on'"):
        create_player("vllm", "local", path="/models/base", chat="on")


def test_vllm_in_process_player_without_vllm_names_the_extra(monkeypatch):
    """Where vLLM is not installed (here: an import of it fails) the player says which extra to
    install, and that extra exists; a player without weights is refused before vLLM is needed."""
    import sys
    import tomllib
    from pathlib import Path

    from flywheel.config.tree import PlayerConfig
    from flywheel.players.player import PlayerSetup
    from flywheel.players.registry import player_from_config

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    pc = PlayerConfig(name="local", kind="vllm")
    extra = r"\(pip install -e \.\[vllm\]\)"
    with pytest.raises(ValueError, match=rf"^player local: kind 'vllm' needs the vllm package {extra}"):
        player_from_config(pc, "local", PlayerSetup(path="/models/base"))
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert any(req.startswith("vllm") for req in extras["vllm"])
    with pytest.raises(ValueError, match="player local: kind vllm needs 'path'"):
        player_from_config(pc, "local", PlayerSetup())


def test_a_repeated_run_sharing_a_cache_does_not_pay_twice(tmp_path):
    from flywheel.arena.battles import generate_cached
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.store import RunStore
    from flywheel.worlds.world import Roster

    with FakeAPI() as s:
        cfg = FlywheelConfig.model_validate({
            "run": {"cache_dir": str(tmp_path / "cache")},
            "opponents": [{"name": "oracle", "kind": "openai", "model": "o", "base_urls": [s.url],
                           "api_key_env": "FLYWHEEL_TEST_KEY"}]})
        for run in ("first", "second"):  # a new process each: a new roster and player pool
            store = RunStore(tmp_path / run, cfg.run.cache_dir)
            roster = Roster(cfg, store)
            got = generate_cached(roster, store, "oracle", PROMPTS)
            roster.pool.release()
            assert [got[p.id].text for p in PROMPTS] == [solve(p.text) for p in PROMPTS]
        assert len(s.requests) == len(PROMPTS)  # the second run paid for nothing
        assert store.read_jsonl("usage.jsonl")[0]["cached"] == len(PROMPTS)


class UserAPIPlayer(APIPlayer):
    """A user's own API player (``kind: tests.test_api_players:UserAPIPlayer``)."""

    def __init__(self, name, model, base_urls=None, api_key_env=None, system_prompt=None, **kw):
        super().__init__(name, **kw)
        self.model = model

    async def _complete(self, prompt, params):
        raise NotImplementedError


def test_a_users_api_player_class_gets_the_configs_retries_and_the_run_budget(tmp_path):
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.store import RunStore
    from flywheel.worlds.world import Roster

    cfg = FlywheelConfig.model_validate({"budget": {"max_usd": 2.5}, "opponents": [
        {"name": "mine", "kind": "tests.test_api_players:UserAPIPlayer", "model": "m-1", "max_retries": 7,
         "backoff_s": 0.25, "max_concurrency": 3, "price_input_per_mtok": 1.5}]})
    roster = Roster(cfg, RunStore(tmp_path))
    player = roster.player("mine")
    assert isinstance(player, UserAPIPlayer) and player.model == "m-1"
    assert player.retry == RetryPolicy(7, 0.25, 30.0) and player.max_concurrency == 3
    assert player.budget is roster.budget and player.prices == (1.5, 0.0)
