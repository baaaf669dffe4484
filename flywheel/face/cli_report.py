"""``flywheel report RUN_DIR --html FILE``: a run's report page (``report_page.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flywheel.config.loading import ConfigError
from flywheel.face.cli_data import RUNTIME, fail, open_run
from flywheel.face.report_page import write_report


def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (finished, or still running: what it has so far).")],
    html: Annotated[Path, typer.Option("--html", metavar="FILE", help="Write the page here (its folder must exist).")],
) -> None:
    """One self-contained HTML page of a run, that opens offline: the leaderboard with its
    intervals, each target across iterations, results per category, the win matrix, where the
    battles went, what the judge did and the datasets made (plots embedded; needs matplotlib)."""
    view = open_run(run_dir)
    if not html.parent.is_dir():
        fail(f"--html {html}: folder {html.parent} does not exist")
    if html.is_dir():
        fail(f"--html {html}: is a folder; give a file name")
    try:
        size = write_report(view, html)
    except ConfigError as e:
        fail(f"{run_dir}: {e}")
    except RuntimeError as e:  # matplotlib is an extra
        fail(str(e), RUNTIME)
    typer.echo(f"wrote {html} ({size / 1024:.0f} KiB)")
