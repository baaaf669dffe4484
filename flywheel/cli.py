"""The ``flywheel`` command: run, bootstrap, elo."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

# Offline and quiet by default; the environment can still override each of these.
for _key, _value in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "flywheel",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
}.items():
    os.environ.setdefault(_key, _value)

from flywheel import reports  # noqa: E402
from flywheel.config import ConfigError, load_config  # noqa: E402
from flywheel.store import RunLockedError, read_json  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Bandit-driven Arena Learning flywheel.")


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    resume: Annotated[Optional[Path], typer.Option(help="Continue this killed or finished run.")] = None,
) -> None:
    """Run the flywheel: baseline evaluation, then the configured iterations."""
    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    if resume is not None and not (resume / "config.yaml").is_file():
        fail(f"--resume {resume}: not a run directory (no config.yaml)")
    from flows.flywheel_flow import flywheel

    try:
        run_dir = flywheel(cfg.model_dump(mode="json"), str(resume) if resume else None)
    except (RunLockedError, FileExistsError) as e:
        fail(str(e))
    _print_result(Path(run_dir))


def _print_result(run_dir: Path) -> None:
    summary = read_json(run_dir / "summary.json", {})
    last = summary["iterations"][-1]["iteration"]
    rows = read_json(run_dir / "ratings" / f"iter-{last:04d}.json", [])
    typer.echo(f"\nrun directory: {run_dir}")
    typer.echo(f"\nEval leaderboard after iteration {last} (Bradley-Terry Elo, 95% CI):\n")
    typer.echo(reports.text_table(rows))
    typer.echo("\nTarget progress on the held-out eval split:\n")
    typer.echo(reports.progress_table(summary))


@app.command(name="bootstrap")
def bootstrap_cmd(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    force: Annotated[bool, typer.Option(help="Rebuild models that already exist.")] = False,
) -> None:
    """Build and pre-train the embedded world's tiny models (deterministic under world.seed)."""
    import logging

    from flywheel.tinymodels import bootstrap

    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    made = bootstrap(cfg.world, force=force)
    typer.echo(f"{len(made)} model(s) built under {cfg.world.models_dir}")


@app.command()
def elo(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    format: Annotated[str, typer.Option("--format", help="table, json, csv or md.")] = "table",
) -> None:
    """Print a run's latest eval leaderboard."""
    if format not in ("table", "json", "csv", "md"):
        fail(f"--format {format!r}: expected table, json, csv or md")
    files = sorted((run_dir / "ratings").glob("iter-[0-9][0-9][0-9][0-9].json"))
    if not files:
        fail(f"{run_dir}: no ratings yet (is it a run directory?)")
    rows = json.loads(files[-1].read_text())
    typer.echo(reports.render(rows, format))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
