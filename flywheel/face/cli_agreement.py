"""``flywheel judge-agreement``: the configured judge (any kind, a cascade too) decides the battles of
a log of human votes in Chatbot Arena's layout, and its agreement with the humans is reported:
overall, per category and, for a cascade, per tier that decided (how a vote counts:
``judges.agreement``). The judge is built from the config's ``judge`` section alone, outside any run:
nothing is written but the judge's cache (``run.cache_dir``, where set and ``judge.cache``)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from flywheel.config.loading import ConfigError, load_config
from flywheel.config.tree import FlywheelConfig
from flywheel.face.checks import judge_problems
from flywheel.face.cli_data import Format, fail
from flywheel.ground import reports
from flywheel.ground.cache import KeyValueCache
from flywheel.ground.records import Judgment
from flywheel.worlds.prompts import bad_rows_message
from flywheel.worlds.votes import Vote, VoteLogError, read_votes
from flywheel.worlds.world import JudgeRoster
from judges.agreement import COLUMNS, HOW, HumanVerdict, by_category, by_tier, tally
from judges.build import build_judge
from judges.cascade import CascadeJudge
from judges.pairwise import PairwiseJudge

# Judges that cannot decide a human vote's battle, and why.
CANNOT = {"verifier": "checks answers against a reference, and human votes have none",
          "game": "decides games by their rules, and human votes are conversations"}


def judge_config(config: Path | None, set_: list[str]) -> FlywheelConfig:
    """The config whose judge is measured; a bad one, or a judge that cannot run, stops here."""
    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    if cfg.judge.kind in CANNOT:
        fail(f"judge.kind {cfg.judge.kind}: it {CANNOT[cfg.judge.kind]}; configure an llm, hybrid, panel, custom, "
             "reward_model or cascade judge")
    found = judge_problems(cfg)
    if found:
        fail("\nerror: ".join(found))
    return cfg


def vote_sample(log: Path, skip_bad: bool, limit: int | None, seed: int) -> tuple[list[Vote], int]:
    """The votes to judge (a seeded sample of ``limit``, in log order) and how many the log has."""
    try:
        votes, bad = read_votes(log)
    except VoteLogError as e:
        fail(str(e))
    if bad and not skip_bad:
        hint = "--skip-bad skips bad rows; nothing was judged"
        fail(bad_rows_message([(b.where, b.reason) for b in bad]) + (f" ({hint})" if len(bad) == 1 else f"\n{hint}"))
    if bad:
        typer.echo(f"skipped {len(bad)} bad row(s) of {len(bad) + len(votes)}", err=True)
    if not votes:
        fail(f"{log}: no votes to judge")
    if limit is not None and limit < len(votes):
        keep = sorted(random.Random(seed).sample(range(len(votes)), limit))
        return [votes[i] for i in keep], len(votes)
    return votes, len(votes)


@contextmanager
def judging(cfg: FlywheelConfig) -> Iterator[tuple[JudgeRoster, KeyValueCache | None]]:
    """The roster the judge's models are built on (released after), and the judges' cache
    (``run.cache_dir``, where set and ``judge.cache``)."""
    cache = None
    if cfg.run.cache_dir is not None and cfg.judge.cache:
        cache = KeyValueCache(Path(cfg.run.cache_dir) / "judgments.sqlite")
    roster = JudgeRoster(cfg)
    try:
        yield roster, cache
    finally:
        roster.release()


def _judge(cfg: FlywheelConfig, votes: list[Vote]) -> tuple[list[Judgment], PairwiseJudge]:
    """Every vote's judgment by the configured judge, and the judge."""
    with judging(cfg) as (roster, cache):
        try:
            judge = build_judge(cfg.judge, roster, cache)
        except ValueError as e:
            fail(str(e))
        return judge.judge([v.battle() for v in votes]), judge


def _table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: ("" if v is None else v) for k, v in r.items()} for r in rows]


def judge_agreement_cmd(
    log: Annotated[Path, typer.Argument(help="Human votes in Chatbot Arena's layout (model_a, model_b, winner, "
                                        "conversation_a, conversation_b; category where given): .jsonl, .json, .csv "
                                        "or .parquet; the votes file `data ingest --out` writes too.")],
    config: Annotated[Path | None, typer.Option(help="Recipe YAML whose judge section is measured; default: "
                                                "the embedded world's.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    limit: Annotated[int | None, typer.Option(min=1, help="Judge a seeded sample of this many votes (default: "
                                              "every vote).")] = None,
    seed: Annotated[int, typer.Option(help="The sample's seed.")] = 0,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip bad rows (and say how many) instead of "
                                           "failing.")] = False,
    format: Annotated[Format, typer.Option("--format", help="Output format.")] = "table",
) -> None:
    """How often the configured judge agrees with human votes: overall, per category and, for a
    cascade, per tier, with Wilson 95% intervals; human ties are counted apart."""
    cfg = judge_config(config, set_)
    votes, total = vote_sample(log, skip_bad, limit, seed)
    judgments, judge = _judge(cfg, votes)
    pairs = [HumanVerdict(v.winner, v.category, j) for v, j in zip(votes, judgments)]
    tiers = by_tier(pairs, [t.judge.name for t in judge.tiers]) if isinstance(judge, CascadeJudge) else []
    report = {"judge": judge.name, "log": str(log), "votes": len(votes), "log_votes": total,
              "sample_seed": seed if len(votes) < total else None, "overall": tally(pairs),
              "by_category": by_category(pairs), "by_tier": tiers, "counting": HOW}
    failed = [j.error for j in judgments if j.winner is None]
    if failed:
        typer.echo(f"warning: {len(failed)} of {len(votes)} votes got no verdict (first: {failed[0]})", err=True)
    if format == "json":
        typer.echo(json.dumps(report, indent=2))
        return
    rows = [{"group": "all", **report["overall"]}]
    rows += [{"group": f"category {r['category']}", **r} for r in report["by_category"]]
    rows += [{"group": f"tier {r['tier']} {r['judge']}", **r} for r in tiers]
    sample = f", a sample (seed {seed}) of the log's {total}" if len(votes) < total else ""
    if format != "csv":
        typer.echo(f"{judge.name} against {len(votes)} human votes of {log}{sample}\n")
    typer.echo(reports.render(_table(rows), format, ("group", *COLUMNS)))
    if format != "csv":
        typer.echo(f"\n{HOW}")
