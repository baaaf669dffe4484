import json

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

from flywheel.config.tree import TrainConfig
from flywheel.learning.training import TrainJob, train_version

SFT = Dataset.from_dict({"prompt": ["12+3=", "rev abc=", "sort 321=", "4*2="] * 4,
                         "completion": ["15", "cba", "123", "8"] * 4})
DPO = Dataset.from_dict({"prompt": ["12+3=", "rev abc=", "sort 321=", "4*2="] * 4,
                         "chosen": ["15", "cba", "123", "8"] * 4,
                         "rejected": ["16", "abc", "321", "9"] * 4})


# On a GPU, training is not deterministic to the bit (CUDA's kernels sum in varying orders): there a
# resumed version is checked against an uninterrupted one to float tolerance; on the CPU, exactly.
ON_GPU = torch.cuda.is_available()


def changed(base, out) -> list[str]:
    """The parameters that differ between two checkpoints."""
    a = dict(AutoModelForCausalLM.from_pretrained(base).named_parameters())
    b = dict(AutoModelForCausalLM.from_pretrained(out).named_parameters())
    return [n for n in a if not torch.equal(a[n], b[n])]


def drift(base, a, b) -> float:
    """How far checkpoint ``b`` lies from ``a``, as a share of how far ``a`` moved from ``base``
    (the norm over all parameters together): 0.0 where they are equal to the bit."""
    p0, pa, pb = (dict(AutoModelForCausalLM.from_pretrained(m).named_parameters()) for m in (base, a, b))
    apart = sum(float((pa[n] - pb[n]).double().pow(2).sum()) for n in pa) ** 0.5
    moved = sum(float((pa[n] - p0[n]).double().pow(2).sum()) for n in pa) ** 0.5
    return apart / moved


def same_weights(base, a, b) -> bool:
    """``a`` and ``b`` were trained alike: bit for bit on the CPU; on a GPU, whose kernels are not
    deterministic to the bit (Adam turns a tiny gradient's noise into a whole step), within 5% of how
    far training moved ``a``. On the CPU a run one step short lies 15% (LoRA, of 6 steps) to 76%
    (sft+dpo, of 12) away, and another seed over 90%."""
    return changed(a, b) == [] if not ON_GPU else drift(base, a, b) < 0.05


def same_loss(a: float | None, b: float | None) -> bool:
    return a == pytest.approx(b, rel=1e-4) if ON_GPU else a == b


@pytest.mark.parametrize("method, lora", [("sft", False), ("dpo", False), ("sft", True)])
def test_a_real_trl_step_changes_the_weights(tiny_models_dir, tmp_path, method, lora):
    base = tiny_models_dir / "student"
    out = tmp_path / "student@1"
    cfg = TrainConfig(method=method, steps=2, batch_size=4, lora=lora, lora_r=4)
    res = train_version(TrainJob(str(base), out, steps=2, seed=0), cfg, SFT, DPO)
    assert res.steps == 2 and res.loss is not None and res.examples == 16
    names = [n for n, _ in AutoModelForCausalLM.from_pretrained(base).named_parameters()]
    moved = changed(base, out)
    if lora:  # merged adapters move exactly the linear layers they wrap
        assert moved and all(any(k in n for k in ("c_attn", "c_proj", "c_fc")) for n in moved)
    else:
        assert moved == names, set(names) - set(moved)


def test_no_data_copies_the_version_forward(tiny_models_dir, tmp_path):
    out = tmp_path / "student@1"
    res = train_version(TrainJob(str(tiny_models_dir / "student"), out, steps=5, seed=0), TrainConfig())
    assert res.steps == 0 and changed(tiny_models_dir / "student", out) == []


def test_keep_adapter_saves_a_lora_adapter_and_training_continues_from_it(tiny_models_dir, tmp_path):
    from peft import PeftModel

    base = str(tiny_models_dir / "student")
    cfg = TrainConfig(method="sft", steps=2, batch_size=4, lora_r=4)
    first, second = tmp_path / "student@1", tmp_path / "student@2"
    train_version(TrainJob(base, first, steps=2, seed=0, keep_adapter=True), cfg, SFT)
    assert (first / "adapter_config.json").exists() and not (first / "model.safetensors").exists()
    train_version(TrainJob(base, second, steps=2, seed=0, adapter=str(first), keep_adapter=True), cfg, SFT)
    a = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), first)
    b = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), second)
    lora_a = {n: p for n, p in a.named_parameters() if "lora_" in n}
    lora_b = dict(b.named_parameters())
    assert lora_a and all(not torch.equal(p, lora_b[n]) for n, p in lora_a.items())


