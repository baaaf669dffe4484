"""Compute allocation across targets: each policy's arithmetic (warm-up, floors, smoothing,
halving, top-k), learning rates per unit of compute; curation rules and decontamination."""

import math
from pathlib import Path

import pytest
import torch

from flywheel.config.loading import ConfigError, load_config
from flywheel.config.tree import AllocateConfig, CurateConfig
from flywheel.ground.records import Battle, Judgment
from flywheel.learning.allocation import Allocation, allocate, learning_rates, proportional
from flywheel.learning.curation import curate
from flywheel.run.context import latest_gpu_shares

T = ["a", "b", "c"]
# Eval accuracy after each iteration (0 = baseline) and training steps spent per iteration.
ACC = {"a": [0.1, 0.3, 0.5], "b": [0.1, 0.15, 0.2], "c": [0.1, 0.1, 0.1]}
STEPS = {t: [0, 100, 100] for t in T}


def test_learning_rate_is_gain_per_unit_of_compute_over_the_window():
    assert learning_rates(ACC, STEPS, window=2) == pytest.approx({"a": 0.002, "b": 0.0005, "c": 0.0})
    assert learning_rates(ACC, STEPS, window=1) == pytest.approx({"a": 0.002, "b": 0.0005, "c": 0.0})
    params = {"a": [0, 100 * 5, 100 * 5], "b": [0, 100, 100], "c": [0, 100, 100]}  # a is 5x bigger
    assert learning_rates(ACC, params, window=2)["a"] == pytest.approx(0.0004)
    assert learning_rates({"a": [0.2]}, {}, 2) == {"a": 0.0}


def test_warm_up_gives_equal_shares_whatever_the_policy():
    for policy in ("proportional", "successive-halving", "selective"):
        cfg = AllocateConfig(policy=policy, warmup=2)
        early = allocate(cfg, T, 100, 300, {t: a[:2] for t, a in ACC.items()}, STEPS)
        assert not early.acting and early.shares == pytest.approx({t: 1 / 3 for t in T}, abs=1e-6)
        assert early.train_steps == {t: 100 for t in T} and early.battles == {t: 300 for t in T}
        late = allocate(cfg, T, 100, 300, ACC, STEPS)
        assert late.acting and late.shares["a"] > 1 / 3


def test_proportional_smooths_against_the_previous_share_and_floors():
    cfg = AllocateConfig(policy="proportional", warmup=1, smoothing=0.5, floor=0.1)
    out = allocate(cfg, T, 100, 300, ACC, STEPS, previous={t: 1 / 3 for t in T})
    # new shares (0.8, 0.2, 0); mixed with 1/3 each: (0.5667, 0.2667, 0.1667); floored: 0.1 + 0.7 x mixed
    assert out.shares == pytest.approx({"a": 0.49667, "b": 0.28667, "c": 0.21667}, abs=1e-5)
    assert sum(out.shares.values()) == pytest.approx(1.0)
    assert sum(out.train_steps.values()) == 300 and out.train_steps["a"] == 149
    starving = proportional({"a": 1.0, "b": 0.0, "c": 0.0}, {"a": 1.0, "b": 0.0, "c": 0.0}, 0.5, 0.05)
    assert min(starving.values()) == pytest.approx(0.05)  # the floor: nobody starves
    no_signal = proportional({t: -0.1 for t in T}, {t: 1 / 3 for t in T}, 0.0, 0.0)
    assert no_signal == pytest.approx({t: 1 / 3 for t in T})


def test_successive_halving_drops_the_slowest_every_k_iterations():
    cfg = AllocateConfig(policy="successive-halving", warmup=1, halving_every=1, halving_fraction=0.5)
    first = allocate(cfg, T, 100, 300, ACC, STEPS, previous={t: 1 / 3 for t in T})
    assert first.shares == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.0})  # floor(3 x 0.5) = 1 dropped
    second = allocate(cfg, T, 100, 300, ACC, STEPS, previous=first.shares)
    assert second.shares == pytest.approx({"a": 1.0, "b": 0.0, "c": 0.0})
    assert allocate(cfg, T, 100, 300, ACC, STEPS, previous=second.shares).shares["a"] == 1.0  # one always stays
    every2 = AllocateConfig(policy="successive-halving", warmup=1, halving_every=2)
    # Drops come at the first acting iteration and every 2nd after it: after 2 trained, none.
    kept = allocate(every2, T, 100, 300, ACC, STEPS, previous={"a": 0.5, "b": 0.5, "c": 0.0})
    assert kept.shares == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.0})
    acc3 = {t: a + [a[-1] + 0.1] for t, a in ACC.items()}
    steps3 = {t: s + [100] for t, s in STEPS.items()}
    dropped = allocate(every2, T, 100, 300, acc3, steps3, previous={"a": 0.5, "b": 0.5, "c": 0.0})
    assert dropped.shares == pytest.approx({"a": 1.0, "b": 0.0, "c": 0.0})


