"""``flywheel judge-thresholds``: a cascade's thresholds and tie rules, chosen on calibration battles.

Every tier of the config's cascade judges the same battles: a seeded sample of a finished run's
train battles (never its eval battles, which only report), or of a log of votes in Chatbot Arena's
layout. Then the earlier tiers' thresholds (where they gave confidences) and tie rules are chosen to
reach ``--target`` agreement with the last tier at the least cost per battle (the tiers' ``price``;
``judges.cascade_report.choose_thresholds``). It prints what each tier alone gives, the cascade as
configured, the choice, and the recipe's judge section with the chosen settings. Nothing is written but the judges'
cache (``run.cache_dir``, where set and ``judge.cache``)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from flywheel.config.tree import FlywheelConfig
from flywheel.face.cli_agreement import judge_config, judging, vote_sample
from flywheel.face.cli_data import Format, fail
from flywheel.ground import reports
from flywheel.ground.records import Battle, Judgment
from flywheel.ground.run_view import NotARunError, RunView
from judges.build import calibration_tiers
from judges.cascade import Tier
from judges.cascade_report import Choice, agree, choose_thresholds, outcome, wilson

COLUMNS = ("judging", "thresholds", "ties", "agreement", "low", "high", "cost_per_battle", "saving", "decided")


def _battles(source: Path, limit: int, seed: int, skip_bad: bool) -> tuple[list[Battle], int, str]:
    """The calibration battles (a seeded sample of ``limit``, in log order), how many the source has,
    and what they are."""
    if source.is_dir():
        try:
            view = RunView.open(source)
        except NotARunError as e:
            fail(str(e))
        seen: dict[str, Battle] = {}
        for b in view.battles("train"):
            if b.ok:
                seen.setdefault(b.battle_id, b)
        battles, what = list(seen.values()), "train battles"
        if not battles:
            fail(f"{source}: the run has no train battles played yet")
    else:
        votes, _ = vote_sample(source, skip_bad, None, seed)
        battles, what = [v.battle() for v in votes], "voted battles"
    if limit < len(battles):
        keep = sorted(random.Random(seed).sample(range(len(battles)), limit))
        return [battles[i] for i in keep], len(battles), what
    return battles, len(battles), what


def _verdicts(cfg: FlywheelConfig, battles: list[Battle]) -> tuple[list[Tier], list[list[Judgment]]]:
    """The cascade's tiers, and every tier's verdicts on every battle."""
    with judging(cfg) as (roster, cache):
        try:
            tiers = calibration_tiers(cfg.judge, roster, cache)
        except ValueError as e:
            fail(str(e))
        return tiers, [t.judge.judge(battles) for t in tiers]


def _row(judging: str, choice: Choice, valid: int, alone: float) -> dict[str, Any]:
    """One line of the table: a cascade's (or one judge's) agreement with the last tier, with its
    Wilson 95% interval over the battles the last tier gave a verdict, and its cost."""
    interval = wilson(round(choice.agreement * valid), valid) or (None, None)
    return {"judging": judging,
            "thresholds": ", ".join("-" if t is None else f"{t:g}" for t in choice.thresholds),
            "ties": ", ".join("escalate" if e else "decide" for e in choice.escalate_ties),
            "agreement": choice.agreement, "low": interval[0], "high": interval[1],
            "cost_per_battle": choice.cost_per_battle,
            "saving": round(alone / choice.cost_per_battle, 2) if choice.cost_per_battle else None,
            "decided": ", ".join(f"{d:.0%}" for d in choice.decided)}


def _alone(i: int, tiers: list[Tier], every: list[list[Judgment]]) -> Choice:
    """Tier ``i`` judging every battle by itself (its invalid verdicts agree with nothing)."""
    last = every[-1]
    valid = sum(j.valid for j in last)
    hits = sum(agree(a.winner, b.winner) for a, b in zip(every[i], last))
    return Choice((), (), round(hits / max(valid, 1), 4), round(tiers[i].price, 6),
                  tuple(float(k == i) for k in range(len(tiers))))


def _paste(cfg: FlywheelConfig, choice: Choice) -> str:
    """The recipe's whole ``judge`` section, its earlier tiers with the chosen thresholds and tie rules."""
    tiers = [tc.model_copy(update={"threshold": choice.thresholds[i],
                                   "ties": "escalate" if choice.escalate_ties[i] else "decide"})
             if i < len(choice.thresholds) else tc for i, tc in enumerate(cfg.judge.cascade.tiers)]
    judge = cfg.judge.model_copy(update={"cascade": cfg.judge.cascade.model_copy(update={"tiers": tiers})})
    return yaml.safe_dump({"judge": judge.model_dump(mode="json", exclude_defaults=True)}, sort_keys=False)


