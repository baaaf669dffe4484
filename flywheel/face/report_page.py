"""``flywheel report RUN_DIR --html FILE``: a run on one self-contained HTML page that opens
offline. The plots are base64 PNGs inside the page, the style is inline, and nothing is fetched
from anywhere. Each section is an element with a stable id (``SECTIONS``) and a heading; a section
the run has no data for says so in one line."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from flywheel.face import report_plots as plots
from flywheel.face.report_data import ReportData, gather
from flywheel.ground import reports
from flywheel.ground.atomic import atomic_write_text
from flywheel.ground.run_view import RunView

# id -> heading, in page order
SECTIONS = {
    "run": "Run",
    "leaderboard": "Leaderboard",
    "progress": "Targets across iterations",
    "categories": "Results per category",
    "win-matrix": "Win matrix",
    "arms": "Where the battles went",
    "judge": "What the judge did",
    "datasets": "Datasets made",
}

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1180px;
padding:0 20px 40px;color:#1d2430;background:#fff;line-height:1.45}
h1{margin:24px 0 4px;font-size:1.7em}h2{border-bottom:2px solid #d8dee8;padding-bottom:4px;margin-top:34px}
nav a{margin-right:14px;color:#2456a6;text-decoration:none}nav{margin:8px 0 4px}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 18px;margin:10px 0}
dt{font-weight:600;color:#4a5568}dd{margin:0}
table{border-collapse:collapse;margin:10px 0 18px;font-size:.88em}th,td{padding:3px 9px;border-bottom:1px solid #e3e7ee}
th{background:#f2f5f9;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{background:#f2f5f9;padding:0 3px;border-radius:3px}
img{max-width:100%;height:auto;display:block;margin:8px 0}
p.note{color:#5a6473;margin:4px 0}p.empty{color:#8a5a00;font-style:italic}
h3{margin:18px 0 4px;font-size:1.02em}
"""


def write_report(view: RunView, out: Path) -> int:
    """Write the run's report page to ``out`` (atomically); returns its size in bytes."""
    page = render(gather(view))
    atomic_write_text(out, page)
    return len(page.encode("utf-8"))


def render(d: ReportData) -> str:
    """The page as HTML text."""
    builders: dict[str, Callable[[ReportData], list[str]]] = {
        "run": _run, "leaderboard": _leaderboard, "progress": _progress, "categories": _categories,
        "win-matrix": _win_matrix, "arms": _arms, "judge": _judge, "datasets": _datasets}
    title = html.escape(f"flywheel report: {d.header.run}")
    nav = "".join(f'<a href="#{sid}">{html.escape(h)}</a>' for sid, h in SECTIONS.items())
    body = "\n".join(_section(sid, builders[sid](d)) for sid in SECTIONS)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{STYLE}</style></head>\n'
            f"<body><h1>{title}</h1><nav>{nav}</nav>\n{body}\n</body></html>\n")


def _section(sid: str, parts: list[str]) -> str:
    return f'<section id="{sid}"><h2>{html.escape(SECTIONS[sid])}</h2>\n' + "\n".join(parts) + "\n</section>"


def _empty(what: str) -> list[str]:
    return [f'<p class="empty">{html.escape(what)}</p>']


def _note(text: str) -> str:
    """A line of prose; `quoted` spans become code."""
    return '<p class="note">' + re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text)) + "</p>"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_td(r.get(c, "")) for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(v: Any) -> str:
    num = isinstance(v, int | float) and not isinstance(v, bool)
    return f'<td class="num">{html.escape(reports.cell(v))}</td>' if num else f"<td>{html.escape(reports.cell(v))}</td>"


# -- the sections ---------------------------------------------------------------------------------
def _run(d: ReportData) -> list[str]:
    h = d.header
    done = f"none yet (of {h.iterations})"
    if h.done:
        done = f"{len([k for k in h.done if k > 0])} of {h.iterations}" + (" and the baseline" if 0 in h.done else "")
    items = {"run": h.run, "world": h.world, "targets": ", ".join(h.targets), "opponents": ", ".join(h.opponents),
             "judge": h.judge, "battle choice": h.policy, "iterations done": done, "started": _when(h.created),
             "wall time": f"{h.wall_s:g} s over the iterations"}
    rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in items.items())
    return [f"<dl>{rows}</dl>"]


def _when(created: str | None) -> str:
    if not created:
        return "(not recorded)"
    try:
        return datetime.fromisoformat(created).strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    except ValueError:
        return created


def _leaderboard(d: ReportData) -> list[str]:
    if not d.leaderboard:
        return _empty("No eval leaderboard yet: no iteration has been rated.")
    return [_note(f"Eval leaderboard after iteration {d.leaderboard_iteration}: Bradley-Terry Elo with 95% "
                  "bootstrap intervals over all eval battles so far (targets in red)."),
            _img(plots.intervals_png(d.leaderboard, d.header.targets), "ratings with their 95% intervals"),
            _table(d.leaderboard, reports.columns_for(d.leaderboard))]


def _progress(d: ReportData) -> list[str]:
    if not d.progress:
        return _empty("No target has been evaluated yet.")
    rows = [p for pts in d.progress.values() for p in pts]
    return [_note("Each target version's held-out eval accuracy and Elo when it was evaluated; the dashed levels "
                  "are the opponents' latest figures."),
            _img(plots.progress_png(d.progress, d.references), "eval accuracy and Elo per iteration"),
            _table(rows, ("iteration", "model", "accuracy", "elo", "lower", "upper"))]


