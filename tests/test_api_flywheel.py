"""The flywheel with API opponents (OpenAI- and Anthropic-compatible) and a hybrid judge (the
verifier, and an API judge for some categories), all on 127.0.0.1, run through the real CLI:
failed calls are retried, recorded and accounted, and the API key appears in no file and no log
line."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import yaml

from tests.conftest import tiny_tree
from tests.fakeapi import FakeAPI

SECRET = "fake-test-key-flywheel-SECRET-0123456789abcdef"


def test_api_opponents_and_judge_end_to_end(tiny_models_dir, tmp_path, cli_env):
    api = dict(api_key_env="FLYWHEEL_SECRET", max_retries=2, backoff_s=0.01, max_concurrency=8, timeout_s=5)
    failing = lambda text: text.startswith("sort ")  # noqa: E731 - these calls fail for good
    with FakeAPI("solver", wrong_every=3, fail_when=failing) as oai, FakeAPI("solver") as ant, FakeAPI("judge") as jud:
        oai.faults = [429, 500]  # passing faults: a Retry-After wait and a 5xx, both retried
        tree = tiny_tree(tiny_models_dir, tmp_path / "runs", run__name="api", run__iterations=1)
        tree["opponents"] = [
            {"name": "oracle", "kind": "openai", "model": "oracle-1", "base_urls": [oai.url],
             "price_input_per_mtok": 1.0, "price_output_per_mtok": 4.0, **api},
            {"name": "claude", "kind": "anthropic", "model": "claude-x", "base_urls": [ant.anthropic_url],
             "price_input_per_mtok": 3.0, "price_output_per_mtok": 15.0, **api},
        ]
        tree["judge"] = {"kind": "hybrid", "llm_categories": ["add", "rev"],
                         "player": {"name": "judge", "kind": "openai", "model": "judge-1",
                                    "base_urls": [jud.url], "max_new_tokens": 64, **api}}
        path = tmp_path / "api.yaml"
        path.write_text(yaml.safe_dump(tree))
        env = {**cli_env, "FLYWHEEL_SECRET": SECRET}
        proc = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", str(path)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "api"
    summary = json.loads((run / "summary.json").read_text())
    assert [e["iteration"] for e in summary["iterations"]] == [0, 1]

    battles = pq.read_table(run / "battles").to_pylist()
    judgments = {j["battle_id"]: j for j in pq.read_table(run / "judgments").to_pylist()}
    failed = [b for b in battles if b["error"]]
    assert failed and all("oracle" in b["error"] and "3 attempt(s)" in b["error"] for b in failed)
    assert {b["category"] for b in failed} == {"sort"}
    assert all(b["prompt"].startswith("sort ") for b in battles if b["error"]) and len(failed) < len(battles)
    assert not any(b["battle_id"] in judgments for b in failed)  # never judged, never counted
    category = {b["battle_id"]: b["category"] for b in battles}
    by_llm = {i for i, j in judgments.items() if j["judge"] == "llm:judge:arena_hard"}
    assert by_llm and {category[i] for i in by_llm} == {"add", "rev"}  # the hybrid's routing
    assert all(j["judge"] == "verifier" for i, j in judgments.items() if i not in by_llm)
    assert all("[[" in judgments[i]["raw"] and judgments[i]["flip"] is not None for i in by_llm)
    # The judge saw through the wrong answers: the oracle never beats a correct student answer.
    assert sum(1 for j in judgments.values() if j["winner"] in ("model_a", "model_b")) > 0

    usage = {**summary["iterations"][0]["usage"], **summary["iterations"][1]["usage"]}
    assert usage["oracle"]["failures"] >= 1 and usage["oracle"]["retries"] >= 3
    assert usage["oracle"]["cost_usd"] > 0 and usage["claude"]["cost_usd"] > 0
    judge_use = [e["usage"]["judge:judge"] for e in summary["iterations"]]
    # Both orders of every LLM battle were asked or found in the cache (same content, same answer).
    assert sum(u["judge_calls"] + u["cache_hits"] for u in judge_use) >= 2 * len(by_llm)
    assert sum(u["calls"] for u in judge_use) >= sum(u["judge_calls"] for u in judge_use)
    report = summary["iterations"][1]["judge"]
    assert report["judged"] > 0 and 0 <= report["flip_rate"]["rate"] <= 1 and report["length_bias"]["decisive"] > 0
    assert report["judge"] == "hybrid:verifier+llm:judge:arena_hard"
    assert set(report["by_judge"]) == {"verifier", "llm:judge:arena_hard"}

    # Secrets come from the environment only: not in any file the run wrote, nor in its output.
    for f in run.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    assert SECRET not in proc.stdout + proc.stderr
    assert "FLYWHEEL_SECRET" in (run / "config.yaml").read_text()  # the variable's name is kept
    assert "Judge diagnostics" in proc.stdout and "Usage over the run" in proc.stdout and "cost_usd" in proc.stdout
    assert "Eval accuracy by category: every target version next to every opponent" in proc.stdout


def test_a_served_target_gets_each_version_as_a_lora_adapter(tiny_models_dir, tmp_path, cli_env):
    with FakeAPI("solver", wrong_every=2) as vllm:
        tree = tiny_tree(tiny_models_dir, tmp_path / "runs", run__name="served", run__iterations=1)
        tree["targets"] = [{"name": "student", "kind": "openai", "model": "base-model", "base_urls": [vllm.url],
                            "path": str(tiny_models_dir / "student"), "serve_lora": True, "backoff_s": 0.01}]
        tree["opponents"] = [{"name": "calc"}, {"name": "scribe"}]
        tree["train"].update({"lora": True, "lora_r": 4})
        path = tmp_path / "served.yaml"
        path.write_text(yaml.safe_dump(tree))
        proc = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", str(path)], env=cli_env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "served"
    adapter = run / "models" / "student@1"
    assert (adapter / "adapter_config.json").exists()
    loads = [r for r in vllm.requests if r["path"].endswith("/load_lora_adapter")]
    assert [r["body"] for r in loads] == [{"lora_name": "student@1", "lora_path": str(adapter.resolve())}]
    # the tiny student has no chat template: it is asked in raw text, as its weights read
    models = {r["body"]["model"] for r in vllm.requests if r["path"].endswith("/v1/completions")}
    assert models == {"base-model", "student@1"}  # version 0 is the base; version 1 the adapter
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["iterations"][1]["eval"]) == {"student@1"}


def test_judge_guard_stops_a_position_biased_judge_before_training_and_resumes_clean(tiny_models_dir, tmp_path, cli_env):
    """An LLM judge that always prefers answer A flips with the order on every battle: the run
    stops after the round's judging with one clear line, trains on nothing, and keeps the
    verdicts out of the log. With the judge fixed (same model name, so the same cache keys), the
    resumed run judges the round again without reusing a cached verdict."""
    api = dict(api_key_env="FLYWHEEL_SECRET", max_retries=0, backoff_s=0.01, max_concurrency=8, timeout_s=5)
    env = {**cli_env, "FLYWHEEL_SECRET": SECRET}
    run = tmp_path / "runs" / "guarded"
    with FakeAPI("solver") as oracle, FakeAPI("biased-A") as biased, FakeAPI("judge") as honest:
        tree = tiny_tree(tiny_models_dir, tmp_path / "runs", run__name="guarded", run__iterations=1,
                         select__rounds=1, select__battles_per_iteration=40)
        tree["opponents"] = [{"name": "oracle", "kind": "openai", "model": "oracle-1", "base_urls": [oracle.url], **api}]
        tree["judge"] = {"kind": "llm", "player": {"name": "judge", "kind": "openai", "model": "judge-1",
                                                   "base_urls": [biased.url], "max_new_tokens": 64, **api}}
        path = tmp_path / "guarded.yaml"
        path.write_text(yaml.safe_dump(tree))
        proc = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", str(path)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 1, proc.stderr[-3000:]  # a failure while working, not a usage error
        assert "judge guard stopped iteration 1, round 1" in proc.stderr and "position-flip rate 1.00" in proc.stderr
        assert any(line.startswith("error: judge guard stopped") for line in proc.stderr.splitlines())
        assert not (run / "models" / "student@1").exists() and not (run / "iter-0001" / "sft").exists()
        assert not list((run / "judgments").glob("iter-0001-*")) and list((run / "quarantine").rglob("*.parquet"))
        report = json.loads((run / "iter-0001" / "stages" / "judge-guard-r1.json").read_text())
        assert report["flip_rate"] == 1.0 and report["judged"] >= 20

        config = yaml.safe_load((run / "config.yaml").read_text())
        config["judge"]["player"]["base_urls"] = [honest.url]  # the fix: the same judge model, served right
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        proc = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", "--resume", str(run)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    judgments = [j for f in (run / "judgments").glob("iter-0001-train-*") for j in pq.read_table(f).to_pylist()]
    assert len(judgments) >= 20 and not any(j["flip"] for j in judgments)  # none of the biased verdicts came back
    assert (run / "models" / "student@1").exists()
