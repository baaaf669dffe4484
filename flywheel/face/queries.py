"""Read-only queries over a run, as the CLI prints them: leaderboards (latest, history, subsets,
categories, style-controlled), length-controlled win rates, where the battles went, plots and the
end-of-run report. Each takes the command's ``RunView`` (``flywheel/ground/run_view.py``), opened
once; nothing here writes into the run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.face.plots import plot_run
from flywheel.ground import reports
from flywheel.ground.run_view import RunView
from flywheel.ground.style import style_of
from flywheel.maths.leaderboard import category_boards as boards
from flywheel.maths.leaderboard import RatingOptions, columns, rate
from flywheel.maths.length_control import LCOptions, lc_rows
from flywheel.maths.style_control import StyleOptions, StyleReport, style_control


class QueryError(ValueError):
    """The run directory does not have what the query asks for."""


def latest_board(view: RunView) -> tuple[int, list[dict[str, Any]]]:
    """The newest iteration's eval leaderboard rows."""
    done = view.leaderboard_iterations()
    if not done:
        raise QueryError(f"{view.root}: no ratings yet (no iteration has been rated)")
    return done[-1], view.board(done[-1])


def history_rows(view: RunView) -> list[dict[str, Any]]:
    """Every model version's Elo per iteration."""
    hist = view.history
    return [{"iteration": int(k), **r} for k in sorted(hist, key=int) for r in hist[k]]


def category_boards(view: RunView) -> dict[str, list[dict[str, Any]]]:
    """Eval leaderboards per task category, over all of a run's eval battles."""
    cfg = view.config
    return boards(view.judged("eval"), cfg.rating, cfg.evaluate.bootstrap_seed)


def lc_board(view: RunView, baseline: str) -> list[dict[str, Any]]:
    """Each model's length-controlled win rate against ``baseline`` over the run's eval battles
    (AlpacaEval's; ``flywheel/maths/length_control.py``), with the run's bootstrap settings."""
    played = sorted({m for b in view.battles("eval") for m in (b.model_a, b.model_b)})
    if baseline not in played:
        raise QueryError(f"--lc-baseline {baseline!r} is not in the run's eval battles; "
                         f"{'its models: ' + ', '.join(played) if played else 'it has none'}")
    cfg = view.config
    rows = lc_rows(view.judged("eval"), baseline,
                   LCOptions(cfg.rating.bootstrap_rounds, cfg.rating.ci, cfg.evaluate.bootstrap_seed))
    if not rows:
        raise QueryError(f"--lc-baseline {baseline!r} has no judged eval battles against another model")
    return rows


def style_board(view: RunView) -> StyleReport:
    """The style-controlled leaderboard of the run's eval battles (Chatbot Arena's style control:
    ``flywheel/maths/style_control.py``), each answer's style measured from its text, with the
    run's ``rating:`` settings and bootstrap seed. A battle of a version against itself is left out."""
    import numpy as np

    judged = [j for j in view.judged("eval") if j.battle.model_a != j.battle.model_b]
    if not judged:
        raise QueryError(f"{view.root}: no judged eval battles between two models yet")
    cfg = view.config
    r = cfg.rating
    style = [np.array([style_of(getattr(j.battle, f"response_{s}")).vector() for j in judged]) for s in ("a", "b")]
    options = StyleOptions(r.bootstrap_rounds, r.ci, cfg.evaluate.bootstrap_seed, r.scale, r.base, r.init)
    return style_control([j.battle.model_a for j in judged], [j.battle.model_b for j in judged],
                         [j.winner for j in judged], style[0], style[1], options)


@dataclass(frozen=True)
class ArmsReport:
    """Where one iteration's battles went: per target its prompt arms by share; with
    ``select.prompt_floor: auto``, per round the share each target spread evenly over the cells."""

    iteration: int
    policy: str
    sections: dict[str, list[dict[str, Any]]]
    floors: dict[int, dict[str, float]]

    def header(self) -> str:
        text = f"iteration {self.iteration}, policy {self.policy}"
        if self.floors:
            text += "; prompt floor (auto) per round: " + "; ".join(
                f"r{r} " + ", ".join(f"{t} {f:.2f}" for t, f in by_target.items()) for r, by_target in self.floors.items())
        return text


