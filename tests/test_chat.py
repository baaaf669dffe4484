"""Chat templates end to end, on a tiny chat model the project builds: the player asks through the
template (with the system prompt), a chat target's datasets are conversational and train in TRL,
the generation cache keys on how a model is asked, and a chat-less model gets one clear line."""

import json
import logging
import shutil
import sys
import types

import pytest
from transformers import AutoTokenizer

from flywheel.config.tree import FlywheelConfig, TrainConfig
from flywheel.ground.chat import ChatTemplateMissing, as_text, template_of
from flywheel.ground.records import Prompt
from flywheel.learning.curation import load_dataset_dir
from flywheel.players import SamplingParams, create_player

# Only characters of the tiny models' vocabulary: role letter, '=', content, end of text.
TEMPLATE = ("{% for m in messages %}{{ m['role'][0] }}={{ m['content'] }}{{ eos_token }}{% endfor %}"
            "{% if add_generation_prompt %}a={% endif %}")
PROMPTS = [Prompt("p1", "12+3=", "add", 1, "15"), Prompt("p2", "rev abc=", "rev", 1, "cba")]


@pytest.fixture(scope="module")
def chat_models_dir(tiny_models_dir, tmp_path_factory):
    """The tiny world's models, the student with a chat template (a tiny chat model)."""
    d = tmp_path_factory.mktemp("chatmodels")
    for name in ("student", "calc", "scribe", "generalist"):
        shutil.copytree(tiny_models_dir / name, d / name)
    tok = AutoTokenizer.from_pretrained(d / "student")
    tok.chat_template = TEMPLATE
    tok.save_pretrained(d / "student")
    return d


def test_a_chat_player_asks_through_the_template_with_its_system_prompt(chat_models_dir):
    p = create_player("transformers", "s", path=str(chat_models_dir / "student"), system_prompt="be brief")
    assert p.chat and template_of(chat_models_dir / "student") == TEMPLATE
    assert p.render(PROMPTS[0]) == "s=be brief<eos>u=12+3=<eos>a="
    gens = p.generate(PROMPTS, SamplingParams(max_new_tokens=4))
    assert [g.prompt_id for g in gens] == ["p1", "p2"] and all(g.ok for g in gens)
    raw = create_player("transformers", "s", path=str(chat_models_dir / "student"), chat="off")
    assert not raw.chat and raw.render(PROMPTS[0]) == "12+3="
    # The loss on reference answers reads the prompt as generation does: the template changes it.
    assert p.reference_loss(PROMPTS) != raw.reference_loss(PROMPTS)


def test_a_model_without_a_chat_template_is_one_clear_line(tiny_models_dir, caplog):
    with pytest.raises(ChatTemplateMissing, match="player s: chat is 'on' but its tokenizer has no chat template"):
        create_player("transformers", "s", path=str(tiny_models_dir / "student"), chat="on")
    with caplog.at_level(logging.INFO, logger="flywheel"):
        p = create_player("transformers", "raw-notice", path=str(tiny_models_dir / "student"))
        again = create_player("transformers", "raw-notice", path=str(tiny_models_dir / "student"))
    assert not p.chat and not again.chat
    assert caplog.text.count("player raw-notice: no chat template; it is asked in raw text") == 1  # once a run


def test_stop_strings_end_a_generation(tiny_models_dir):
    p = create_player("transformers", "s", path=str(tiny_models_dir / "generalist"))
    full = p.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6))[0].text
    assert full
    cut = p.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6, stop=(full[-1],)))[0].text
    assert cut == full[: full.index(full[-1])]


def test_the_generation_cache_keys_on_how_a_model_is_asked(chat_models_dir, tmp_path):
    from flywheel.arena.battles import generate_cached
    from flywheel.ground.store import RunStore
    from flywheel.worlds.world import Roster

    store = RunStore(tmp_path)

    def roster(**player) -> Roster:
        tree = {"world": {"models_dir": str(chat_models_dir)}, "targets": [{"name": "student", **player}]}
        return Roster(FlywheelConfig.model_validate(tree), store)

    plain, other, stopped = roster(system_prompt="be brief"), roster(system_prompt="be kind"), roster(stop=["9"])
    raw = roster(chat="off")
    keys = {r.identity("student") for r in (plain, other, stopped, raw)}
    assert len(keys) == 4 and "|chat:" in plain.identity("student") and "|chat:" not in raw.identity("student")
    generate_cached(plain, store, "student", PROMPTS)
    generate_cached(other, store, "student", PROMPTS)  # another system prompt: asked again
    generate_cached(plain, store, "student", PROMPTS)  # the first one again: from the cache
    rows = store.read_jsonl("usage.jsonl")
    assert [(r["generated"], r["cached"]) for r in rows] == [(2, 0), (2, 0), (0, 2)]
    plain.pool.release()
    other.pool.release()


