"""A digest of what a run made (battles, verdicts, datasets, accuracies), to compare runs of the
same config and seed across code changes. ``python -m tests.golden RUN_DIR`` prints it."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def weights_digest(models_dir: Path) -> str:
    """The pre-trained weights a run started from (every .safetensors under ``models_dir``)."""
    h = hashlib.sha256()
    for p in sorted(Path(models_dir).rglob("*.safetensors")):
        h.update(p.relative_to(models_dir).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _rows(folder: Path) -> list[dict]:
    return [r for p in sorted(folder.glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def digest(run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    battles = sorted(_rows(run_dir / "battles"), key=lambda r: r["battle_id"])
    verdicts = sorted(((r["battle_id"], r["winner"]) for r in _rows(run_dir / "judgments")), key=str)
    out: dict = {
        "battles": len(battles),
        "battles_sha": _sha([(b["battle_id"], b["model_a"], b["model_b"], b["response_a"], b["response_b"],
                              b["error"]) for b in battles]),
        "verdicts_sha": _sha(verdicts),
        "datasets": {},
        "iterations": {},
    }
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


if __name__ == "__main__":
    print(json.dumps(digest(Path(sys.argv[1])), indent=2))
