"""Leaderboards and progress tables as text, markdown, CSV and JSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from flywheel.ground.records import base_name

COLUMNS = ("rank", "model", "rating", "lower", "upper", "battles", "wins", "losses", "ties", "win_rate")
HISTORY_COLUMNS = ("iteration", "rank", "model", "rating", "lower", "upper", "battles")


def columns_for(rows: Sequence[dict[str, Any]], base: Sequence[str] = COLUMNS) -> tuple[str, ...]:
    """``base`` plus ``group`` and ``note`` where some row needs them."""
    cols = tuple(base)
    if any(r.get("group", 1) != 1 for r in rows):
        cols += ("group",)
    if any(r.get("note") for r in rows):
        cols += ("note",)
    cols += tuple(sorted({c for r in rows for c in r if c.startswith("wd_vs_")}))  # games: win-or-draw rates
    cols += tuple(c for c in SCORE_COLUMNS if any(r.get(c) is not None for r in rows))  # hanabi: team scores
    return cols


# Hanabi's eval rows: a team's mean score on the latest iteration's eval deals and its 95% interval
SCORE_COLUMNS = ("mean_score", "score_low", "score_high")


def cell(v: Any) -> str:
    """A value as a table shows it: floats to three significant places, others as text."""
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def text_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    cells = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    left = {i for i, c in enumerate(columns) if c in ("model", "note", "category", "arm", "player", "judge", "target", "policy",
                                                       "opponent", "group")}
    line = lambda vals: "  ".join(v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths)))  # noqa: E731
    return "\n".join([line(list(columns)), line(["-" * w for w in widths])] + [line(c) for c in cells])


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "|".join("---" for _ in columns) + "|\n"
    return head + "".join("| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |\n" for r in rows)


def csv_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def render(rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[str] | None = None) -> str:
    cols = tuple(columns) if columns else columns_for(rows)
    if fmt == "json":
        return json.dumps(list(rows), indent=2)
    if fmt == "md":
        return markdown_table(rows, cols)
    if fmt == "csv":
        return csv_table(rows, cols)
    return text_table(rows, cols)


def render_sections(sections: dict[str, Sequence[dict[str, Any]]], fmt: str, key: str = "category",
                    columns: Sequence[str] | None = None) -> str:
    """Several leaderboards (one per category, subset, ...): a flat list with a ``key`` column in
    JSON and CSV, a titled table per section in text and markdown."""
    if fmt in ("json", "csv"):
        flat = [{key: name, **r} for name, rows in sections.items() for r in rows]
        cols = (key,) + (tuple(columns) if columns else columns_for(flat))
        return json.dumps(flat, indent=2) if fmt == "json" else csv_table(flat, cols)
    parts = []
    for name, rows in sections.items():
        title = f"## {key}: {name}" if fmt == "md" else f"[{key}: {name}]"
        parts.append(title + "\n\n" + render(rows, fmt, columns))
    return "\n\n".join(parts)


def render_matrix(models: Sequence[str], matrix: Sequence[Sequence[Any]], fmt: str, title: str) -> str:
    """A square model x model matrix (row model vs column model)."""
    if fmt == "json":
        return json.dumps({"title": title, "models": list(models), "matrix": [list(r) for r in matrix]}, indent=2)
    rows = [{"model": m, **{c: ("" if v is None else v) for c, v in zip(models, row)}} for m, row in zip(models, matrix)]
    cols = ("model", *models)
    if fmt == "csv":
        return csv_table(rows, cols)
    if fmt == "md":
        return f"## {title}\n\n" + markdown_table(rows, cols)
    return f"[{title}]\n" + text_table(rows, cols)


def progress_table(summary: dict[str, Any]) -> str:
    """Each target's eval accuracy and Elo per iteration, with the change since the baseline, its
    validation accuracy (what steers the run), whether it was promoted, and the version in use."""
    lines = []
    for t in summary.get("targets", []):
        lines.append(f"{t}:")
        first = None
        for e in summary.get("iterations", []):
            for name, ev in e.get("eval", {}).items():
                if base_name(name) != t:
                    continue
                first = first or ev
                ci = ev.get("elo_ci") or [float("nan")] * 2
                val = (ev.get("validation") or {}).get("accuracy")
                decision = (e.get("promotion") or {}).get(t) or {}
                kept = "" if decision.get("promoted", True) else f"  not promoted: {decision['incumbent']} stays"
                lines.append(
                    f"  iter {e['iteration']}  {name:<14} accuracy {ev['accuracy']:.3f} "
                    f"({ev['accuracy'] - first['accuracy']:+.3f})  elo {ev['elo']:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]"
                    + (f"  validation {val:.3f}" if val is not None else "") + kept
                )
        current = ((summary.get("iterations") or [{}])[-1].get("current") or {}).get(t)
        if current:
            lines.append(f"  in use: {current}")
    return "\n".join(lines)


def in_use_eval(summary: dict[str, Any], entry: dict[str, Any], target: str) -> dict[str, Any]:
    """The eval figures of the version ``target`` kept after ``entry``'s iteration (the newest
    version in runs made before promotion was recorded)."""
    version = (entry.get("current") or {}).get(target) or f"{target}@{entry['iteration']}"
    return next(e["eval"][version] for e in summary["iterations"] if version in e.get("eval", {}))


def category_rows(summary: dict[str, Any], split: str = "eval") -> tuple[list[dict[str, Any]], list[str]]:
    """Accuracy per category on ``split`` (``eval``: held out; ``validation``: what steers the run)
    of every target version (by iteration) and of every opponent (as last evaluated): (rows with
    ``model``, ``overall`` and one column per category, the category columns). A version its target
    did not promote is marked so. On validation, models without its figures are left out."""
    def figures(ev: dict[str, Any]) -> dict[str, Any] | None:
        return ev if split == "eval" else ev.get("validation")

    rows: list[dict[str, Any]] = []
    for e in summary.get("iterations", []):
        rejected = {d["candidate"] for d in (e.get("promotion") or {}).values() if not d["promoted"]}
        rows += [{"model": name + (" (not promoted)" if name in rejected else ""), "overall": f["accuracy"],
                  **f.get("accuracy_by_category", {})} for name, ev in e.get("eval", {}).items()
                 if (f := figures(ev))]
    last = (summary.get("iterations") or [{}])[-1]
    rows += [{"model": name, "overall": f["accuracy"], **f.get("accuracy_by_category", {})}
             for name, ev in sorted(last.get("opponents_eval", {}).items()) if (f := figures(ev))]
    cats = sorted({c for r in rows for c in r} - {"model", "overall"})
    return rows, cats


def category_table(summary: dict[str, Any], split: str = "eval") -> str:
    """``category_rows`` as a text table: every target version next to every opponent."""
    rows, cats = category_rows(summary, split)
    return text_table(rows, ["model", "overall", *cats]) if rows else ""


def has_opponent_validation(summary: dict[str, Any]) -> bool:
    """Whether the opponents were scored on the validation split (single-turn task and prompt worlds)."""
    opponents = ((summary.get("iterations") or [{}])[-1]).get("opponents_eval") or {}
    return bool(opponents) and all(ev.get("validation") for ev in opponents.values())


def turn_table(summary: dict[str, Any]) -> str:
    """Conversations: held-out eval accuracy per user turn of every target version (by iteration)
    and of every opponent (as last evaluated); "" for a single-turn run. Where turn 2 was measured
    two ways, ``turn_2_own_answer`` (on the model's own first answer) and ``turn_2_fixed`` (the
    fixed second turn, the same for every model) replace ``turn_2``, each with its 95% interval."""
    last = (summary.get("iterations") or [{}])[-1]
    evals = [(name, ev) for e in summary.get("iterations", []) for name, ev in e.get("eval", {}).items()]
    evals += sorted(last.get("opponents_eval", {}).items())
    rows = []
    for name, ev in evals:
        if not ev.get("accuracy_by_turn"):
            continue
        row = {"model": name, **{f"turn_{i}": a for i, a in enumerate(ev["accuracy_by_turn"], 1)}}
        two = ev.get("turn2")
        if two:
            del row["turn_2"]
            row["turn_2_own_answer"] = with_interval(two["own_answer"])
            row["turn_2_fixed"] = with_interval(two["fixed"]) if two.get("fixed") else "-"
        rows.append(row)
    order = {"turn_2_own_answer": 1, "turn_2_fixed": 2}
    cols = sorted({c for row in rows for c in row} - {"model"}, key=lambda c: (int(c.split("_")[1]), order.get(c, 0)))
    return text_table(rows, ["model", *cols]) if rows else ""


def with_interval(acc: dict[str, Any]) -> str:
    """An accuracy with its 95% interval: ``0.556 [0.504, 0.607]``."""
    return f"{acc['accuracy']:.3f} [{acc['lower']:.3f}, {acc['upper']:.3f}]"


def games_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Games world: every target version's eval results against each opponent (win, draw, loss,
    win-or-draw) and its validation win-or-draw rate."""
    rows = []
    for e in summary.get("iterations", []):
        for name, ev in e.get("eval", {}).items():
            for opp, g in (ev.get("games") or {}).items():
                rows.append({"model": name, "opponent": opp, **g,
                             "validation_wd": (ev.get("validation") or {}).get("accuracy")})
    return rows