def test_a_chat_target_trains_on_conversational_datasets(harness, chat_models_dir, tmp_path):
    """The flow with a chat target: its SFT/DPO datasets are conversational (the system prompt in
    every prompt), TRL trains on them, and every version keeps the chat template."""
    from flows.flywheel_flow import flywheel
    from flywheel.learning.training import TrainJob, train_version
    from tests.conftest import tiny_tree

    tree = tiny_tree(chat_models_dir, tmp_path / "runs", run__name="chat", run__iterations=1, train__method="sft+dpo")
    tree["targets"] = [{"name": "student", "system_prompt": "be brief"}]
    root = tmp_path / "runs" / "chat"
    flywheel(FlywheelConfig.model_validate(tree).model_dump(mode="json"))
    sft, dpo = load_dataset_dir(str(root / "iter-0001/sft")), load_dataset_dir(str(root / "iter-0001/dpo"))
    assert len(sft) and len(dpo)
    row = sft[0]
    assert row["prompt"][0] == {"role": "system", "content": "be brief"} and row["prompt"][1]["role"] == "user"
    assert row["completion"] == [{"role": "assistant", "content": row["completion"][0]["content"]}]
    assert dpo[0]["chosen"][0]["role"] == "assistant" and dpo[0]["rejected"][0]["role"] == "assistant"
    assert json.loads((root / "iter-0001/sft/manifest.json").read_text())["format"] == "conversational"
    assert "format: conversational" in (root / "iter-0001/sft/README.md").read_text()
    assert template_of(root / "models/student@1") == TEMPLATE
    summary = json.loads((root / "summary.json").read_text())
    assert summary["iterations"][-1]["train_steps"] == {"student": 4}
    # They load in TRL as they are: a conversational SFT and DPO step on the saved rows.
    cfg = TrainConfig(method="sft+dpo", steps=2, batch_size=4)
    res = train_version(TrainJob(str(chat_models_dir / "student"), tmp_path / "again", steps=2, seed=0), cfg, sft, dpo)
    assert res.steps == 2 and res.examples == len(sft) + len(dpo)
    assert as_text(row["prompt"]) == row["prompt"][1]["content"]


def test_vllm_asks_chat_models_through_llm_chat(monkeypatch):
    """vLLM is CUDA-only and cannot run here: a stand-in module records what the player asks."""
    calls = []

    class Out:
        def __init__(self, text):
            self.outputs = [types.SimpleNamespace(text=text)]

    class LLM:
        template = "{{ x }}"

        def __init__(self, model, gpu_memory_utilization):
            pass

        def get_tokenizer(self):
            return types.SimpleNamespace(chat_template=LLM.template)

        def chat(self, conversations, sampling, use_tqdm=False):
            calls.append(("chat", conversations, sampling))
            return [Out(" 15 ") for _ in conversations]

        def generate(self, texts, sampling, use_tqdm=False):
            calls.append(("generate", texts, sampling))
            return [Out("15") for _ in texts]

    def sampling_params(**kw):
        return kw

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=sampling_params))
    p = create_player("vllm", "v", path="/w/v", system_prompt="be brief")
    gens = p.generate(PROMPTS[:1], SamplingParams(max_new_tokens=5, stop=("\n",)))
    kind, conversations, sampling = calls[-1]
    assert kind == "chat" and conversations == [[{"role": "system", "content": "be brief"},
                                                  {"role": "user", "content": "12+3="}]]
    assert sampling["max_tokens"] == 5 and sampling["stop"] == ["\n"] and gens[0].text == "15"
    LLM.template = None
    create_player("vllm", "v", path="/w/v").generate(PROMPTS[:1], SamplingParams())
    assert calls[-1][0] == "generate" and calls[-1][1] == ["12+3="]
    with pytest.raises(ChatTemplateMissing):
        create_player("vllm", "v", path="/w/v", chat="on")
