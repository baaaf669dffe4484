"""The ``flywheel`` command: run, bootstrap, elo."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from flywheel import reports
from flywheel.config import ConfigError, load_config
from flywheel.store import RunLockedError, read_json

# Quiet defaults, set by main() before Prefect or Hugging Face is imported; the environment can
# still override each of them. Offline mode is not forced here (a hub model id in `path:` must
# work): the Makefile and the tests set HF_HUB_OFFLINE themselves.
QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "flywheel",
    # The temporary local Prefect server may start slowly on a busy 2-core machine (default 20 s).
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
}

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Bandit-driven Arena Learning flywheel.")


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    resume: Annotated[Optional[Path], typer.Option(help="Continue this killed or finished run.")] = None,
) -> None:
    """Run the flywheel: baseline evaluation, then the configured iterations."""
    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    if resume is not None and not (resume / "config.yaml").is_file():
        fail(f"--resume {resume}: not a run directory (no config.yaml)")
    _refuse_problems(load_config(resume / "config.yaml") if resume is not None else cfg)
    import logging

    from flows.flywheel_flow import run_flywheel

    logging.getLogger("flywheel").setLevel(logging.INFO)  # stage progress (pre-training, generation, training)
    try:
        run_dir = run_flywheel(cfg.model_dump(mode="json"), str(resume) if resume else None)
    except (RunLockedError, FileExistsError) as e:
        fail(str(e))
    _print_result(Path(run_dir))


def _refuse_problems(cfg) -> None:
    """Stop before anything is written if the config cannot run: one ``error:`` line per problem."""
    from flywheel.checks import problems

    found = problems(cfg)
    if found:
        fail("\nerror: ".join(found))


@app.command()
def check(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
) -> None:
    """Check a config without running it: fields, player kinds, API keys, model paths, chat
    templates, judge functions and prompt pools. Exit 0 when it is ready to run, 2 otherwise."""
    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    _refuse_problems(cfg)
    typer.echo(f"ok: {config or 'the embedded default'} is ready to run")


def _print_result(run_dir: Path) -> None:
    summary = read_json(run_dir / "summary.json", {})
    last = summary["iterations"][-1]["iteration"]
    rows = read_json(run_dir / "ratings" / f"iter-{last:04d}.json", [])
    typer.echo(f"\nrun directory: {run_dir}")
    typer.echo(f"\nEval leaderboard after iteration {last} (Bradley-Terry Elo, 95% CI):\n")
    typer.echo(reports.text_table(rows))
    typer.echo("\nTarget progress on the held-out eval split:\n")
    typer.echo(reports.progress_table(summary))
    typer.echo("\nEval accuracy by category: every target version next to every opponent:\n")
    typer.echo(reports.category_table(summary))
    if len(summary.get("targets", [])) > 1:
        typer.echo("\nCompute allocation for the next iteration (ModelArena):\n")
        typer.echo(reports.allocation_lines(summary))
    typer.echo("\nJudge diagnostics per iteration:\n")
    typer.echo(reports.judge_lines(summary))
    usage = reports.usage_lines(summary)
    if usage:
        typer.echo("\nUsage over the run (API calls, tokens, cost):\n")
        typer.echo(usage)


@app.command(name="bootstrap")
def bootstrap_cmd(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    force: Annotated[bool, typer.Option(help="Rebuild models that already exist.")] = False,
) -> None:
    """Build and pre-train the embedded world's tiny models (deterministic under world.seed)."""
    import logging

    from flywheel.tinymodels import bootstrap

    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    made = bootstrap(cfg.world, force=force)
    typer.echo(f"{len(made)} model(s) built under {cfg.world.models_dir}")