def test_the_train_stage_through_accelerate_launch(tiny_models_dir, tmp_path):
    """`train.launcher: accelerate` runs the same TRL code path under `accelerate launch` (here
    --cpu, one process); the version it saves is the one the next iteration plays."""
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.records import DPOPair, SFTExample
    from flywheel.learning.curation import DPO_COLUMNS, SFT_COLUMNS, save_dataset
    from flywheel.run.context import open_run
    from flywheel.stages.train import train_targets
    from tests.conftest import tiny_tree

    tree = tiny_tree(tiny_models_dir, tmp_path / "runs", run__name="acc", train__launcher="accelerate",
                     train__batch_size=4)
    tree["targets"] = [{"name": "student", "learning_rate": 1e-2}]
    ctx = open_run(FlywheelConfig.model_validate(tree))
    try:
        rows = [SFTExample(p, c, f"p{i}", "add", "calc", f"b{i}", 1, "student")
                for i, (p, c) in enumerate(zip(SFT["prompt"], SFT["completion"]))]
        save_dataset(rows, SFT_COLUMNS, ctx.store.dataset_dir(1, "sft"), "# card\n")
        save_dataset([DPOPair("1+1=", "2", "3", "p", "add", "calc", "student@0", "b", 1, "student")],
                     DPO_COLUMNS, ctx.store.dataset_dir(1, "dpo"), "# card\n")
        result = train_targets(ctx, 1, {"student": 3})
    finally:
        ctx.store.unlock()
    assert result.targets["student"].steps == 3 and result.targets["student"].examples == 16
    assert changed(tiny_models_dir / "student", ctx.store.model_dir("student@1"))
    assert (ctx.store.iter_dir(1) / "stages" / "train-student.json").exists()  # written by the launched process


def test_arguments_built_for_a_cuda_machine_do_not_force_the_cpu():
    from flywheel.learning.training import Hardware, training_args

    gpu = training_args(TrainConfig(), 10, 0, "/tmp/x", 512, Hardware(cuda=True, bf16=True))
    assert gpu["bf16"] is True and gpu["fp16"] is False and gpu["max_length"] == 512
    assert "use_cpu" not in gpu and "no_cuda" not in gpu  # the Trainer places the model where the GPU is
    old_gpu = training_args(TrainConfig(), 10, 0, "/tmp/x", 512, Hardware(cuda=True, bf16=False))
    assert old_gpu["bf16"] is False and old_gpu["fp16"] is False  # auto: fp32 where bf16 is not supported
    cpu = training_args(TrainConfig(), 10, 0, "/tmp/x", 512, Hardware(cuda=False, bf16=False))
    assert cpu["bf16"] is False and cpu["fp16"] is False
    forced = training_args(TrainConfig(precision="fp16"), 10, 0, "/tmp/x", 512, Hardware(cuda=True, bf16=True))
    assert forced["fp16"] is True and forced["bf16"] is False


def test_max_length_and_trl_fields_come_from_config(tiny_models_dir):
    from flywheel.config.loading import ConfigError, load_config
    from flywheel.learning.training import max_length

    model = AutoModelForCausalLM.from_pretrained(tiny_models_dir / "student")
    assert max_length(TrainConfig(), model) == 64  # the tiny GPT's context
    assert max_length(TrainConfig(max_length=32), model) == 32
    cfg = load_config(None, ["train.sft_args={gradient_accumulation_steps: 2}", "train.dpo_args={loss_type: [ipo]}"])
    assert cfg.train.sft_args == {"gradient_accumulation_steps": 2}
    with pytest.raises(ConfigError, match=r"train.sft_args: .*not fields of trl.SFTConfig: \['no_such_field'\]"):
        load_config(None, ["train.sft_args={no_such_field: 1}"])


