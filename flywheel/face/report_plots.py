"""The report page's pictures, each a PNG as bytes (matplotlib, headless): ratings with their
intervals, lines across iterations, a matrix as a heatmap, shares and counts as bars."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from flywheel.face.plots import draw_matrix, pyplot

DPI = 90


def _png(fig: Any) -> bytes:
    plt = pyplot()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


def intervals_png(rows: Sequence[Mapping[str, Any]], highlight: Sequence[str]) -> bytes:
    """Leaderboard ``rows`` (model, rating, lower, upper) as points with their interval bars, best
    on top; a model whose base name is in ``highlight`` (the targets) is drawn in another colour."""
    plt = pyplot()
    rows = sorted(rows, key=lambda r: r["rating"])
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.38 * len(rows)))
    for i, r in enumerate(rows):
        mine = r["model"].partition("@")[0] in highlight
        ax.errorbar(r["rating"], i, xerr=[[r["rating"] - r["lower"]], [r["upper"] - r["rating"]]], fmt="o",
                    color="tab:red" if mine else "tab:blue", capsize=4, lw=2 if mine else 1.2)
    ax.set_yticks(range(len(rows)), [r["model"] for r in rows], fontsize=9)
    ax.set_xlabel("Elo (Bradley-Terry), with its 95% interval")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def progress_png(series: Mapping[str, Sequence[Mapping[str, Any]]], references: Mapping[str, Mapping[str, Any]]) -> bytes:
    """Left, each target's eval accuracy per iteration; right, its Elo with the interval as a
    band. ``series``: target -> points (iteration, accuracy, elo, lower, upper); ``references``:
    opponent -> its last evaluation (accuracy, elo), drawn as dashed levels."""
    plt = pyplot()
    fig, (acc, elo) = plt.subplots(1, 2, figsize=(12, 4.2))
    for name, pts in sorted(series.items()):
        x = [p["iteration"] for p in pts]
        acc.plot(x, [p["accuracy"] for p in pts], "-o", lw=2, label=name)
        (line,) = elo.plot(x, [p["elo"] for p in pts], "-o", lw=2, label=name)
        elo.fill_between(x, [p["lower"] for p in pts], [p["upper"] for p in pts], color=line.get_color(), alpha=0.2)
    for ax, key in ((acc, "accuracy"), (elo, "elo")):
        levels: dict[float, list[str]] = {}
        for name, ev in sorted(references.items()):
            levels.setdefault(round(ev[key], 2), []).append(name)
        for y, names in levels.items():  # opponents at one level share its line and label
            ax.axhline(y, ls="--", lw=1, color="grey")
            ax.annotate(", ".join(names), (0, y), xycoords=("axes fraction", "data"), fontsize=7, color="dimgrey",
                        xytext=(3, 2), textcoords="offset points")
    ticks = sorted({p["iteration"] for pts in series.values() for p in pts})
    for ax, title in ((acc, "eval accuracy"), (elo, "Elo (95% interval)")):
        ax.set_xticks(ticks)
        ax.set_xlabel("iteration")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _png(fig)


def matrix_png(rows: Sequence[str], cols: Sequence[str], values: Sequence[Sequence[float | None]], title: str) -> bytes:
    """A heatmap of ``values[i][j]`` in [0, 1], each cell written; None cells left blank."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(2.5 + 0.7 * len(cols), 1.6 + 0.45 * len(rows)))
    im = draw_matrix(ax, rows, cols, values, title)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _png(fig)


def shares_png(panels: Mapping[str, Sequence[tuple[str, float]]], xlabel: str) -> bytes:
    """One horizontal bar chart per panel (title -> (label, share) pairs), side by side."""
    plt = pyplot()
    height = 1.2 + 0.3 * max(len(bars) for bars in panels.values())
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), height), squeeze=False)
    for ax, (title, bars) in zip(axes[0], panels.items()):
        ax.barh(range(len(bars)), [v for _, v in bars], color="tab:blue")
        ax.set_yticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def bars_png(groups: Sequence[str], series: Mapping[str, Sequence[float]], ylabel: str, stacked: bool = False) -> bytes:
    """Bars per group (an iteration): one bar per series side by side, or stacked."""
    plt = pyplot()
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(5.0, 1.0 + 0.9 * len(groups) * (1 if stacked else max(len(series), 1) / 2)), 3.6))
    x = np.arange(len(groups))
    width = 0.7 if stacked else 0.8 / max(len(series), 1)
    bottom = np.zeros(len(groups))
    for i, (name, values) in enumerate(series.items()):
        v = np.asarray(values, dtype=float)
        ax.bar(x if stacked else x + (i - (len(series) - 1) / 2) * width, v, width, bottom=bottom if stacked else None,
               label=name)
        bottom = bottom + v
    ax.set_xticks(x, groups)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _png(fig)