FORMATS = ("table", "json", "csv", "md")


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        fail(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")


def _parse_anchor(anchor: Optional[str]) -> Optional[tuple[str, float]]:
    if anchor is None:
        return None
    model, sep, value = anchor.rpartition("=")
    try:
        if not sep or not model:
            raise ValueError
        return model, float(value)
    except ValueError:
        fail(f"--anchor {anchor!r}: expected MODEL=RATING, e.g. --anchor gpt-4=1200")
    return None


@app.command(name="rate")
def rate_cmd(
    file: Annotated[Path, typer.Argument(help="Battle log: .jsonl, .json, .csv or .parquet (Chatbot Arena layout).")],
    format: Annotated[str, typer.Option("--format", help="table, json, csv or md.")] = "table",
    by: Annotated[Optional[str], typer.Option("--by", help="'category': one leaderboard per category.")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0, help="Bootstrap rounds for the CIs.")] = 100,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    ci: Annotated[float, typer.Option(min=0.5, max=0.999, help="Confidence level.")] = 0.95,
    anchor: Annotated[Optional[str], typer.Option(help="Pin a model's rating: MODEL=RATING.")] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip bad rows (and say how many) instead of failing.")] = False,
    fold_names: Annotated[bool, typer.Option("--fold-names", help="Merge names that differ only by case or spaces.")] = False,
    prior: Annotated[Optional[float], typer.Option("--prior", min=0, help="Virtual ties of each model against a "
                     "mean-rated reference; default: none where the maximum-likelihood fit exists, 0.1 where not; "
                     "0 = the classic fit.")] = None,
    matrix: Annotated[bool, typer.Option("--matrix", help="Print the win-rate and battle-count matrices.")] = False,
    reference: Annotated[Optional[Path], typer.Option(help="Reference ranking (JSON or CSV) for a consistency report.")] = None,
) -> None:
    """Rate any battle log: Bradley-Terry Elo (base 10, scale 400, mean 1000) with bootstrap CIs."""
    from flywheel.battlelog import BattleLogError, read_battles, read_reference
    from flywheel.ratings import consistency, rate

    _check_format(format)
    if by not in (None, "category"):
        fail(f"--by {by!r}: only 'category' is supported")
    pinned = _parse_anchor(anchor)
    try:
        battles, bad = read_battles(file)
        ref = read_reference(reference) if reference else None
    except BattleLogError as e:
        fail(str(e))
    if bad and not skip_bad:
        shown = "\n  ".join(str(b) for b in bad[:20])
        more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        fail(f"{file}: {len(bad)} bad row(s) (use --skip-bad to skip them):\n  {shown}{more}")
    if bad:
        typer.echo(f"skipped {len(bad)} bad row(s) of {len(bad) + len(battles)}", err=True)
    if not battles:
        fail(f"{file}: no battles to rate")
    groups: dict[str, list] = {"all": battles}
    if by == "category":
        groups = {}
        for b in battles:
            groups.setdefault(b.category or "(none)", []).append(b)
        groups = dict(sorted(groups.items()))
    reports_by: dict = {}
    try:
        for name, rows in groups.items():
            reports_by[name] = rate([b.model_a for b in rows], [b.model_b for b in rows], [b.winner for b in rows],
                                    rounds=bootstrap, ci=ci, seed=seed, anchor=pinned, fold_names=fold_names,
                                    prior=prior)
    except ValueError as e:
        fail(str(e))
    for name, rep in reports_by.items():
        for w in rep.warnings:
            typer.echo(f"warning{'' if by is None else f' ({name})'}: {w}", err=True)
    if matrix:
        rep = reports_by[next(iter(reports_by))] if by is None else None
        if rep is None:
            fail("--matrix works on the whole log; drop --by")
        typer.echo(reports.render_matrix(rep.models, rep.win_rate, format, "win rate (row vs column, ties half)"))
        typer.echo(reports.render_matrix(rep.models, rep.battle_counts, format, "battles"))
        return
    if by is None:
        rows = reports_by["all"].rows()
        if ref is None:
            typer.echo(reports.render(rows, format))
            return
        try:
            cons = consistency(reports_by["all"].ratings, ref)
        except ValueError as e:
            fail(str(e))
        if format == "json":
            typer.echo(json.dumps({"leaderboard": rows, "consistency": cons}, indent=2))
        else:
            typer.echo(reports.render(rows, format))
            typer.echo("\nconsistency with the reference: " + json.dumps(cons))
        return
    typer.echo(reports.render_sections({n: r.rows() for n, r in reports_by.items()}, format))


def _latest_ratings(run_dir: Path) -> tuple[int, list[dict]]:
    files = sorted((run_dir / "ratings").glob("iter-[0-9][0-9][0-9][0-9].json"))
    if not files:
        fail(f"{run_dir}: no ratings yet (is it a run directory?)")
    return int(files[-1].stem.split("-")[1]), json.loads(files[-1].read_text())


