"""What the report page shows, gathered from a run's ``RunView`` through the queries the other
commands use (``flywheel elo``, ``arms``, ``data ls``): one typed record, no HTML."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from flywheel.face import queries
from flywheel.face.dataview import rows_by_target
from flywheel.ground import reports
from flywheel.ground.records import WINNERS, PlayerVersion, base_name
from flywheel.ground.run_view import RunView


@dataclass(frozen=True)
class Header:
    """The run at a glance: its name, what it was set up to do, what it did and when."""

    run: str
    world: str
    targets: list[str]
    opponents: list[str]
    judge: str
    policy: str
    iterations: int  # as configured
    done: list[int]  # the iterations in summary.json
    created: str | None  # manifest.json's timestamp
    wall_s: float  # the iterations' wall time, added up


@dataclass(frozen=True)
class ReportData:
    """Every section's figures; an empty field is a section without data in this run."""

    header: Header
    leaderboard: list[dict[str, Any]]  # the latest eval leaderboard's rows
    leaderboard_iteration: int | None
    progress: dict[str, list[dict[str, Any]]]  # target -> (iteration, model, accuracy, elo, lower, upper)
    references: dict[str, dict[str, Any]]  # opponent -> its last evaluation
    categories: list[dict[str, Any]]  # model, overall, one column per category
    category_names: list[str]
    category_measure: str  # what the category cells are: eval accuracy or win rate
    games: list[dict[str, Any]]  # games world: results against each opponent
    matrix: queries.WinMatrix
    arms: queries.ArmsReport | None
    opponents: list[dict[str, Any]]  # iteration, target, opponent, battles, share
    judge: list[dict[str, Any]]  # reports.judge_rows
    cascade: list[dict[str, Any]]  # reports.cascade_rows (judge.kind cascade)
    verdicts: list[dict[str, Any]]  # iteration, phase, one count per verdict, invalid, flipped
    judge_usage: list[dict[str, Any]]  # iteration, player, judged, judge_calls, cache_hits
    datasets: list[dict[str, Any]]  # iteration, dataset, target, rows
    own_answers: list[dict[str, Any]]  # reports.own_answer_rows: what RL sampled, per iteration and target


def gather(view: RunView) -> ReportData:
    """The page's figures for the run ``view`` reads."""
    summary = view.summary
    entries = summary.get("iterations", [])
    try:
        last, board = queries.latest_board(view)
    except queries.QueryError:
        last, board = None, []
    categories, names, measure = _categories(view)
    try:
        arms: queries.ArmsReport | None = queries.arms_report(view, None)
    except queries.QueryError:
        arms = None
    return ReportData(
        header=_header(view), leaderboard=board, leaderboard_iteration=last,
        progress=progress_points(summary), references=(entries[-1].get("opponents_eval", {}) if entries else {}),
        categories=categories, category_names=names, category_measure=measure, games=reports.games_rows(summary),
        matrix=queries.win_matrix(view), arms=arms, opponents=opponent_shares(view, [e["iteration"] for e in entries]),
        judge=reports.judge_rows(summary), cascade=reports.cascade_rows(summary),
        verdicts=verdict_counts(view, sorted(view.log_shards("judgments"))),
        judge_usage=judge_usage(summary), datasets=rows_by_target(view), own_answers=reports.own_answer_rows(summary))


def _header(view: RunView) -> Header:
    cfg, summary = view.config, view.summary
    entries = summary.get("iterations", [])
    return Header(run=summary.get("run_id") or cfg.run.name or view.root.name, world=cfg.world.kind,
                  targets=[p.name for p in cfg.targets], opponents=[p.name for p in cfg.opponents],
                  judge=cfg.judge.kind, policy=cfg.select.policy, iterations=cfg.run.iterations,
                  done=[e["iteration"] for e in entries], created=view.manifest.get("created"),
                  wall_s=round(sum(e.get("wall_s", 0.0) for e in entries), 1))


def progress_points(summary: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each target's eval accuracy and Elo (with its interval) per iteration, as evaluated then:
    the figures of ``flywheel run``'s progress table."""
    out: dict[str, list[dict[str, Any]]] = {}
    for e in summary.get("iterations", []):
        for name, ev in e.get("eval", {}).items():
            if base_name(name) in summary.get("targets", []):
                lower, upper = ev.get("elo_ci") or (ev["elo"], ev["elo"])
                out.setdefault(base_name(name), []).append(
                    {"iteration": e["iteration"], "model": name, "accuracy": ev["accuracy"], "elo": ev["elo"],
                     "lower": lower, "upper": upper})
    return out


def _categories(view: RunView) -> tuple[list[dict[str, Any]], list[str], str]:
    """Eval accuracy per category (every target version, every opponent) where the run measured
    it; else each model's eval win rate per category from the per-category leaderboards."""
    rows, cats = reports.category_rows(view.summary)
    if cats:
        return rows, cats, "eval accuracy"
    boards = queries.category_boards(view)
    models = sorted({r["model"] for board in boards.values() for r in board})
    by = {(c, r["model"]): r["win_rate"] for c, board in boards.items() for r in board}
    table = [{"model": m, **{c: by[(c, m)] for c in boards if (c, m) in by}} for m in models]
    return table, sorted(boards), "eval win rate (ties count half)"


def opponent_shares(view: RunView, iterations: list[int]) -> list[dict[str, Any]]:
    """Per iteration and target, how many of the planned train battles went to each opponent
    (the other seat: an opponent, or an earlier version in self-play), and their share."""
    rows = []
    for k in iterations:
        counts: dict[str, Counter[str]] = {}
        for s in view.plan(k) or []:
            seats = sorted((s.model_a, s.model_b), key=lambda m: -1 if PlayerVersion.parse(m).k is None
                           else PlayerVersion.parse(m).k)  # the newest target version plays; the other seat is met
            counts.setdefault(base_name(seats[1]), Counter())[seats[0]] += 1
        for target, c in sorted(counts.items()):
            total = sum(c.values())
            rows += [{"iteration": k, "target": target, "opponent": o, "battles": n, "share": round(n / total, 4)}
                     for o, n in c.most_common()]
    return rows


def verdict_counts(view: RunView, iterations: list[int]) -> list[dict[str, Any]]:
    """Per iteration and phase, the judgments by verdict, the invalid ones, and those whose two
    orders disagreed (``flipped``, where both orders were judged)."""
    rows = []
    for k in iterations:
        for phase in ("train", "eval"):
            found = view.judgments(k, phase).values()
            if not found:
                continue
            by = Counter(j.winner for j in found)
            rows.append({"iteration": k, "phase": phase, "judged": len(found), **{w: by.get(w, 0) for w in WINNERS},
                         "invalid": by.get(None, 0), "flipped": sum(1 for j in found if j.flip)})
    return rows


def judge_usage(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per iteration, each LLM judge's calls and verdict cache hits (as the judge stage recorded them)."""
    return [{"iteration": e["iteration"], "player": p, "judged": u.get("judged", 0), "judge_calls": u.get("judge_calls", 0),
             "cache_hits": u.get("cache_hits", 0)}
            for e in summary.get("iterations", []) for p, u in e.get("usage", {}).items() if p.startswith("judge:")]
