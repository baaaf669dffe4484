"""``flywheel rate``: any battle log (JSONL, JSON, CSV or Parquet, Chatbot Arena's layout) rated
with the same Bradley-Terry leaderboard as a run; and ``flywheel elo --lc-baseline``: a run's
length-controlled win rates against a baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from flywheel.face import queries
from flywheel.face.battlelog import BattleLogError, consistency, read_battle_columns, read_reference
from flywheel.face.cli_data import Format, fail
from flywheel.ground import reports
from flywheel.maths.leaderboard import RatingOptions, rate
from flywheel.maths.length_control import COLUMNS as LC_COLUMNS


def _parse_anchor(anchor: Optional[str]) -> Optional[tuple[str, float]]:
    if anchor is None:
        return None
    model, sep, value = anchor.rpartition("=")
    try:
        if not sep or not model:
            raise ValueError
        return model, float(value)
    except ValueError:
        fail(f"--anchor {anchor!r}: expected MODEL=RATING, e.g. --anchor gpt-4=1200")
    return None


def rate_cmd(
    file: Annotated[Path, typer.Argument(help="Battle log: .jsonl, .json, .csv or .parquet (Chatbot Arena layout).")],
    format: Annotated[Format, typer.Option("--format", help="Output format.")] = "table",
    by: Annotated[Optional[Literal["category"]], typer.Option("--by", help="One leaderboard per category.")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0, help="Bootstrap rounds for the CIs.")] = 100,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    ci: Annotated[float, typer.Option(min=0.5, max=0.999, help="Confidence level.")] = 0.95,
    anchor: Annotated[Optional[str], typer.Option(help="Pin a model's rating: MODEL=RATING.")] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip bad rows (and say how many) instead of failing.")] = False,
    fold_names: Annotated[bool, typer.Option("--fold-names", help="Merge names that differ only by case or spaces.")] = False,
    prior: Annotated[Optional[float], typer.Option("--prior", min=0, help="Virtual ties of each model against a "
                     "mean-rated reference; default: none where the maximum-likelihood fit exists, 0.1 where not; "
                     "0 = the classic fit.")] = None,
    matrix: Annotated[bool, typer.Option("--matrix", help="Print the win-rate and battle-count matrices.")] = False,
    reference: Annotated[Optional[Path], typer.Option(help="Reference ranking (JSON or CSV) for a consistency report.")] = None,
) -> None:
    """Rate any battle log: Bradley-Terry Elo (base 10, scale 400, mean 1000) with bootstrap CIs."""
    options = RatingOptions(rounds=bootstrap, ci=ci, seed=seed, prior=prior, anchor=_parse_anchor(anchor))
    try:
        battles, bad = read_battle_columns(file)
        ref = read_reference(reference) if reference else None
    except BattleLogError as e:
        fail(str(e))
    if bad and not skip_bad:
        shown = "\n  ".join(str(b) for b in bad[:20])
        more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        fail(f"{file}: {len(bad)} bad row(s) (use --skip-bad to skip them):\n  {shown}{more}")
    if bad:
        typer.echo(f"skipped {len(bad)} bad row(s) of {len(bad) + len(battles)}", err=True)
    if not battles:
        fail(f"{file}: no battles to rate")
    groups = battles.by_category() if by == "category" else {"all": battles}
    reports_by: dict = {}
    try:
        for name, cols in groups.items():
            reports_by[name] = rate(cols.model_a, cols.model_b, cols.winner, options, fold_names=fold_names)
    except ValueError as e:
        fail(str(e))
    for name, rep in reports_by.items():
        for w in rep.warnings:
            typer.echo(f"warning{'' if by is None else f' ({name})'}: {w}", err=True)
    if matrix:
        rep = reports_by[next(iter(reports_by))] if by is None else None
        if rep is None:
            fail("--matrix works on the whole log; drop --by")
        typer.echo(reports.render_matrix(rep.models, rep.win_rate, format, "win rate (row vs column, ties half)"))
        typer.echo(reports.render_matrix(rep.models, rep.battle_counts, format, "battles"))
        return
    if by is None:
        rows = reports_by["all"].rows()
        if ref is None:
            typer.echo(reports.render(rows, format))
            return
        try:
            cons = consistency(reports_by["all"].ratings, ref)
        except ValueError as e:
            fail(str(e))
        if format == "json":
            typer.echo(json.dumps({"leaderboard": rows, "consistency": cons}, indent=2))
        else:
            typer.echo(reports.render(rows, format))
            typer.echo("\nconsistency with the reference: " + json.dumps(cons))
        return
    typer.echo(reports.render_sections({n: r.rows() for n, r in reports_by.items()}, format))


def lc_board_cmd(run_dir: Path, baseline: str, format: str) -> None:
    """``flywheel elo RUN_DIR --lc-baseline MODEL``: print each model's battles against MODEL, win
    rate, length-controlled win rate with its interval, length coefficient, mean length difference."""
    try:
        rows = queries.lc_board(run_dir, baseline)
    except queries.QueryError as e:
        fail(str(e))
    typer.echo(reports.render(rows, format, LC_COLUMNS))