def test_selective_trains_only_the_top_k():
    out = allocate(AllocateConfig(policy="selective", top_k=2), T, 100, 300, ACC, STEPS)
    assert out.shares == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.0}) and out.train_steps["c"] == 0


def test_uniform_records_rates_without_acting():
    out = allocate(AllocateConfig(), T, 100, 300, ACC, STEPS)
    assert not out.acting and out.learning_rates["a"] == pytest.approx(0.002)
    assert out.to_json()["policy"] == "uniform"


def test_allocation_settings_are_checked():
    with pytest.raises(ConfigError, match="allocate.policy"):
        load_config(None, ["allocate.policy=greedy"])
    with pytest.raises(ConfigError, match="allocate.smoothing"):
        load_config(None, ["allocate.smoothing=1.5"])
    with pytest.raises(ConfigError, match="floor"):
        load_config(None, ["allocate.floor=0.5", "targets=[{name: a}, {name: b}, {name: c}]"])


def battle(bid, prompt, ra, rb, a="s1@0", b="calc"):
    return Battle(bid, 1, "train", "p" + bid, prompt, "add", 1, "42", a, b, ra, rb)


def test_curation_margin_threshold_length_limits_and_decontamination():
    battles = [battle("1", "40+2=", "41", "42"), battle("2", "39+3=", "41", "42"), battle("3", "38+4=", "41", ""),
               battle("4", "7*6=", "0", "42"), battle("5", " 7*6 =", "0", "42"), battle("6", "37+5=", "1", "42")]
    js = {"1": Judgment("1", "llm", "model_b", 2.0), "2": Judgment("2", "llm", "model_b", 1.0),
          "3": Judgment("3", "llm", "model_a", 1.0), "4": Judgment("4", "llm", "model_b", 2.0),
          "5": Judgment("5", "llm", "model_b", 2.0), "6": Judgment("6", "llm", "model_b", 2.0)}
    cfg = CurateConfig(min_margin=1.5, min_completion_chars=1, max_completion_chars=64)
    cur = curate(battles, js, ["s1"], {"7*6=", "7*6 ="}, cfg)
    assert [e.prompt for e in cur.sft] == ["40+2=", "37+5="]
    assert cur.dropped["weak"] == 2 and cur.dropped["contaminated"] == 2  # " 7*6 =" is the eval prompt too
    short = curate(battles[:1], {"1": Judgment("1", "llm", "model_b", 2.0)}, ["s1"], set(),
                   CurateConfig(min_completion_chars=3))
    assert not short.sft and short.dropped["too_short"] == 1
    # Two targets losing on one prompt: each keeps its own example (dedup is per target).
    pair = [battle("7", "40+2=", "41", "42", a="s1@0"), battle("8", "40+2=", "40", "42", a="s2@0")]
    both = curate(pair, {"7": js["1"], "8": Judgment("8", "llm", "model_b", 2.0)}, ["s1", "s2"], set(), CurateConfig())
    assert sorted(e.target for e in both.sft) == ["s1", "s2"]


def test_performance_weights_favour_the_better_target():
    from flywheel.learning.merging import performance_weights

    assert performance_weights({"a": 0.3, "b": 0.3}, 0.05) == pytest.approx({"a": 0.5, "b": 0.5})
    w = performance_weights({"a": 0.4, "b": 0.3, "c": 0.3}, 0.05)
    assert sum(w.values()) == pytest.approx(1.0) and w["a"] > w["b"] == pytest.approx(w["c"])
    assert w["a"] / w["b"] == pytest.approx(math.exp(0.1 / 0.05))


