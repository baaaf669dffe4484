"""What the flywheel made, as data: list a run's datasets, read any of them, describe and export.

Readable paths: an HF dataset directory (``iter-000k/sft``), a folder of parquet shards
(``battles/``, ``judgments/``), or one row file (JSONL, JSON, CSV, TSV, Parquet: read by
``flywheel.ground.row_files``).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from flywheel.ground.chat import TEXT_COLUMNS, as_text
from flywheel.ground.dataset_files import dataset_rows, is_hf_dataset, parquet_rows
from flywheel.ground.row_files import BadRow, read_row_file
from flywheel.ground.run_view import RunView
from flywheel.learning.curation import load_dataset_dir

EXPORT_FORMATS = ("jsonl", "parquet", "sharegpt", "alpaca", "messages")


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def run_datasets(view: RunView) -> list[dict[str, Any]]:
    """One row per dataset of a run: iteration, kind, rows, bytes, path (the logs included)."""
    rows = []
    for k, kind, d in view.datasets():
        if is_hf_dataset(d):
            rows.append({"iteration": k, "dataset": kind, "rows": count_rows(d),
                         "bytes": dir_size(d), "path": str(d.relative_to(view.root))})
    for log in ("battles", "judgments"):
        for k, shards in view.log_shards(log).items():
            rows.append({"iteration": k, "dataset": log, "rows": sum(parquet_rows(p) for p in shards),
                         "bytes": sum(p.stat().st_size for p in shards), "path": view.log_glob(log, k)})
    return sorted(rows, key=lambda r: (r["iteration"], r["dataset"]))


def rows_by_target(view: RunView) -> list[dict[str, Any]]:
    """The curated datasets' rows per iteration, kind (sft, dpo, rollouts) and target, read from
    their files' ``target`` column alone (``-`` for a dataset without one)."""
    rows = []
    for k, kind, d in view.datasets():
        files = sorted((d / "data").glob("*.parquet"))
        if not files:
            if is_hf_dataset(d):  # the older save_to_disk layout
                rows.append({"iteration": k, "dataset": kind, "target": "-", "rows": dataset_rows(d)})
            continue
        counts: Counter[str] = Counter()
        for f in files:
            if "target" in pq.read_schema(f).names:
                counts.update(str(t) for t in pq.read_table(f, columns=["target"]).column("target").to_pylist())
            else:
                counts["-"] += parquet_rows(f)
        rows += [{"iteration": k, "dataset": kind, "target": t, "rows": n} for t, n in sorted((counts or {"-": 0}).items())]
    return rows


def count_rows(path: Path) -> int:
    """Rows of any readable path: a curated dataset's from its files' footers, others read."""
    return dataset_rows(path) if is_hf_dataset(path) else len(read_rows(path))


def read_rows(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of any readable path; a bad row is an error that names its file and line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if is_hf_dataset(path):
        ds = load_dataset_dir(path)
        return ds.select(range(min(limit, len(ds)))).to_list() if limit is not None else ds.to_list()
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"{path}: neither an HF dataset nor a folder of parquet files")
    rows: list[dict[str, Any]] = []
    for f in files:
        for row in read_row_file(f, None if limit is None else limit - len(rows)).rows:
            if isinstance(row, BadRow):
                raise ValueError(str(row))
            rows.append(row.value)
        if limit is not None and len(rows) >= limit:
            break
    return rows


def _lengths(values: list[str]) -> dict[str, float]:
    lens = [len(v) for v in values if isinstance(v, str)]
    if not lens:
        return {}
    return {"min": min(lens), "mean": round(statistics.fmean(lens), 2), "median": statistics.median(lens), "max": max(lens)}