@app.command()
def elo(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    format: Annotated[str, typer.Option("--format", help="table, json, csv or md.")] = "table",
    history: Annotated[bool, typer.Option("--history", help="Every model version's Elo per iteration.")] = False,
    by: Annotated[Optional[str], typer.Option("--by", help="'category': one leaderboard per category.")] = None,
    subset: Annotated[Optional[str], typer.Option(help="Eval subset: diverse, hard or mix (WizardArena).")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG: Elo history with CI bands, win-rate heatmap.")] = None,
    reference: Annotated[Optional[Path], typer.Option(help="Reference ranking (JSON or CSV) for a consistency report.")] = None,
) -> None:
    """A run's eval leaderboard (latest by default)."""
    _check_format(format)
    last, rows = _latest_ratings(run_dir)
    if reference is not None:
        from flywheel.battlelog import BattleLogError, read_reference
        from flywheel.ratings import Rating, consistency

        try:
            cons = consistency([Rating(**{k: r[k] for k in Rating.__dataclass_fields__}) for r in rows],
                               read_reference(reference))
        except (BattleLogError, ValueError) as e:
            fail(str(e))
        typer.echo(json.dumps(cons, indent=2) if format == "json" else "consistency with the reference: " + json.dumps(cons))
        return
    if plot is not None:
        _plot(run_dir, plot)
        return
    if history:
        hist = read_json(run_dir / "ratings" / "history.json", {})
        flat = [{"iteration": int(k), **r} for k in sorted(hist, key=int) for r in hist[k]]
        typer.echo(reports.render(flat, format, reports.HISTORY_COLUMNS))
        return
    if by is not None:
        if by != "category":
            fail(f"--by {by!r}: only 'category' is supported")
        from flywheel.config import load_config
        from flywheel.pipeline import category_boards
        from flywheel.store import RunStore

        typer.echo(reports.render_sections(category_boards(RunStore(run_dir), load_config(run_dir / "config.yaml")), format))
        return
    if subset is not None:
        boards = read_json(run_dir / "ratings" / f"iter-{last:04d}-subsets.json", {})
        if subset == "all":
            typer.echo(reports.render_sections({**boards, "all": rows}, format, key="subset"))
            return
        if subset not in boards:
            fail(f"--subset {subset!r}: expected one of {', '.join(sorted(boards)) or '(none recorded)'} or all")
        rows = boards[subset]
    typer.echo(reports.render(rows, format))


@app.command()
def arms(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    iteration: Annotated[Optional[int], typer.Option(help="Iteration (default: the latest).")] = None,
    format: Annotated[str, typer.Option("--format", help="table, json, csv or md.")] = "table",
) -> None:
    """Where the flywheel spent its battles: per prompt arm, its battles, share, pulls and value."""
    _check_format(format)
    summary = read_json(run_dir / "summary.json", {})
    entries = [e for e in summary.get("iterations", []) if e.get("bandit")]
    if iteration is not None:
        entries = [e for e in entries if e["iteration"] == iteration]
    if not entries:
        fail(f"{run_dir}: no bandit record{'' if iteration is None else f' for iteration {iteration}'}")
    e = entries[-1]
    cols = ("arm", "battles", "share", "pulls", "effective_pulls", "value")
    sections = {t: sorted(rows, key=lambda r: -r["share"]) for t, rows in e["bandit"].items()}
    typer.echo(f"iteration {e['iteration']}, policy {read_json(run_dir / 'iter-{:04d}'.format(e['iteration']) / 'stages' / 'select-r1.json', {}).get('policy', '?')}", err=True)
    typer.echo(reports.render_sections(sections, format, key="target", columns=cols))


def _plot(run_dir: Path, out: Path) -> None:
    from flywheel.pipeline import columns, rated_battles
    from flywheel.plots import plot_run
    from flywheel.ratings import rate
    from flywheel.store import RunStore

    hist = read_json(run_dir / "ratings" / "history.json", {})
    summary = read_json(run_dir / "summary.json", {})
    rep = rate(*columns(rated_battles(RunStore(run_dir), None, "eval")), rounds=0)
    plot_run(hist, summary.get("targets", []), rep.models, rep.win_rate, out)
    typer.echo(f"wrote {out}")


@app.command()
def schedule(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    cron: Annotated[Optional[str], typer.Option(help='Cron schedule, e.g. "0 3 * * *".')] = None,
    interval: Annotated[Optional[float], typer.Option(min=1, help="Run every this many seconds.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    name: Annotated[str, typer.Option(help="Deployment name.")] = "flywheel",
    work_pool: Annotated[Optional[str], typer.Option(help="Register the deployment with this work pool "
                                                     "(served by `prefect worker start`) instead of serving it here.")] = None,
) -> None:
    """Create a Prefect deployment of the flywheel on a schedule and serve it (needs a Prefect
    server: PREFECT_API_URL). Each trigger adds one iteration to the run (schedule.mode continue)
    or starts a fresh run (schedule.mode fresh)."""
    if (cron is None) == (interval is None):
        fail("give exactly one of --cron or --interval")
    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    if cron is not None:
        from prefect.client.schemas.schedules import CronSchedule

        try:
            CronSchedule(cron=cron)
        except ValueError as e:
            fail(f"--cron {cron!r}: {e}")
    import logging

    from flows.flywheel_flow import scheduled_flywheel

    logging.getLogger("flywheel").setLevel(logging.INFO)
    cfg.run.root = str(Path(cfg.run.root).resolve())  # triggers run in other processes and folders
    cfg.world.models_dir = str(Path(cfg.world.models_dir).resolve())
    params = {"config": cfg.model_dump(mode="json")}
    when = {"cron": cron} if cron is not None else {"interval": interval}
    if work_pool is not None:
        from prefect import Flow

        source = Path(__file__).resolve().parents[1]
        flow = Flow.from_source(source=str(source), entrypoint="flows/flywheel_flow.py:scheduled_flywheel")
        dep_id = flow.deploy(name, work_pool_name=work_pool, parameters=params, build=False, push=False,
                             print_next_steps=False, **when)
        typer.echo(f"deployment flywheel-scheduled/{name} ({dep_id}) registered with work pool {work_pool}; "
                   f"start a worker: prefect worker start --pool {work_pool}")
        return
    from prefect.deployments.runner import EntrypointType

    typer.echo(f"serving deployment flywheel-scheduled/{name} ({'cron ' + cron if cron else f'every {interval:g} s'}); "
               "Ctrl-C stops it")
    scheduled_flywheel.serve(name=name, parameters=params, limit=1, entrypoint_type=EntrypointType.MODULE_PATH, **when)


data_app = typer.Typer(no_args_is_help=True, help="Inspect and export the datasets a run made.")
app.add_typer(data_app, name="data")


@data_app.command("ls")
def data_ls(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    format: Annotated[str, typer.Option("--format", help="table, json, csv or md.")] = "table",
) -> None:
    """Every dataset of a run, per iteration: SFT and DPO sets and the battle and judgment logs."""
    from flywheel.dataview import run_datasets

    _check_format(format)
    try:
        rows = run_datasets(run_dir)
    except FileNotFoundError as e:
        fail(str(e))
    typer.echo(reports.render(rows, format, ("iteration", "dataset", "rows", "bytes", "path")))


@data_app.command("show")
def data_show(
    path: Annotated[Path, typer.Argument(help="An HF dataset directory, a parquet file or folder, JSONL or JSON.")],
    limit: Annotated[int, typer.Option(min=0, help="Rows to print.")] = 10,
) -> None:
    """Print a dataset's first rows as JSON lines."""
    from flywheel.dataview import read_rows

    try:
        rows = read_rows(path, limit)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    for r in rows:
        typer.echo(json.dumps(r, ensure_ascii=False, default=str))


@data_app.command("stats")
def data_stats(
    path: Annotated[Path, typer.Argument(help="An HF dataset directory, a parquet file or folder, JSONL or JSON.")],
) -> None:
    """Rows, text lengths, categories, sources and judge margins of a dataset (JSON)."""
    from flywheel.dataview import stats

    try:
        typer.echo(json.dumps(stats(path), indent=2, default=str))
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))


@data_app.command("export")
def data_export(
    path: Annotated[Path, typer.Argument(help="An HF dataset directory, a parquet file or folder, JSONL or JSON.")],
    format: Annotated[str, typer.Option("--format", help="jsonl, parquet, sharegpt or alpaca.")] = "jsonl",
    out: Annotated[Optional[Path], typer.Option(help="Output file (default: <dataset>.<format>.jsonl|parquet beside it).")] = None,
) -> None:
    """Write a dataset as JSONL, parquet, ShareGPT or Alpaca records."""
    from flywheel.dataview import export

    target = out or path.parent / f"{path.name}.{format}.{'parquet' if format == 'parquet' else 'jsonl'}"
    try:
        n = export(path, format, target)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    typer.echo(f"wrote {n} rows to {target}")


@data_app.command("ingest")
def data_ingest(
    files: Annotated[list[Path], typer.Argument(help="Prompt files: JSONL, JSON, CSV or Parquet.")],
    layout: Annotated[str, typer.Option(help="auto, alpaca, sharegpt, arena-hard or plain.")] = "auto",
    category: Annotated[str, typer.Option(help="Category of rows that name none.")] = "user",
    out: Annotated[Optional[Path], typer.Option(help="Write the prompts as one JSONL pool (plain layout).")] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip bad rows (still listed) instead of failing.")] = False,
    no_dedup: Annotated[bool, typer.Option("--no-dedup", help="Keep repeated prompts.")] = False,
) -> None:
    """Read user prompt pools (Alpaca, ShareGPT, Arena-Hard, plain); report bad rows by line."""
    from flywheel.prompts import bad_rows_message, ingest

    seen: set[str] = set()
    prompts, bad, dups = [], [], 0
    for f in files:
        try:
            got = ingest(f, layout, category, not no_dedup, seen)
        except (OSError, ValueError) as e:
            fail(str(e))
        prompts += got.prompts
        bad += got.bad
        dups += got.duplicates
    if not prompts:
        fail(f"no prompts in {', '.join(map(str, files))}: {len(bad)} bad row(s), {dups} duplicate(s)")
    cats: dict[str, int] = {}
    for p in prompts:
        cats[p.category] = cats.get(p.category, 0) + 1
    typer.echo(json.dumps({"prompts": len(prompts), "duplicates": dups, "bad_rows": len(bad),
                           "categories": dict(sorted(cats.items()))}))
    if bad:
        typer.echo(bad_rows_message(bad), err=True)
        if not skip_bad:
            fail("bad rows found; fix them or pass --skip-bad (nothing was written)")
    if out is not None:
        from flywheel.store import atomic_write_text

        atomic_write_text(out, "".join(json.dumps({"id": p.id, "prompt": p.text, "category": p.category,
                                                   "level": p.level, "reference": p.reference}) + "\n" for p in prompts))
        typer.echo(f"wrote {len(prompts)} prompts to {out}")


models_app = typer.Typer(no_args_is_help=True, help="Real models made usable offline (GGUF to a checkpoint).")
app.add_typer(models_app, name="models")


@models_app.command("add")
def models_add(
    name: Annotated[str, typer.Argument(help="A known model (smollm2), or the name to save --gguf under.")],
    gguf: Annotated[Optional[Path], typer.Option("--gguf", help="Convert this GGUF file instead.")] = None,
    models_dir: Annotated[Path, typer.Option("--models-dir", help="Where checkpoints live.")] = Path("data/models"),
    force: Annotated[bool, typer.Option(help="Convert again even if it is there.")] = False,
) -> None:
    """Convert a GGUF model into a standard checkpoint (safetensors, tokenizer, chat template)."""
    import logging

    from flywheel.realmodels import ModelSourceError, add_model

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        out = add_model(name, models_dir, gguf, force)
    except ModelSourceError as e:
        fail(str(e), 1)
    typer.echo(f"{name}: {out} (use it as a player: path: {out})")


@models_app.command("ls")
def models_ls() -> None:
    """The known models and where their GGUF files are (or how to install them)."""
    from flywheel.realmodels import KNOWN, ModelSourceError, known_gguf

    for name, src in sorted(KNOWN.items()):
        try:
            where = str(known_gguf(name))
        except ModelSourceError:
            where = f"not installed: {src.install}"
        typer.echo(f"{name}  {src.description}  [{src.license}]\n    {where}")


def main() -> None:
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
