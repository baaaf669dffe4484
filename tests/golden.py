"""A digest of what a run made (battles, verdicts, datasets, accuracies), to compare runs of the
same config and seed across code changes. ``python -m tests.golden RUN_DIR`` prints it;
``python -m tests.golden --models`` pre-trains the tests' shipped tiny models anew."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def weights_digest(models_dir: Path) -> str:
    """The weights under ``models_dir`` (every .safetensors file, with its path)."""
    h = hashlib.sha256()
    for p in sorted(Path(models_dir).rglob("*.safetensors")):
        h.update(p.relative_to(models_dir).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _rows(folder: Path) -> list[dict]:
    return [r for p in sorted(folder.glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def digest(run_dir: Path) -> dict:
    """What the run made, by iteration and phase: ``trained`` (the weights it trained, whose
    arithmetic is this CPU's), then battles, verdicts, datasets and accuracies."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    battles = sorted(_rows(run_dir / "battles"), key=lambda r: r["battle_id"])
    winner = {r["battle_id"]: r["winner"] for r in _rows(run_dir / "judgments")}
    out: dict = {"trained": weights_digest(run_dir / "models"), "battles": len(battles), "log": {}, "datasets": {},
                 "iterations": {}}
    for key in sorted({f"{b['iteration']}/{b['phase']}" for b in battles}):
        these = [b for b in battles if f"{b['iteration']}/{b['phase']}" == key]
        out["log"][key] = [len(these), _sha([(b["battle_id"], b["model_a"], b["model_b"], b["response_a"],
                                               b["response_b"], b["error"], winner.get(b["battle_id"])) for b in these])]
    for k in [e["iteration"] for e in summary["iterations"]]:
        for kind in ("sft", "dpo"):
            folder = run_dir / f"iter-{k:04d}" / kind / "data"  # the Hub layout: <kind>/data/*.parquet
            if folder.exists():
                rows = sorted(_rows(folder), key=lambda r: json.dumps(r, sort_keys=True, default=str))
                out["datasets"][f"{k}/{kind}"] = [len(rows), _sha(rows)]
    for e in summary["iterations"]:
        out["iterations"][str(e["iteration"])] = {
            "battles": e["battles"], "sft": e["sft_examples"], "dpo": e["dpo_pairs"], "train_steps": e["train_steps"],
            "accuracy": {m: v["accuracy"] for m, v in sorted({**e["eval"], **e["opponents_eval"]}.items())},
            "validation": {m: v["validation"]["accuracy"] for m, v in sorted(e["eval"].items())},
            "elo": {m: round(v["elo"], 3) for m, v in sorted({**e["eval"], **e["opponents_eval"]}.items())},
            "shares": e["allocation"].get("shares"),
        }
    return out


def before_training(d: dict) -> dict:
    """The part of a digest that only the pre-trained models made: the first iteration's train
    battles, their verdicts and datasets, and the iteration-0 evaluation."""
    return {"log": {k: v for k, v in d["log"].items() if k == "1/train"},
            "datasets": {k: v for k, v in d["datasets"].items() if k.startswith("1/")},
            "iterations": {k: v for k, v in d["iterations"].items() if k == "0"}}


def build_fixture_models() -> Path:
    """Pre-train the tests' tiny models into tests/fixtures/tiny-models (replacing them)."""
    import shutil

    from flywheel.worlds.tinymodels import bootstrap
    from tests.conftest import FIXTURE_MODELS, tiny_world

    shutil.rmtree(FIXTURE_MODELS, ignore_errors=True)
    bootstrap(tiny_world(FIXTURE_MODELS))
    return FIXTURE_MODELS


if __name__ == "__main__":
    if sys.argv[1:] == ["--models"]:
        print(build_fixture_models())
    else:
        print(json.dumps(digest(Path(sys.argv[1])), indent=2))