def _categories(d: ReportData) -> list[str]:
    parts = []
    if d.category_names:
        values = [[r.get(c) for c in d.category_names] for r in d.categories]
        parts += [_note(f"{d.category_measure.capitalize()} per category: every target version next to every opponent."),
                  _img(plots.matrix_png([r["model"] for r in d.categories], d.category_names, values,
                                        d.category_measure), f"{d.category_measure} per category"),
                  _table(d.categories, ["model", *(["overall"] if "overall" in d.categories[0] else []),
                                        *d.category_names])]
    if d.games:
        parts += ["<h3>Games against each opponent</h3>",
                  _table(d.games, ("model", "opponent", "games", "win", "draw", "loss", "win_or_draw", "validation_wd"))]
    return parts or _empty("No per-category results: no eval battles have been judged.")


def _win_matrix(d: ReportData) -> list[str]:
    m = d.matrix
    if not m.models:
        return _empty("No win matrix: no eval battles have been judged.")
    counts = [{"model": a, **{b: n for b, n in zip(m.models, row)}} for a, row in zip(m.models, m.battles)]
    return [_note("Score of the row model against the column model over all judged eval battles (a win 1, a tie "
                  "half); blank where they never met."),
            _img(plots.matrix_png(m.models, m.models, m.win_rate, "score of row vs column"), "win-rate heatmap"),
            "<h3>Eval battles per pair</h3>", _table(counts, ("model", *m.models))]


def _arms(d: ReportData) -> list[str]:
    parts = []
    if d.arms is not None:
        panels = {f"{t}: prompt arms": [(r["arm"], r["share"]) for r in rows] for t, rows in d.arms.sections.items()}
        last = [r for r in d.opponents if r["iteration"] == d.arms.iteration]
        for t in sorted({r["target"] for r in last}):
            panels[f"{t}: who it met"] = [(r["opponent"], r["share"]) for r in last if r["target"] == t]
        flat = [{"target": t, **r} for t, rows in d.arms.sections.items() for r in rows]
        parts += [_note(f"As `flywheel arms` reports it: {d.arms.header()}; who each target met is counted from the plan."),
                  _img(plots.shares_png(panels, "share of the iteration's battles"), "battle shares per arm"),
                  _table(flat, ("target", "arm", "battles", "share", "pulls", "effective_pulls", "value"))]
    if d.opponents:
        parts += ["<h3>Opponents met, per iteration</h3>",
                  _table(d.opponents, ("iteration", "target", "opponent", "battles", "share"))]
    return parts or _empty("No bandit record: the run has no train iteration yet.")


def _judge(d: ReportData) -> list[str]:
    if not d.verdicts and not d.judge:
        return _empty("No judgments in this run.")
    parts = []
    if d.verdicts:
        verdicts = [w for w in ("model_a", "model_b", "tie", "tie (bothbad)", "invalid")
                    if any(r[w] for r in d.verdicts)] or ["model_a"]
        groups = [f"{r['iteration']} {r['phase']}" for r in d.verdicts]
        parts += [_note("Verdicts per iteration and phase (train battles feed the datasets; eval battles the ratings); "
                        "flipped: the two orders disagreed."),
                  _img(plots.bars_png(groups, {w: [r[w] for r in d.verdicts] for w in verdicts}, "judgments", stacked=True),
                       "verdicts per iteration"),
                  _table(d.verdicts, ("iteration", "phase", "judged", "model_a", "model_b", "tie", "tie (bothbad)",
                                      "invalid", "flipped"))]
    if d.judge:
        parts += ["<h3>Diagnostics</h3>",
                  _note("flip_rate: position flips where both orders were judged; longer_wins: the share of decisive "
                        "verdicts that went to the longer answer; self_pref: self-preference; kappa: panel agreement; "
                        "'-': not measured."),
                  _table(d.judge, reports.JUDGE_COLUMNS)]
    if d.cascade:
        parts += ["<h3>Cascade</h3>",
                  _note("Per tier: battles it judged (asked) and decided, the share it passed on (escalated_share), "
                        "its cost and cost per decisive verdict, and its agreement with the last tier on its audited "
                        "battles with a 95% interval; 'all': the whole cascade."),
                  _table(d.cascade, reports.CASCADE_COLUMNS)]
    if d.judge_usage:
        parts += ["<h3>Judge calls and cache hits</h3>",
                  _table(d.judge_usage, ("iteration", "player", "judged", "judge_calls", "cache_hits"))]
    else:
        parts.append(_note("No judge cache hits recorded (the judge calls no model)."))
    return parts


def _datasets(d: ReportData) -> list[str]:
    if not d.datasets:
        return _empty("No datasets yet: no train iteration has been curated.")
    kinds = sorted({r["dataset"] for r in d.datasets})
    iters = sorted({r["iteration"] for r in d.datasets})
    series = {kind: [sum(r["rows"] for r in d.datasets if r["dataset"] == kind and r["iteration"] == k) for k in iters]
              for kind in kinds}
    return [_note("Rows of each curated dataset per iteration and target, as `flywheel data ls` lists the datasets."),
            _img(plots.bars_png([str(k) for k in iters], series, "rows"), "dataset rows per iteration"),
            _table(d.datasets, ("iteration", "dataset", "target", "rows")), *_own_answers(d)]


def _own_answers(d: ReportData) -> list[str]:
    if not d.own_answers:
        return []
    return [_note("What each target learnt from its own answers (rollouts): the answers sampled before training "
                  "and a GRPO or RLOO trainer's, the share of their groups flat (every answer one reward: nothing to "
                  "learn), rewards that failed, the trainer's mean reward, answers generated per optimizer step."),
            _table(d.own_answers, reports.OWN_ANSWER_COLUMNS)]
