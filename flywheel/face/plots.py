"""Pictures of a run: Elo history with CI bands, and a win-rate heatmap (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flywheel.ground.records import PlayerVersion


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the headless backend; a RuntimeError (one line) where matplotlib is
    not installed."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install 'flywheel[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_matrix(ax: Any, rows: Sequence[str], cols: Sequence[str], values: Sequence[Sequence[float | None]],
                title: str) -> Any:
    """``values[i][j]`` in [0, 1] as a red-to-green heatmap on ``ax``, each cell written (None: blank);
    returns the image (for a colour bar)."""
    import numpy as np

    m = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float).reshape(len(rows), len(cols))
    im = ax.imshow(m, cmap="RdYlGn", vmin=0, vmax=1)
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    for i in range(len(rows)):
        for j in range(len(cols)):
            if not np.isnan(m[i, j]):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7)
    ax.set_title(title)
    return im


def plot_run(history: dict[str, list[dict[str, Any]]], targets: list[str], models: list[str],
             win_rate: list[list[float | None]], out: Path) -> Path:
    """``history``: iteration -> leaderboard rows. Each target is drawn as its newest version per
    iteration (``t@k`` at iteration k); every other model as itself. ``win_rate[i][j]``: the
    score of ``models[i]`` against ``models[j]``."""
    plt = pyplot()
    fig, (ax, hm) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [1.1, 1]})
    iters = sorted(history, key=int)
    lines: dict[str, list[tuple[int, dict]]] = {}
    for k in iters:
        for row in history[k]:
            base, version = PlayerVersion.parse(row["model"])
            if base in targets:
                if version == int(k):
                    lines.setdefault(base, []).append((int(k), row))
            else:
                lines.setdefault(row["model"], []).append((int(k), row))
    for name, pts in sorted(lines.items()):
        x = [p[0] for p in pts]
        y = [p[1]["rating"] for p in pts]
        style = "-o" if name in targets else "--"
        (line,) = ax.plot(x, y, style, label=f"{name}@k" if name in targets else name, lw=2.2 if name in targets else 1.2)
        ax.fill_between(x, [p[1]["lower"] for p in pts], [p[1]["upper"] for p in pts], color=line.get_color(), alpha=0.18)
    ax.set_xlabel("iteration")
    ax.set_ylabel("Elo (Bradley-Terry, 95% CI)")
    ax.set_title("Eval Elo history")
    ax.set_xticks([int(k) for k in iters])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)

    im = draw_matrix(hm, models, models, win_rate, "Score of row vs column (ties count half), all eval battles")
    fig.colorbar(im, ax=hm, fraction=0.046)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