def test_sft_args_reach_the_trainer(tiny_models_dir, tmp_path):
    """An SFTConfig field from YAML changes the training: two accumulation steps see twice the rows."""
    cfg = TrainConfig(method="sft", steps=2, batch_size=2, sft_args={"gradient_accumulation_steps": 2})
    seen = []

    from transformers import TrainerCallback

    class Count(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            seen.append(args.gradient_accumulation_steps)

    import flywheel.ground.progress as progress

    original = progress.trainer_callback
    progress.trainer_callback = lambda *a: Count()
    try:
        train_version(TrainJob(str(tiny_models_dir / "student"), tmp_path / "s@1", steps=2, seed=0), cfg, SFT)
    finally:
        progress.trainer_callback = original
    assert seen == [2]


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_small_models_train_without_recomputing_activations_to_the_same_weights(tiny_models_dir, tmp_path,
                                                                                monkeypatch, method):
    """train.activation_checkpointing unset: a model under 100M parameters trains without it, one
    above keeps TRL's default (on); set, it is obeyed, and so is TRL's own name for it in sft_args /
    dpo_args; on or off, the weights come out the same."""
    import flywheel.ground.progress as progress
    import flywheel.learning.training as training

    seen = []

    from transformers import TrainerCallback

    class Record(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            seen.append((args.activation_checkpointing, model.is_gradient_checkpointing))

    monkeypatch.setattr(progress, "trainer_callback", lambda *a: Record())
    base = str(tiny_models_dir / "student")

    def train(name: str, **fields) -> dict:
        cfg = TrainConfig(method=method, steps=3, batch_size=4, **fields)
        train_version(TrainJob(base, tmp_path / name, steps=3, seed=0), cfg, SFT, DPO)
        return dict(AutoModelForCausalLM.from_pretrained(tmp_path / name).named_parameters())

    small = train("auto")
    monkeypatch.setattr(training, "CHECKPOINTING_FROM_PARAMS", 1000)  # the tiny model counts as large
    large = train("auto-large")
    forced_off = train("off", activation_checkpointing=False)
    trl_name = train("trl-name", **{f"{method}_args": {"gradient_checkpointing": False}})
    assert seen == [(False, False), (True, True), (False, False), (False, False)]
    assert all(torch.equal(small[n], m[n]) for m in (large, forced_off, trl_name) for n in small)


def test_weight_decay_shrinks_the_weights_it_applies_to(tiny_models_dir, tmp_path):
    """train.weight_decay reaches AdamW: the same two steps with a large decay leave the weight
    matrices smaller; biases and norms are not decayed by transformers' optimizer grouping."""
    base = str(tiny_models_dir / "student")

    def norms(decay: float) -> dict[str, float]:
        cfg = TrainConfig(method="sft", steps=2, batch_size=4, learning_rate=1e-3, weight_decay=decay)
        train_version(TrainJob(base, tmp_path / f"wd{decay}", steps=2, seed=0), cfg, SFT)
        params = AutoModelForCausalLM.from_pretrained(tmp_path / f"wd{decay}").named_parameters()
        return {n: p.norm().item() for n, p in params}

    plain, decayed = norms(0.0), norms(100.0)  # lr x decay = 0.1 a step: about 15% smaller after two
    matrix, norm = "transformer.h.0.attn.c_attn.weight", "transformer.h.0.ln_1.weight"
    assert decayed[matrix] < 0.9 * plain[matrix]
    assert abs(decayed[norm] - plain[norm]) < 0.01 * plain[norm]


@pytest.mark.parametrize("method, lora", [("sft+dpo", False), ("sft", True)], ids=["sft+dpo", "lora"])
def test_training_killed_after_a_checkpoint_resumes_to_the_same_weights(tiny_models_dir, tmp_path, monkeypatch,
                                                                        method, lora):
    """A kill while training (train.checkpoint_steps) loses only the steps since the last
    checkpoint: the phase that finished is not trained again, the other resumes where it was saved,
    and the version ends with the weights and loss of a run never interrupted."""
    import flywheel.ground.progress

    class Killed(Exception):
        pass

    real, steps_run, kill_at = flywheel.ground.progress.trainer_callback, [], ("dpo" if method == "sft+dpo" else "sft", 4)

    def watched(desc: str, total: int, kill: bool):
        handler, phase = real(desc, total), desc.split()[1]

        class Watch(type(handler)):
            def on_step_end(self, args, state, control, **kw):
                steps_run.append((phase, state.global_step))
                return super().on_step_end(args, state, control, **kw)

            def on_save(self, args, state, control, **kw):
                if kill and (phase, state.global_step) == kill_at:
                    raise Killed  # the process dies right after this checkpoint is written

        handler.__class__ = Watch
        return handler

    base = str(tiny_models_dir / "student")
    cfg = TrainConfig(method=method, batch_size=4, lora=lora, lora_r=4, checkpoint_steps=2)
    data, steps = (SFT, DPO if method == "sft+dpo" else None), 12 if method == "sft+dpo" else 6
    straight = train_version(TrainJob(base, tmp_path / "straight", steps, 0, state_dir=tmp_path / "s0"), cfg, *data)

    state = tmp_path / "state"
    monkeypatch.setattr(flywheel.ground.progress, "trainer_callback", lambda d, t: watched(d, t, kill=True))
    with pytest.raises(Killed):
        train_version(TrainJob(base, tmp_path / "resumed", steps, 0, state_dir=state), cfg, *data)
    assert not (tmp_path / "resumed").exists()
    cut = state / kill_at[0] / "checkpoint-6"  # a save the kill cut short: no trainer_state.json yet
    cut.mkdir()
    (cut / "model.safetensors").write_bytes(b"half a file")

    steps_run.clear()
    monkeypatch.setattr(flywheel.ground.progress, "trainer_callback", lambda d, t: watched(d, t, kill=False))
    resumed = train_version(TrainJob(base, tmp_path / "resumed", steps, 0, state_dir=state), cfg, *data)
    assert steps_run == [(kill_at[0], 5), (kill_at[0], 6)]  # only the steps after the last checkpoint
    assert json.loads((cut / "trainer_state.json").read_text())["global_step"] == 6  # saved again, whole
    assert (resumed.steps, resumed.examples) == (straight.steps, straight.examples)
    assert same_loss(resumed.loss, straight.loss)
    done = tmp_path / "straight"
    assert same_weights(base, done, tmp_path / "resumed"), drift(base, done, tmp_path / "resumed")
    never = train_version(TrainJob(base, tmp_path / "never", steps, 0, state_dir=tmp_path / "unused"),
                          cfg.model_copy(update={"checkpoint_steps": 0}), *data)
    assert same_loss(never.loss, straight.loss)
    assert same_weights(base, done, tmp_path / "never"), drift(base, done, tmp_path / "never")
    assert not (tmp_path / "unused").exists()  # checkpoints change nothing but what a kill loses
