"""The ``flywheel data`` and ``flywheel models`` commands (inspect and export what a run made;
make real models usable offline), and the CLI's shared helpers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal, NoReturn, Optional

import typer

from flywheel.face.dataview import export, read_rows, run_datasets, stats
from flywheel.face.exports import export_arena, export_arena_hard
from flywheel.face.hub import PushError, push, push_operations
from flywheel.ground import reports
from flywheel.ground.atomic import DAMAGED_HINT, DamagedFileError, atomic_write_text
from flywheel.ground.conversation import decode
from flywheel.ground.run_view import NotARunError, RunView
from flywheel.worlds.prompts import bad_rows_message, ingest
from flywheel.worlds.realmodels import KNOWN, ModelSourceError, add_model, known_gguf

# Exit codes (README, "Exit codes"): usage and config errors (bad arguments, config fields, input
# files) 2, as click's own; failures while working 1; a run directory another process holds 75
# (EX_TEMPFAIL: try again later).
USAGE, RUNTIME, IN_USE = 2, 1, 75


def fail(message: str, code: int = USAGE) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def open_run(run_dir: Path) -> RunView:
    """The run a command reads, opened once; a folder that holds no run is one error line (exit 2)."""
    try:
        return RunView.open(run_dir)
    except NotARunError as e:
        fail(str(e))


# Options with a fixed set of values are Literal types: typer lists them in --help and refuses
# any other value (exit 2).
Format = Literal["table", "json", "csv", "md"]
ExportFormat = Literal["jsonl", "parquet", "sharegpt", "alpaca", "messages", "arena", "arena-hard"]
Layout = Literal["auto", "alpaca", "sharegpt", "arena", "arena-hard", "plain"]


def refuse_together(**flags: object) -> None:
    """At most one of these options may be given: a combination is refused, never half-ignored."""
    given = [name for name, value in flags.items() if value not in (None, False)]
    if len(given) > 1:
        fail(f"{' and '.join('--' + n.replace('_', '-') for n in given)} cannot be combined; give one")


data_app = typer.Typer(no_args_is_help=True, help="Inspect and export the datasets a run made.")


@data_app.command("ls")
def data_ls(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    format: Annotated[Format, typer.Option("--format", help="Output format.")] = "table",
) -> None:
    """Every dataset of a run, per iteration: SFT and DPO sets and the battle and judgment logs."""
    rows = run_datasets(open_run(run_dir))
    typer.echo(reports.render(rows, format, ("iteration", "dataset", "rows", "bytes", "path")))


READABLE = "An HF dataset directory, a parquet folder, or a JSONL, JSON, CSV, TSV or Parquet file."


@data_app.command("show")
def data_show(
    path: Annotated[Path, typer.Argument(help=READABLE)],
    limit: Annotated[int, typer.Option(min=0, help="Rows to print.")] = 10,
) -> None:
    """Print a dataset's first rows as JSON lines."""
    try:
        rows = read_rows(path, limit)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    for r in rows:
        typer.echo(json.dumps(r, ensure_ascii=False, default=str))


@data_app.command("stats")
def data_stats(
    path: Annotated[Path, typer.Argument(help=READABLE)],
) -> None:
    """Rows, text lengths, categories, sources and judge margins of a dataset (JSON)."""
    try:
        typer.echo(json.dumps(stats(path), indent=2, default=str))
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))


@data_app.command("export")
def data_export(
    path: Annotated[Path, typer.Argument(help="A dataset (HF dataset directory, parquet file or folder, JSONL or "
                                         "JSON); for arena and arena-hard, a run directory.")],
    format: Annotated[ExportFormat, typer.Option("--format", help="Output format: a dataset's rows (jsonl, "
                                                 "parquet), ShareGPT, Alpaca or OpenAI chat fine-tuning records "
                                                 "(messages); a run's battles in Chatbot Arena's layout (arena) or "
                                                 "arena-hard-auto's folders (arena-hard).")] = "jsonl",
    out: Annotated[Optional[Path], typer.Option(help="Output file, or folder for arena-hard (default: beside the "
                                                "input, named after the format).")] = None,
    phase: Annotated[Literal["train", "eval", "all"], typer.Option(help="arena, arena-hard: which battles.")] = "all",
) -> None:
    """Write a dataset, or a run's judged battles, in the layout another tool reads."""
    if format in ("arena", "arena-hard"):
        view = open_run(path)
        target = out or path / "exports" / (f"arena-{phase}.jsonl" if format == "arena" else f"arena-hard-{phase}")
        n = (export_arena if format == "arena" else export_arena_hard)(view, target, phase)
        typer.echo(f"wrote {n} judged battles to {target}")
        return
    if phase != "all":
        fail("--phase applies to arena and arena-hard exports of a run")
    target = out or path.parent / f"{path.name}.{format}.{'parquet' if format == 'parquet' else 'jsonl'}"
    try:
        n = export(path, format, target)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    typer.echo(f"wrote {n} rows to {target}")


