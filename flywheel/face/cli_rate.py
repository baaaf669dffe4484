"""``flywheel rate``: any battle log (JSONL, JSON, CSV or Parquet, Chatbot Arena's layout) rated
with the same Bradley-Terry leaderboard as a run, or with style control (``--style-control``);
and ``flywheel elo --lc-baseline`` / ``--style-control``: a run's length-controlled win rates
against a baseline, its style-controlled leaderboard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from flywheel.face import queries
from flywheel.face.battlelog import BattleLogError, consistency, read_battle_columns, read_reference
from flywheel.face.cli_data import Format, fail, refuse_together
from flywheel.ground import reports
from flywheel.ground.run_view import RunView
from flywheel.maths.leaderboard import RatingOptions, rate
from flywheel.maths.length_control import COLUMNS as LC_COLUMNS
from flywheel.maths.style_control import COEF_COLUMNS, StyleOptions, StyleReport, style_control

STYLE_UNITS = ("logits per standard deviation of (A - B) / (A + B + 1) over the battles; positive: the judge "
               "favours the answer with more of it")


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
    style: Annotated[bool, typer.Option("--style-control", help="Control for the answers' length and markdown "
                     "(Chatbot Arena's style control): needs conv_metadata or the answers' texts per battle.")] = False,
) -> None:
    """Rate any battle log: Bradley-Terry Elo (base 10, scale 400, mean 1000) with bootstrap CIs."""
    if style:
        refuse_together(style_control=style, by=by)
        refuse_together(style_control=style, matrix=matrix)
        refuse_together(style_control=style, prior=prior is not None)  # --prior 0 is given too
    options = RatingOptions(rounds=bootstrap, ci=ci, seed=seed, prior=prior, anchor=_parse_anchor(anchor))
    try:
        battles, bad = read_battle_columns(file, style=style)
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
    if style:
        return _rate_style(battles, StyleOptions(rounds=bootstrap, ci=ci, seed=seed, anchor=options.anchor), format,
                           ref, fold_names)
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


def _rate_style(battles, options: StyleOptions, format: str, ref: Optional[dict], fold_names: bool) -> None:
    try:
        report = style_control(battles.model_a, battles.model_b, battles.winner, battles.style_a, battles.style_b,
                               options, fold_names=fold_names)
        cons = None if ref is None else consistency(report.ratings, ref)
    except ValueError as e:
        fail(str(e))
    print_style(report, format, cons)


def print_style(report: StyleReport, format: str, cons: Optional[dict] = None) -> None:
    """The style-controlled leaderboard, then the style coefficients with their intervals (and the
    consistency with a reference); JSON: one object with ``leaderboard`` and ``style_coefficients``."""
    for w in report.warnings:
        typer.echo(f"warning: {w}", err=True)
    rows, coefs = report.rows(), report.coefficient_rows()
    if format == "json":
        out = {"leaderboard": rows, "style_coefficients": coefs}
        typer.echo(json.dumps(out | ({} if cons is None else {"consistency": cons}), indent=2))
        return
    title = {"table": f"\n[style coefficients: {STYLE_UNITS}]", "md": f"\n## Style coefficients\n\n{STYLE_UNITS}.\n",
             "csv": ""}
    typer.echo(reports.render(rows, format))
    typer.echo(title[format])
    typer.echo(reports.render(coefs, format, COEF_COLUMNS))
    if cons is not None:
        typer.echo("\nconsistency with the reference: " + json.dumps(cons))


def style_board_cmd(view: RunView, format: str) -> None:
    """``flywheel elo RUN_DIR --style-control``: the run's eval leaderboard with style control."""
    try:
        report = queries.style_board(view)
    except (queries.QueryError, ValueError) as e:
        fail(str(e))
    print_style(report, format)


def lc_board_cmd(view: RunView, baseline: str, format: str) -> None:
    """``flywheel elo RUN_DIR --lc-baseline MODEL``: print each model's battles against MODEL, win
    rate, length-controlled win rate with its interval, length coefficient, mean length difference."""
    try:
        rows = queries.lc_board(view, baseline)
    except queries.QueryError as e:
        fail(str(e))
    typer.echo(reports.render(rows, format, LC_COLUMNS))