def stats(path: Path) -> dict[str, Any]:
    """Rows, text lengths per column, counts by category and source, and judge margins (for a
    run's dataset, from the judgments of the battles its rows came from)."""
    path = Path(path)
    rows = read_rows(path)
    out: dict[str, Any] = {"path": str(path), "rows": len(rows)}
    if not rows:
        return out
    text_cols = [c for c in ("prompt", "completion", "chosen", "rejected", "response_a", "response_b")
                 if c in rows[0]]
    out["lengths"] = {c: _lengths([as_text(r[c]) for r in rows]) for c in text_cols}
    for key, col in (("categories", "category"), ("sources", "source_model"), ("sources", "chosen_model"),
                     ("targets", "target"), ("winners", "winner"), ("judges", "judge")):
        if col in rows[0]:
            out[key] = dict(sorted(Counter(str(r[col]) for r in rows).items()))
    if "margin" in rows[0]:  # a judgments log carries its margins
        out["judge_margins"] = _margins([r["margin"] for r in rows if r.get("winner") is not None])
    elif (run := RunView.around(path)) is not None and "battle_id" in rows[0]:
        ids = {r["battle_id"] for r in rows}
        margins = [r["margin"] for f in run.log_files("judgments")
                   for r in pq.read_table(f, columns=["battle_id", "margin", "winner"]).to_pylist()
                   if r["battle_id"] in ids and r["winner"] is not None]
        if margins:
            out["judge_margins"] = _margins(margins)
    return out


def _margins(margins: list[float]) -> dict[str, Any]:
    return {"judged": len(margins), "mean": round(statistics.fmean(margins), 3) if margins else None,
            "histogram": dict(sorted(Counter(str(m) for m in margins).items()))}


def convert(row: dict[str, Any], fmt: str) -> dict[str, Any]:
    """One row in an export format. SFT rows: (prompt, completion); DPO rows: (prompt, chosen, rejected)."""
    if fmt in ("jsonl", "parquet"):
        return row
    if "prompt" not in row or not ({"completion"} <= row.keys() or {"chosen", "rejected"} <= row.keys()):
        raise ValueError(f"format {fmt} needs SFT rows (prompt, completion) or DPO rows (prompt, chosen, rejected)")
    if fmt == "messages":
        return _messages(row)
    row = {**row, **{c: as_text(row[c]) for c in TEXT_COLUMNS if c in row}}  # conversational rows too
    if fmt == "alpaca":
        if "completion" in row:
            return {"instruction": row["prompt"], "input": "", "output": row["completion"]}
        return {"instruction": row["prompt"], "input": "", "chosen": row["chosen"], "rejected": row["rejected"]}
    if fmt == "sharegpt":
        human = {"from": "human", "value": row["prompt"]}
        if "completion" in row:
            return {"conversations": [human, {"from": "gpt", "value": row["completion"]}]}
        return {"conversations": [human], "chosen": {"from": "gpt", "value": row["chosen"]},
                "rejected": {"from": "gpt", "value": row["rejected"]}}
    raise ValueError(f"unknown format {fmt!r} ({', '.join(EXPORT_FORMATS)})")


def _turns(value: Any, role: str) -> list[dict[str, str]]:
    """A prompt or answer as chat turns: conversational rows keep theirs (a system prompt too)."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _messages(row: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's fine-tuning JSONL: an SFT row as ``messages``; a DPO row in the preference
    format (``input.messages``, ``preferred_output``, ``non_preferred_output``)."""
    prompt = _turns(row["prompt"], "user")
    if "completion" in row:
        return {"messages": prompt + _turns(row["completion"], "assistant")}
    return {"input": {"messages": prompt}, "preferred_output": _turns(row["chosen"], "assistant"),
            "non_preferred_output": _turns(row["rejected"], "assistant")}


def export(path: Path, fmt: str, out: Path) -> int:
    """Write ``path``'s rows to ``out`` in ``fmt`` (JSONL, or parquet for ``parquet``); atomic."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown format {fmt!r} ({', '.join(EXPORT_FORMATS)})")
    rows = [convert(r, fmt) for r in read_rows(path)]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp"
    if fmt == "parquet":
        import pyarrow as pa

        pq.write_table(pa.Table.from_pylist(rows), tmp)
    else:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)
    return len(rows)