@data_app.command("push")
def data_push(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    repo: Annotated[str, typer.Option(help="The Hub dataset repository, ORG/NAME.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be uploaded; upload nothing.")] = False,
    private: Annotated[bool, typer.Option(help="Create the repository private.")] = False,
) -> None:
    """Publish a run's SFT, DPO and rollout datasets to the Hugging Face Hub (token: HF_TOKEN)."""
    if "/" not in repo.strip("/"):
        fail(f"--repo {repo!r}: expected ORG/NAME")
    view = open_run(run_dir)
    try:
        ops = push_operations(view)
    except PushError as e:
        fail(str(e))
    if dry_run:
        total = 0
        for op in ops:
            size = op.upload_info.size
            total += size
            typer.echo(f"{op.path_in_repo}\t{size}")
        typer.echo(f"dry run: {len(ops)} files, {total} bytes would go to datasets/{repo}; nothing was uploaded",
                   err=True)
        return
    try:
        url = push(view, repo, private)
    except PushError as e:
        fail(str(e), RUNTIME)
    typer.echo(f"pushed {len(ops)} files to datasets/{repo}: {url}")


@data_app.command("ingest")
def data_ingest(
    files: Annotated[list[Path], typer.Argument(help="Prompt files: JSONL, JSON, CSV or Parquet.")],
    layout: Annotated[Layout, typer.Option(help="Prompt layout (auto: told apart per row).")] = "auto",
    category: Annotated[str, typer.Option(help="Category of rows that name none.")] = "user",
    out: Annotated[Optional[Path], typer.Option(help="Write the prompts as one JSONL pool (plain layout), and the "
                                                "human votes of Chatbot Arena logs beside it (OUT's name with "
                                                ".votes.jsonl).")] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip bad rows (still listed) instead of failing.")] = False,
    no_dedup: Annotated[bool, typer.Option("--no-dedup", help="Keep repeated prompts.")] = False,
) -> None:
    """Read user prompt pools (Alpaca, ShareGPT, Chatbot Arena, Arena-Hard, plain); report bad rows by
    line. Chatbot Arena logs' human votes are kept too."""
    seen: set[str] = set()
    prompts, bad, dups, votes = [], [], 0, []
    for f in files:
        try:
            got = ingest(f, layout, category, not no_dedup, seen, votes=True)
        except (OSError, ValueError) as e:
            fail(str(e))
        prompts += got.prompts
        bad += got.bad
        dups += got.duplicates
        votes += got.votes
    if not prompts:
        fail(f"no prompts in {', '.join(map(str, files))}: {len(bad)} bad row(s), {dups} duplicate(s)")
    cats: dict[str, int] = {}
    for p in prompts:
        cats[p.category] = cats.get(p.category, 0) + 1
    typer.echo(json.dumps({"prompts": len(prompts), "duplicates": dups, "bad_rows": len(bad),
                           "categories": dict(sorted(cats.items())), "votes": len(votes)}))
    if bad:
        typer.echo(bad_rows_message(bad), err=True)
        if not skip_bad:
            fail("bad rows found; fix them or pass --skip-bad (nothing was written)")
    if out is not None:
        atomic_write_text(out, "".join(json.dumps({"id": p.id, "prompt": p.text, "category": p.category,
                                                   "level": p.level, "reference": p.reference,
                                                   **({"follow_ups": decode(p.turns)} if p.turns else {})}) + "\n"
                                       for p in prompts))
        typer.echo(f"wrote {len(prompts)} prompts to {out}")
        if votes:
            target = votes_path(out)
            atomic_write_text(target, "".join(json.dumps(v.to_row(), ensure_ascii=False) + "\n" for v in votes))
            typer.echo(f"wrote {len(votes)} human votes to {target}")


def votes_path(pool: Path) -> Path:
    """Where ``data ingest --out POOL`` keeps the human votes: beside the pool, ``<stem>.votes.jsonl``."""
    return pool.with_name(f"{pool.stem}.votes.jsonl")


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

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        out = add_model(name, models_dir, gguf, force)
    except ModelSourceError as e:
        fail(str(e), RUNTIME)
    typer.echo(f"{name}: {out} (use it as a player: path: {out})")


@models_app.command("ls")
def models_ls() -> None:
    """The known models and where their GGUF files are (or how to install them)."""
    for name, src in sorted(KNOWN.items()):
        try:
            where = str(known_gguf(name))
        except ModelSourceError:
            where = f"not installed: {src.install}"
        typer.echo(f"{name}  {src.description}  [{src.license}]\n    {where}")


def damaged_file(e: BaseException) -> str | None:
    """A one-line message for a file on disk that cannot be read (``DamagedFileError``: a run's JSON
    file, a checkpoint's weights; or a Parquet file, which pyarrow names), or None for any other error."""
    pa = sys.modules.get("pyarrow")
    while e is not None:
        if isinstance(e, DamagedFileError):
            return " ".join(str(e).split())
        if pa is not None and isinstance(e, pa.ArrowInvalid) and "Parquet" in str(e):
            return f"{' '.join(str(e).split())} ({DAMAGED_HINT})"
        e = e.__cause__ or e.__context__
    return None

