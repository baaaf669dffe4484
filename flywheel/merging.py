"""Federated sharing: merge the targets that share an architecture, weighted by performance.

After every target has trained its version k on its own battles, targets whose checkpoints
hold the same tensors (names, shapes and dtypes: full checkpoints, or LoRA adapters of the same
rank on the same modules) are averaged. Each target's weight is a softmax of its latest validation
accuracy over ``merge_temperature`` (the better target pulls the average toward itself), and
each target keeps ``1 - merge_strength`` of its own weights:

    merged = sum_t w_t theta_t,   theta_t' = (1 - strength) theta_t + strength merged

A target whose architecture no other target shares is left as trained.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from flywheel.store import atomic_write_dir

WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors")


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


def architecture(checkpoint: Path) -> tuple:
    """What must match for two checkpoints to merge: the weight file's kind and every tensor's
    name, shape and dtype (read from the safetensors header, without loading the tensors)."""
    from safetensors import safe_open

    path = weight_file(checkpoint)
    with safe_open(str(path), "pt") as f:
        shapes = tuple(sorted((k, tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()))
    return (path.name, shapes)


def groups(checkpoints: dict[str, Path]) -> list[list[str]]:
    """Targets grouped by architecture, in the given order; singletons included."""
    by_arch: dict[tuple, list[str]] = {}
    for t, path in checkpoints.items():
        by_arch.setdefault(architecture(path), []).append(t)
    return list(by_arch.values())


def merge_group(sources: dict[str, Path], weights: dict[str, float], strength: float, outputs: dict[str, Path]) -> None:
    """Write each target's merged checkpoint to ``outputs[t]`` (atomically: a temporary
    directory, then a rename). ``sources`` are never modified, so a rerun gives the same files."""
    import torch
    from safetensors.torch import load_file, save_file

    names = list(sources)
    if len(names) == 1:  # nothing shares its architecture: the version stays as trained
        atomic_write_dir(outputs[names[0]], lambda tmp: shutil.copytree(sources[names[0]], tmp))
        return
    tensors = {t: load_file(str(weight_file(sources[t]))) for t in names}
    merged = {key: sum(weights[t] * tensors[t][key].to(torch.float64) for t in names) for key in tensors[names[0]]}
    for t in names:
        mine = tensors[t]
        out = {key: ((1 - strength) * mine[key].to(torch.float64) + strength * merged[key]).to(mine[key].dtype).contiguous()
               for key in mine}

        def write(tmp: Path, t: str = t, out: dict = out) -> None:
            shutil.copytree(sources[t], tmp)
            save_file(out, str(tmp / weight_file(sources[t]).name), metadata={"format": "pt"})

        atomic_write_dir(outputs[t], write)