def games_table(summary: dict[str, Any]) -> str:
    rows = games_rows(summary)
    cols = ["model", "opponent", "games", "win", "draw", "loss", "win_or_draw", "validation_wd"]
    if any("mean_score" in r for r in rows):  # hanabi: each team's mean score on the eval deals
        cols = ["model", "opponent", "games", "mean_score", "ci_low", "ci_high", "validation_wd"]
    return text_table(rows, cols) if rows else ""


def usage_lines(summary: dict[str, Any]) -> str:
    """Per player, totals over the run of generations, failures, API calls, retries, tokens, cost."""
    totals: dict[str, dict[str, float]] = {}
    for e in summary.get("iterations", []):
        for player, u in e.get("usage", {}).items():
            acc = totals.setdefault(player, {})
            for k, v in u.items():
                acc[k] = acc.get(k, 0) + v
    rows = [{"player": p, **{k: round(v, 6) for k, v in u.items()}} for p, u in sorted(totals.items())
            if u.get("calls")]
    if not rows:
        return ""
    cols = ("player", "calls", "retries", "failures", "input_tokens", "output_tokens", "cost_usd")
    return text_table(rows, cols)


JUDGE_COLUMNS = ("iteration", "judge", "judged", "invalid", "flip_rate", "longer_wins", "self_pref", "kappa")


