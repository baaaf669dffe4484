"""Model checkpoints on disk: loaded with a damaged file named, saved atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flywheel.ground.atomic import DamagedFileError, atomic_write_dir


def load_checkpoint(path: str | Path, **kwargs: Any):
    """``AutoModelForCausalLM.from_pretrained``; weights that cannot be read (a file cut short or
    changed outside the flywheel) raise ``DamagedFileError`` naming the checkpoint."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except SafetensorError as e:
        raise DamagedFileError(f"{path}: its weights cannot be read ({e}); restore the checkpoint from a copy") from e


def save_checkpoint(model, tokenizer, out: Path, extra: dict[str, str] | None = None) -> None:
    """``save_pretrained`` a model and its tokenizer (and ``extra`` files: name -> text)
    atomically: a temporary directory, then a rename."""

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")

    atomic_write_dir(out, fill)