def test_federated_merge_averages_same_architecture_checkpoints(tiny_models_dir, tmp_path):
    """student and calc share an architecture and merge; a wider model is its own group and stays
    as it was. The sources are untouched, so a second merge writes the same tensors."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from flywheel.config.tree import ModelSpec
    from flywheel.learning.merging import groups, merge_group
    from flywheel.worlds.tinymodels import build_model, build_tokenizer

    tok = build_tokenizer()
    wide = tmp_path / "wide"
    build_model(ModelSpec(name="wide", n_embd=48), len(tok), seed=0).save_pretrained(wide)
    tok.save_pretrained(wide)
    src = {"s": tiny_models_dir / "student", "c": tiny_models_dir / "calc", "w": wide}
    assert groups(src) == [["s", "c"], ["w"]]
    before = {t: load_file(str(p / "model.safetensors")) for t, p in src.items()}
    out = {t: tmp_path / "out" / t for t in src}
    (tmp_path / "out").mkdir()
    weights, strength = {"s": 0.25, "c": 0.75}, 0.5
    for _ in range(2):
        merge_group({t: src[t] for t in ("s", "c")}, weights, strength, {t: out[t] for t in ("s", "c")})
        merge_group({"w": wide}, {"w": 1.0}, strength, {"w": out["w"]})
    after = {t: load_file(str(out[t] / "model.safetensors")) for t in src}
    for key, s in before["s"].items():
        c = before["c"][key]
        avg = 0.25 * s + 0.75 * c
        assert torch.allclose(after["s"][key], 0.5 * s + 0.5 * avg, atol=1e-6)
        assert torch.allclose(after["c"][key], 0.5 * c + 0.5 * avg, atol=1e-6)
    assert any(not torch.equal(after["s"][k], before["s"][k]) for k in before["s"])
    assert all(torch.equal(after["w"][k], v) for k, v in before["w"].items())
    assert all(torch.equal(load_file(str(src["s"] / "model.safetensors"))[k], v) for k, v in before["s"].items())
    AutoModelForCausalLM.from_pretrained(out["s"])  # a loadable checkpoint


def test_sharded_checkpoints_merge_tensor_by_tensor(tiny_models_dir, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from flywheel.learning.merging import groups, merge_group, shard_map

    src = {}
    for t, name in (("s", "student"), ("c", "calc")):
        src[t] = tmp_path / t
        AutoModelForCausalLM.from_pretrained(tiny_models_dir / name).save_pretrained(src[t], max_shard_size="60KB")
    shards = shard_map(src["s"])
    assert len(shards) > 1 and (src["s"] / "model.safetensors.index.json").exists()  # really sharded
    assert groups(src) == [["s", "c"]]
    out = {t: tmp_path / "out" / t for t in src}
    (tmp_path / "out").mkdir()
    merge_group(src, {"s": 0.5, "c": 0.5}, 1.0, out)
    for shard in shards:
        s, c, got = (load_file(str(d / shard)) for d in (src["s"], src["c"], out["s"]))
        assert all(torch.allclose(got[k], 0.5 * s[k] + 0.5 * c[k], atol=1e-6) for k in s)
    AutoModelForCausalLM.from_pretrained(out["c"])


def test_lora_adapters_merge_as_updates_not_as_averaged_factors(tiny_models_dir, tmp_path):
    """Each merged adapter's update B'A' is the best rank-r approximation of the weighted sum of
    the targets' updates (peft's weighted-adapter combination), not (mean B)(mean A)."""
    import json

    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from flywheel.learning.merging import coefficients, merge_group

    base = str(tiny_models_dir / "student")
    src = {}
    for n, t in enumerate(("s", "c")):
        torch.manual_seed(n)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                               LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", task_type="CAUSAL_LM"))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)  # peft starts B at zero: give each adapter an update of its own
        src[t] = tmp_path / t
        model.save_pretrained(src[t])
    out = {t: tmp_path / "out" / t for t in src}
    (tmp_path / "out").mkdir()
    weights, strength = {"s": 0.3, "c": 0.7}, 0.5
    merge_group(src, weights, strength, out)

    def updates(folder):
        cfg = json.loads((folder / "adapter_config.json").read_text())
        w = load_file(str(folder / "adapter_model.safetensors"))
        scale = cfg["lora_alpha"] / cfg["r"]
        return {k.replace(".lora_A.weight", ""): scale * w[k.replace("lora_A", "lora_B")] @ w[k]
                for k in w if k.endswith("lora_A.weight")}, cfg["r"]

    (us, _), (uc, _) = updates(src["s"]), updates(src["c"])
    coef = coefficients(weights, strength)["s"]
    merged, rank = updates(out["s"])
    assert rank == 2 and merged.keys() == us.keys()
    for key in us:
        exact = coef["s"] * us[key] + coef["c"] * uc[key]
        u, sv, vh = torch.linalg.svd(exact)
        best = u[:, :2] @ torch.diag(sv[:2]) @ vh[:2]
        assert torch.allclose(merged[key], best, atol=1e-5), key


def test_in_process_vllm_targets_get_a_gpu_memory_share(tmp_path, monkeypatch):
    """allocate.gpu_memory: each target's fraction is that x its compute share (floored), recorded
    with the allocation; the roster hands a vLLM target version the fraction of the allocation on
    disk for it when it builds the engine (a stand-in vllm module records what LLM() received)."""
    import sys
    import types

    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.store import RunStore
    from flywheel.worlds.world import Roster

    cfg = AllocateConfig(policy="selective", warmup=1, gpu_memory=0.6)
    alloc = allocate(cfg, T, 100, 100, ACC, STEPS)
    assert alloc.shares == {"a": 1.0, "b": 0.0, "c": 0.0}
    assert alloc.gpu_memory == {"a": 0.6, "b": 0.05, "c": 0.05} and alloc.to_json()["gpu_memory"] == alloc.gpu_memory
    assert allocate(AllocateConfig(), T, 100, 100, ACC, STEPS).gpu_memory is None

    seen = []

    class LLM:
        def __init__(self, model, gpu_memory_utilization):
            seen.append((Path(model).name, gpu_memory_utilization))

        def get_tokenizer(self):
            return types.SimpleNamespace(chat_template=None)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    tree = {"targets": [{"name": "a", "kind": "vllm", "path": "/w/a"}, {"name": "b"}],
            "allocate": {"policy": "selective", "gpu_memory": 0.6}}
    store = RunStore(tmp_path)
    from flywheel.learning.allocation import Allocation

    after_1 = Allocation({"a": 0.75, "b": 0.25}, {"a": 3, "b": 1}, {"a": 3, "b": 1}, gpu_memory={"a": 0.45, "b": 0.15})
    roster = Roster(FlywheelConfig.model_validate(tree), store)
    roster.player("a@0")  # before any allocation: an equal share
    roster.hand_in(after_1.gpu_memory)  # the allocate stage of iteration 1
    roster.player("a@1")
    roster.player("a@2")  # iteration 2's allocation is not made yet: iteration 1's
    store.save_stage_json(1, "allocate", after_1.to_json(), 0.0)
    assert latest_gpu_shares(store, 4) == after_1.gpu_memory  # a resumed run starts from the latest on disk
    assert latest_gpu_shares(RunStore(tmp_path / "fresh"), 4) is None
    tree["allocate"] = {}
    tree["targets"][0]["gpu_memory_utilization"] = 0.7
    other = Roster(FlywheelConfig.model_validate(tree), store)
    other.player("a@3")  # no allocate.gpu_memory: its own
    roster.pool.release()
    other.pool.release()
    assert seen == [("a", 0.3), ("a@1", 0.45), ("a@2", 0.45), ("a@3", 0.7)]


def test_mixed_sharing_pools_while_rates_agree_then_separates_for_good():
    from flywheel.learning.allocation import mixed_sharing

    cfg = AllocateConfig(sharing="mixed", mixed_spread=0.05)
    assert allocate(cfg, T, 100, 300).pooled is True  # before any training: pooled
    close = {"a": [0.1, 0.2], "b": [0.1, 0.22], "c": [0.1, 0.19]}
    steps = {t: [0, 100] for t in T}
    alloc = allocate(cfg, T, 100, 300, close, steps)
    assert alloc.pooled is True and alloc.spread == pytest.approx(0.03)
    apart = {"a": [0.1, 0.3], "b": [0.1, 0.12], "c": [0.1, 0.2]}
    alloc = allocate(cfg, T, 100, 300, apart, steps)
    assert alloc.pooled is False and alloc.spread == pytest.approx(0.18)
    assert Allocation.from_json(alloc.to_json()) == alloc
    # once separate, separate: the rates agreeing again does not pool them back
    assert allocate(cfg, T, 100, 300, close, steps, was_pooled=False).pooled is False
    assert mixed_sharing({"a": 0.1}, 1, 100, 0.05, True) == (True, None)  # a lone target: nothing to compare
    assert allocate(AllocateConfig(), T, 100, 300, apart, steps).pooled is None  # other modes record nothing