def judge_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per iteration: the judge's invalid verdicts, position-flip rate, length bias,
    self-preference and panel agreement (see judges/diagnostics.py); ``-`` where not measured."""
    rows = []
    for e in summary.get("iterations", []):
        d = e.get("judge") or {}
        if not d.get("judged"):
            continue
        sp = d.get("self_preference") or {}
        panel = d.get("panel") or {}
        rows.append({"iteration": e["iteration"], "judge": d["judge"], "judged": d["judged"], "invalid": d["invalid"],
                     "flip_rate": _blank(d["flip_rate"]["rate"]), "longer_wins": _blank(d["length_bias"]["longer_wins"]),
                     "self_pref": _blank(sp.get("excess")), "kappa": _blank(panel.get("kappa"))})
    return rows


def judge_lines(summary: dict[str, Any]) -> str:
    """``judge_rows`` as a text table."""
    rows = judge_rows(summary)
    return text_table(rows, JUDGE_COLUMNS) if rows else "(no judgments)"


CASCADE_COLUMNS = ("iteration", "tier", "judge", "asked", "decided", "escalated_share", "cost_usd", "per_decisive_usd",
                   "audited", "agreement", "ci_low", "ci_high")


def cascade_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per iteration and cascade tier (judge.kind cascade): battles asked and decided, the share
    escalated, cost and cost per decisive verdict, agreement with the last tier on the audited
    battles and its 95% interval; then the whole cascade (tier ``all``)."""
    rows = []
    for e in summary.get("iterations", []):
        c = (e.get("judge") or {}).get("cascade")
        if not c:
            continue
        for t in c["tiers"].values():
            low, high = t.get("agreement_ci") or (None, None)
            rows.append({"iteration": e["iteration"], **{k: _blank(t.get(k)) for k in CASCADE_COLUMNS[1:9]},
                         "agreement": _blank(t.get("agreement")), "ci_low": _blank(low), "ci_high": _blank(high)})
        total = c["total"]
        rows.append({"iteration": e["iteration"], "tier": "all", "judge": "cascade", "asked": total["judged"],
                     "decided": total["judged"] - total["invalid"], "escalated_share": "-",
                     "cost_usd": total["cost_usd"], "per_decisive_usd": _blank(total["per_decisive_usd"]),
                     "audited": "-", "agreement": "-", "ci_low": "-", "ci_high": "-"})
    return rows