def arms_report(view: RunView, iteration: int | None) -> ArmsReport:
    """The bandit record of an iteration (default: the latest) from summary.json and the select stages."""
    entries = [e for e in view.summary.get("iterations", []) if e.get("bandit")]
    if iteration is not None:
        entries = [e for e in entries if e["iteration"] == iteration]
    if not entries:
        raise QueryError(f"{view.root}: no bandit record{'' if iteration is None else f' for iteration {iteration}'}")
    e = entries[-1]
    k = e["iteration"]
    rounds = view.config.select.rounds
    selects = {r: view.stage(k, f"select-r{r}") or {} for r in range(1, rounds + 1)}
    return ArmsReport(k, selects[1].get("policy", "?"),
                      {t: sorted(rows, key=lambda r: -r["share"]) for t, rows in e["bandit"].items()},
                      {r: d["floors"] for r, d in selects.items() if d.get("floors")})


@dataclass(frozen=True)
class WinMatrix:
    """Over all of a run's judged eval battles: ``win_rate[i][j]``, the score of ``models[i]``
    against ``models[j]`` (ties count half; None where they never met), and ``battles[i][j]``."""

    models: list[str]
    win_rate: list[list[float | None]]
    battles: list[list[int]]


def win_matrix(view: RunView) -> WinMatrix:
    """The eval win-rate and battle-count matrices (no models: no eval battles judged yet)."""
    rep = rate(*columns(view.judged("eval")), RatingOptions(rounds=0))
    return WinMatrix(rep.models, rep.win_rate, rep.battle_counts)


def plot(view: RunView, out: Path) -> None:
    """A PNG: Elo history with CI bands, and the eval win-rate heatmap."""
    m = win_matrix(view)
    plot_run(view.history, view.summary.get("targets", []), m.models, m.win_rate, out)


def judge_sections(view: RunView) -> dict[str, list[dict[str, Any]]]:
    """A run's judge section (``flywheel elo --judge``): the judge's diagnostics per iteration and,
    for a cascade, its tiers per iteration."""
    summary = view.summary
    if not summary.get("iterations"):
        raise QueryError(f"{view.root}: no finished iteration yet (summary.json)")
    out = {"diagnostics": reports.judge_rows(summary)}
    if cascade := reports.cascade_rows(summary):
        out["cascade"] = cascade
    return out


TURNS_HEADING = ("\nEval accuracy by turn of the conversations (turn_2_own_answer: turn 2 on the model's own first "
                 "answer, its reference built on that answer; turn_2_fixed: a second turn fixed up front, the same text "
                 "and reference for every model; 95% intervals):\n")
VALIDATION_HEADING = ("\nValidation accuracy by category (the split that steers the run: promotion, allocation, "
                      "tuning), every target version next to every opponent:\n")
OWN_ANSWERS_HEADING = ("\nLearning from its own answers per iteration (sampled: before training; flat: the share of "
                       "groups whose answers all got one reward, nothing to learn; failed: rewards that failed; "
                       "per_step: answers generated per optimizer step):\n")


def result_text(view: RunView) -> str:
    """What ``flywheel run`` prints at the end: leaderboard, progress, categories, allocation,
    judge diagnostics and usage."""
    summary = view.summary
    last = summary["iterations"][-1]["iteration"]
    rows = view.board(last)
    parts = [f"\nrun directory: {view.root}",
             f"\nEval leaderboard after iteration {last} (Bradley-Terry Elo, 95% CI):\n",
             reports.text_table(rows, reports.columns_for(rows)),
             "\nTarget progress on the held-out eval split:\n", reports.progress_table(summary),
             "\nEval accuracy by category: every target version next to every opponent:\n",
             reports.category_table(summary)]
    turns = reports.turn_table(summary)
    if turns:
        parts += [TURNS_HEADING, turns]
    games = reports.games_table(summary)
    if games:
        parts[-2:] = ["\nGames against each opponent on the held-out eval positions (validation_wd: win-or-draw "
                      "on the validation positions):\n", games]
    if not games and reports.has_opponent_validation(summary):
        parts += [VALIDATION_HEADING, reports.category_table(summary, "validation")]
    if len(summary.get("targets", [])) > 1:
        parts += ["\nCompute allocation for the next iteration (ModelArena):\n", reports.allocation_lines(summary)]
    own = reports.own_answer_lines(summary)
    if own:
        parts += [OWN_ANSWERS_HEADING, own]
    parts += ["\nJudge diagnostics per iteration:\n", reports.judge_lines(summary)]
    cascade = reports.cascade_lines(summary)
    if cascade:
        parts += ["\nJudge cascade per iteration and tier (agreement: with the last tier, on audited battles):\n",
                  cascade]
    usage = reports.usage_lines(summary)
    if usage:
        parts += ["\nUsage over the run (API calls, tokens, cost):\n", usage]
    return "\n".join(parts)