def judge_thresholds_cmd(
    source: Annotated[Path, typer.Argument(help="Calibration battles: a run directory (its train battles) or a "
                                           "log of votes in Chatbot Arena's layout (.jsonl, .json, .csv, .parquet).")],
    config: Annotated[Path | None, typer.Option(help="Recipe YAML whose judge is a cascade "
                                                "(judge.kind: cascade).")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    target: Annotated[float, typer.Option(min=0.0, max=1.0, help="The agreement with the last tier to reach at the "
                                          "least cost.")] = 0.95,
    limit: Annotated[int, typer.Option(min=1, help="Judge a seeded sample of this many battles, each by every "
                                       "tier (every tier's price times this, where nothing is cached).")] = 200,
    seed: Annotated[int, typer.Option(help="The sample's seed.")] = 0,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="A vote log: skip bad rows (and say how many) "
                                           "instead of failing.")] = False,
    format: Annotated[Format, typer.Option("--format", help="Output format.")] = "table",
) -> None:
    """Choose a cascade's thresholds and tie rules: every tier judges the same calibration battles,
    and the earlier tiers' settings that reach --target agreement with the last tier at the least
    cost are printed, beside each tier alone and the cascade as configured."""
    cfg = judge_config(config, set_)
    if cfg.judge.kind != "cascade":
        fail(f"judge.kind {cfg.judge.kind}: thresholds are chosen for a cascade (judge.kind: cascade, "
             "judge.cascade.tiers)")
    battles, total, what = _battles(source, limit, seed, skip_bad)
    tiers, every = _verdicts(cfg, battles)
    names = [t.judge.name for t in tiers]
    failed = [sum(not j.valid for j in js) for js in every]
    valid = len(battles) - failed[-1]
    if valid == 0:
        fail(f"the last tier ({names[-1]}) gave no verdict on any of the {len(battles)} battles; nothing to agree with")
    choice = choose_thresholds(battles, every, tiers, target)
    last_alone = tiers[-1].price
    rows = [_row(f"tier {i} alone: {n}", _alone(i, tiers, every), valid, last_alone) for i, n in enumerate(names)]
    rows += [_row("cascade as configured", outcome(battles, every, tiers), valid, last_alone),  # tiers: as set
             _row("cascade chosen", choice, valid, last_alone)]
    report = {"source": str(source), "battles": len(battles), "source_battles": total, "what": what,
              "sample_seed": seed if len(battles) < total else None, "target": target, "tiers": names,
              "no_verdict": dict(zip(names, failed)), "reached": choice.agreement >= target, "rows": rows,
              "chosen": {"thresholds": list(choice.thresholds), "ties": ["escalate" if e else "decide"
                                                                          for e in choice.escalate_ties]},
              "paste": _paste(cfg, choice)}
    if format == "json":
        typer.echo(json.dumps(report, indent=2))
        return
    table = [{k: ("" if v is None else v) for k, v in r.items()} for r in rows]
    if format != "csv":  # costs are small: all their digits; savings as a factor
        table = [r | {"cost_per_battle": f"{r['cost_per_battle']:.6g}",
                      "saving": f"{r['saving']:.2f}x" if r["saving"] != "" else ""} for r in table]
    if format == "csv":
        typer.echo(reports.render(table, format, COLUMNS))
        return
    sample = f", a sample (seed {seed}) of {total}" if len(battles) < total else ""
    typer.echo(f"{len(battles)} {what} of {source}{sample}, judged by every tier: {' -> '.join(names)}\n")
    typer.echo(reports.render(table, format, COLUMNS))
    reach = ("reaches" if report["reached"] else "does not reach; the choice is the one that agrees most")
    typer.echo(f"\nagreement: with the last tier's verdicts (a tie and 'both bad' agree), over the {valid} battles "
               f"it gave a verdict on; the chosen cascade {reach} the target {target:g}. cost_per_battle: the tiers' "
               "prices, summed over the tiers a battle reaches; saving: the last tier alone's cost over it; "
               "decided: the share of battles each tier decided.")
    if any(failed):
        typer.echo("no verdict (a failed call or unreadable output): "
                   + ", ".join(f"{n} {k}" for n, k in zip(names, failed) if k))
    typer.echo(f"\nThe recipe's judge section with the chosen settings:\n\n{report['paste']}")
