"""Leaderboards and progress tables as text, markdown, CSV and JSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

COLUMNS = ("rank", "model", "rating", "lower", "upper", "battles", "wins", "losses", "ties", "win_rate")


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3f}"
    return str(v)


def text_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    cells = [[_cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    line = lambda vals: "  ".join(v.rjust(w) if i != 1 else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths)))  # noqa: E731
    return "\n".join([line(list(columns)), line(["-" * w for w in widths])] + [line(c) for c in cells])


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "|".join("---" for _ in columns) + "|\n"
    return head + "".join("| " + " | ".join(_cell(r.get(c, "")) for c in columns) + " |\n" for r in rows)


def csv_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def render(rows: Sequence[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(list(rows), indent=2)
    if fmt == "md":
        return markdown_table(rows)
    if fmt == "csv":
        return csv_table(rows)
    return text_table(rows)


def progress_table(summary: dict[str, Any]) -> str:
    """Each target's eval accuracy and Elo per iteration, with the change since the baseline."""
    lines = []
    for t in summary.get("targets", []):
        lines.append(f"{t}:")
        first = None
        for e in summary.get("iterations", []):
            for name, ev in e.get("eval", {}).items():
                if name.split("@")[0] != t:
                    continue
                first = first or ev
                ci = ev.get("elo_ci") or [float("nan")] * 2
                lines.append(
                    f"  iter {e['iteration']}  {name:<14} accuracy {ev['accuracy']:.3f} "
                    f"({ev['accuracy'] - first['accuracy']:+.3f})  elo {ev['elo']:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]"
                )
    return "\n".join(lines)
