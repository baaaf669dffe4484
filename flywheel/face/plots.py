"""Pictures of a run: Elo history with CI bands, and a win-rate heatmap (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flywheel.ground.records import PlayerVersion


def plot_run(history: dict[str, list[dict[str, Any]]], targets: list[str], models: list[str],
             win_rate: list[list[float | None]], out: Path) -> Path:
    """``history``: iteration -> leaderboard rows. Each target is drawn as its newest version per
    iteration (``t@k`` at iteration k); every other model as itself. ``win_rate[i][j]``: the
    score of ``models[i]`` against ``models[j]``."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'flywheel[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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

    m = np.array([[np.nan if v is None else v for v in row] for row in win_rate], dtype=float)
    im = hm.imshow(m, cmap="RdYlGn", vmin=0, vmax=1)
    hm.set_xticks(range(len(models)), models, rotation=60, ha="right", fontsize=8)
    hm.set_yticks(range(len(models)), models, fontsize=8)
    for i in range(len(models)):
        for j in range(len(models)):
            if not np.isnan(m[i, j]):
                hm.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7)
    hm.set_title("Score of row vs column (ties count half), all eval battles")
    fig.colorbar(im, ax=hm, fraction=0.046)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