def cascade_lines(summary: dict[str, Any]) -> str:
    """``cascade_rows`` as a text table (empty when the judge is no cascade)."""
    rows = cascade_rows(summary)
    return text_table(rows, CASCADE_COLUMNS) if rows else ""


OWN_ANSWER_COLUMNS = ("iteration", "target", "method", "sampled", "sampled_flat", "trainer_answers", "trainer_flat",
                      "failed", "mean_reward", "per_step")


def own_answer_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per iteration and target that learnt from its own answers: the answers sampled before
    training and the share of their groups flat (every answer one reward: nothing to learn), a
    GRPO or RLOO trainer's answers, its flat share and mean reward, the rewards that failed (both
    counts), and the answers generated per optimizer step; ``-`` where not measured."""
    rows = []
    for e in summary.get("iterations", []):
        for target, t in (e.get("training") or {}).items():
            sampled, rewards = (t or {}).get("sampling") or {}, (t or {}).get("rewards") or {}
            if not sampled and not rewards:
                continue
            trainer = rewards.get("scored", 0) + rewards.get("failed", 0)
            answers, steps = sampled.get("answers", 0) + trainer, (e.get("train_steps") or {}).get(target, 0)
            rows.append({"iteration": e["iteration"], "target": target, "method": t.get("method", "-"),
                         "sampled": sampled.get("answers", "-"), "sampled_flat": _blank(sampled.get("flat_groups")),
                         "trainer_answers": trainer if rewards else "-",
                         "trainer_flat": _blank(rewards.get("flat_groups")),
                         "failed": sampled.get("failed", 0) + rewards.get("failed", 0),
                         "mean_reward": _blank(rewards.get("mean")),
                         "per_step": round(answers / steps, 1) if steps else "-"})
    return rows


def own_answer_lines(summary: dict[str, Any]) -> str:
    """``own_answer_rows`` as a text table (empty where no target learnt from its own answers)."""
    rows = own_answer_rows(summary)
    return text_table(rows, OWN_ANSWER_COLUMNS) if rows else ""


def _blank(v: Any) -> Any:
    return "-" if v is None else v


def allocation_lines(summary: dict[str, Any]) -> str:
    """Per iteration and target: the next iteration's share, steps and battles, and the learning
    rate (accuracy gain per unit of compute) behind them."""
    rows = []
    for e in summary.get("iterations", []):
        a = e.get("allocation") or {}
        for t, share in (a.get("shares") or {}).items():
            weights = {w_t: w for g in (e.get("merge") or {}).get("groups", []) if len(g["targets"]) > 1
                       for w_t, w in g["weights"].items()}
            rows.append({"iteration": e["iteration"], "target": t, "policy": a.get("policy", "uniform"),
                         "acting": a.get("acting", False), "share": share, "train_steps": a["train_steps"][t],
                         "battles": a["battles"][t], "learning_rate": a.get("learning_rates", {}).get(t, 0.0),
                         "merge_weight": weights.get(t, "-"),
                         "next_traces": {True: "pooled", False: "own"}.get(a.get("pooled"), "-")})
    cols = ("iteration", "target", "policy", "acting", "share", "train_steps", "battles", "learning_rate", "merge_weight")
    if any(r["next_traces"] != "-" for r in rows):  # sharing: mixed
        cols += ("next_traces",)
    return text_table(rows, cols) if rows else "(no allocation)"
