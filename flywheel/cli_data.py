"""The ``flywheel data`` and ``flywheel models`` commands (inspect and export what a run made;
make real models usable offline), and the CLI's shared helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from flywheel import reports


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


FORMATS = ("table", "json", "csv", "md")


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        fail(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")


data_app = typer.Typer(no_args_is_help=True, help="Inspect and export the datasets a run made.")


@data_app.command("ls")
def data_ls(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    format: Annotated[str, typer.Option("--format", help="table, json, csv or md.")] = "table",
) -> None:
    """Every dataset of a run, per iteration: SFT and DPO sets and the battle and judgment logs."""
    from flywheel.dataview import run_datasets

    check_format(format)
    try:
        rows = run_datasets(run_dir)
    except FileNotFoundError as e:
        fail(str(e))
    typer.echo(reports.render(rows, format, ("iteration", "dataset", "rows", "bytes", "path")))


@data_app.command("show")
def data_show(
    path: Annotated[Path, typer.Argument(help="An HF dataset directory, a parquet file or folder, JSONL or JSON.")],
    limit: Annotated[int, typer.Option(min=0, help="Rows to print.")] = 10,
) -> None:
    """Print a dataset's first rows as JSON lines."""
    from flywheel.dataview import read_rows

    try:
        rows = read_rows(path, limit)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    for r in rows:
        typer.echo(json.dumps(r, ensure_ascii=False, default=str))


@data_app.command("stats")
def data_stats(
    path: Annotated[Path, typer.Argument(help="An HF dataset directory, a parquet file or folder, JSONL or JSON.")],
) -> None:
    """Rows, text lengths, categories, sources and judge margins of a dataset (JSON)."""
    from flywheel.dataview import stats

    try:
        typer.echo(json.dumps(stats(path), indent=2, default=str))
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))


@data_app.command("export")
def data_export(
    path: Annotated[Path, typer.Argument(help="An HF dataset directory, a parquet file or folder, JSONL or JSON.")],
    format: Annotated[str, typer.Option("--format", help="jsonl, parquet, sharegpt or alpaca.")] = "jsonl",
    out: Annotated[Optional[Path], typer.Option(help="Output file (default: <dataset>.<format>.jsonl|parquet beside it).")] = None,
) -> None:
    """Write a dataset as JSONL, parquet, ShareGPT or Alpaca records."""
    from flywheel.dataview import export

    target = out or path.parent / f"{path.name}.{format}.{'parquet' if format == 'parquet' else 'jsonl'}"
    try:
        n = export(path, format, target)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    typer.echo(f"wrote {n} rows to {target}")


@data_app.command("ingest")
def data_ingest(
    files: Annotated[list[Path], typer.Argument(help="Prompt files: JSONL, JSON, CSV or Parquet.")],
    layout: Annotated[str, typer.Option(help="auto, alpaca, sharegpt, arena-hard or plain.")] = "auto",
    category: Annotated[str, typer.Option(help="Category of rows that name none.")] = "user",
    out: Annotated[Optional[Path], typer.Option(help="Write the prompts as one JSONL pool (plain layout).")] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip bad rows (still listed) instead of failing.")] = False,
    no_dedup: Annotated[bool, typer.Option("--no-dedup", help="Keep repeated prompts.")] = False,
) -> None:
    """Read user prompt pools (Alpaca, ShareGPT, Arena-Hard, plain); report bad rows by line."""
    from flywheel.prompts import bad_rows_message, ingest

    seen: set[str] = set()
    prompts, bad, dups = [], [], 0
    for f in files:
        try:
            got = ingest(f, layout, category, not no_dedup, seen)
        except (OSError, ValueError) as e:
            fail(str(e))
        prompts += got.prompts
        bad += got.bad
        dups += got.duplicates
    if not prompts:
        fail(f"no prompts in {', '.join(map(str, files))}: {len(bad)} bad row(s), {dups} duplicate(s)")
    cats: dict[str, int] = {}
    for p in prompts:
        cats[p.category] = cats.get(p.category, 0) + 1
    typer.echo(json.dumps({"prompts": len(prompts), "duplicates": dups, "bad_rows": len(bad),
                           "categories": dict(sorted(cats.items()))}))
    if bad:
        typer.echo(bad_rows_message(bad), err=True)
        if not skip_bad:
            fail("bad rows found; fix them or pass --skip-bad (nothing was written)")
    if out is not None:
        from flywheel.store import atomic_write_text

        atomic_write_text(out, "".join(json.dumps({"id": p.id, "prompt": p.text, "category": p.category,
                                                   "level": p.level, "reference": p.reference}) + "\n" for p in prompts))
        typer.echo(f"wrote {len(prompts)} prompts to {out}")


models_app = typer.Typer(no_args_is_help=True, help="Real models made usable offline (GGUF to a checkpoint).")


@models_app.command("add")
def models_add(
    name: Annotated[str, typer.Argument(help="A known model (smollm2), or the name to save --gguf under.")],
    gguf: Annotated[Optional[Path], typer.Option("--gguf", help="Convert this GGUF file instead.")] = None,
    models_dir: Annotated[Path, typer.Option("--models-dir", help="Where checkpoints live.")] = Path("data/models"),
    force: Annotated[bool, typer.Option(help="Convert again even if it is there.")] = False,
) -> None:
    """Convert a GGUF model into a standard checkpoint (safetensors, tokenizer, chat template)."""
    import logging

    from flywheel.realmodels import ModelSourceError, add_model

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        out = add_model(name, models_dir, gguf, force)
    except ModelSourceError as e:
        fail(str(e), 1)
    typer.echo(f"{name}: {out} (use it as a player: path: {out})")


@models_app.command("ls")
def models_ls() -> None:
    """The known models and where their GGUF files are (or how to install them)."""
    from flywheel.realmodels import KNOWN, ModelSourceError, known_gguf

    for name, src in sorted(KNOWN.items()):
        try:
            where = str(known_gguf(name))
        except ModelSourceError:
            where = f"not installed: {src.install}"
        typer.echo(f"{name}  {src.description}  [{src.license}]\n    {where}")
