"""Federated sharing: merge the targets that share an architecture, weighted by performance.

After every target has trained its version k on its own battles, targets whose checkpoints
hold the same tensors (names, shapes and dtypes: full checkpoints, single-file or sharded, or
LoRA adapters of the same rank on the same modules) are merged. Each target's weight is a
softmax of its latest validation accuracy over ``merge_temperature`` (the better target pulls
the average toward itself), and each target keeps ``1 - merge_strength`` of its own weights:

    merged = sum_t w_t theta_t,   theta_t' = (1 - strength) theta_t + strength merged
                                           = sum_i c_ti theta_i,  c_ti = (1 - strength) [t = i] + strength w_i

Full checkpoints are merged tensor by tensor, shard by shard (the output shard in the
checkpoint's own dtype, one float32 tensor accumulated at a time): memory is one shard, never
whole models in float64. LoRA adapters are merged as *updates*, not by averaging A and B (the
average of the A's times the average of the B's is not the average of the B A's): peft's
weighted-adapter combination (``add_weighted_adapter``, ``svd``) forms sum_i c_ti B_i A_i for
every module and keeps its best rank-r approximation, so a merged adapter has the rank it was
trained with. A target whose architecture no other target shares is left as trained.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from flywheel.ground.atomic import atomic_write_dir

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
INDEX = "model.safetensors.index.json"


def performance_weights(accuracy: dict[str, float], temperature: float) -> dict[str, float]:
    """Softmax of accuracy / temperature: equal weights for equal accuracy."""
    top = max(accuracy.values())
    raw = {t: math.exp((a - top) / temperature) for t, a in accuracy.items()}
    total = sum(raw.values())
    return {t: v / total for t, v in raw.items()}


def weight_file(checkpoint: Path) -> Path:
    for name in WEIGHT_FILES:
        if (checkpoint / name).exists():
            return checkpoint / name
    raise FileNotFoundError(f"{checkpoint}: no {' or '.join(WEIGHT_FILES)} to merge")


def shard_map(checkpoint: Path) -> dict[str, list[str]]:
    """The checkpoint's weight files (relative names) and the tensors each holds: one file, or
    the shards a ``model.safetensors.index.json`` lists."""
    import json

    from safetensors import safe_open

    path = weight_file(checkpoint)
    if path.name == INDEX:
        out: dict[str, list[str]] = {}
        for tensor, shard in json.loads(path.read_text())["weight_map"].items():
            out.setdefault(shard, []).append(tensor)
        return {k: sorted(v) for k, v in sorted(out.items())}
    with safe_open(str(path), "pt") as f:
        return {path.name: sorted(f.keys())}


def architecture(checkpoint: Path) -> tuple:
    """What must match for two checkpoints to merge: the weight files and every tensor's name,
    shape and dtype (read from the safetensors headers, without loading the tensors)."""
    from safetensors import safe_open

    shapes = []
    for shard, names in shard_map(checkpoint).items():
        with safe_open(str(checkpoint / shard), "pt") as f:
            shapes += [(shard, k, tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in names]
    return (weight_file(checkpoint).name, tuple(shapes))


def groups(checkpoints: dict[str, Path]) -> list[list[str]]:
    """Targets grouped by architecture, in the given order; singletons included."""
    by_arch: dict[tuple, list[str]] = {}
    for t, path in checkpoints.items():
        by_arch.setdefault(architecture(path), []).append(t)
    return list(by_arch.values())


def coefficients(weights: dict[str, float], strength: float) -> dict[str, dict[str, float]]:
    """c[t][i]: how much of target i's weights target t's merged version holds."""
    return {t: {i: (1 - strength) * (t == i) + strength * weights[i] for i in weights} for t in weights}


def merge_group(sources: dict[str, Path], weights: dict[str, float], strength: float, outputs: dict[str, Path]) -> None:
    """Write each target's merged checkpoint to ``outputs[t]`` (atomically: a temporary
    directory, then a rename). ``sources`` are never modified, so a rerun gives the same files."""
    names = list(sources)
    if len(names) == 1:  # nothing shares its architecture: the version stays as trained
        atomic_write_dir(outputs[names[0]], lambda tmp: shutil.copytree(sources[names[0]], tmp))
        return
    coef = coefficients(weights, strength)
    if weight_file(sources[names[0]]).name == "adapter_model.safetensors":
        _merge_adapters(sources, coef, outputs)
        return
    for t in names:
        atomic_write_dir(outputs[t], lambda tmp, t=t: _write_merged(sources, coef[t], t, tmp))


def _write_merged(sources: dict[str, Path], coef: dict[str, float], own: str, out: Path) -> None:
    """One target's merged full checkpoint into ``out``: its own files, then every weight file
    replaced by the coefficient-weighted sum of the sources' tensors, one shard at a time."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    shutil.copytree(sources[own], out)  # the target's own config, tokenizer and card
    for shard, tensors in shard_map(sources[own]).items():
        handles = {i: safe_open(str(sources[i] / shard), "pt") for i in sources}
        merged = {}
        for key in tensors:
            acc = None
            for i, f in handles.items():
                x = f.get_tensor(key)
                acc = x.to(torch.float32) * coef[i] if acc is None else acc.add_(x.to(torch.float32), alpha=coef[i])
            merged[key] = acc.to(x.dtype).contiguous()
        save_file(merged, str(out / shard), metadata={"format": "pt"})
        del merged, handles


def _merge_adapters(sources: dict[str, Path], coef: dict[str, dict[str, float]], outputs: dict[str, Path]) -> None:
    """LoRA adapters merged through peft's weighted-adapter combination (SVD back to the
    adapters' rank), on the base model their config names."""
    import json

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    names = list(sources)
    config = json.loads((sources[names[0]] / "adapter_config.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"])
    model = PeftModel.from_pretrained(base, str(sources[names[0]]), adapter_name=names[0])
    for t in names[1:]:
        model.load_adapter(str(sources[t]), adapter_name=t)
    for t in names:
        merged = f"merged-{t}"
        model.add_weighted_adapter(names, [coef[t][i] for i in names], merged, combination_type="svd",
                                   svd_rank=config["r"])

        def write(tmp: Path, t: str = t, merged: str = merged) -> None:
            shutil.copytree(sources[t], tmp)  # tokenizer, card, adapter config
            scratch = tmp / ".peft"
            model.save_pretrained(str(scratch), selected_adapters=[merged])
            for name in ("adapter_model.safetensors", "adapter_config.json"):  # its own scaling (lora_alpha)
                shutil.copy(scratch / merged / name, tmp / name)
            shutil.rmtree(scratch)

        atomic_write_dir(outputs[t], write)
        model.delete_adapter(merged)
