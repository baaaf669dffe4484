"""The ``flywheel`` command: run, bootstrap, elo."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from flywheel.arena.generation import CallsFailed
from flywheel.config.loading import ConfigError, dump_config, load_config, parse_overrides
from flywheel.config.tree import FlywheelConfig
from flywheel.face import queries
from flywheel.face.battlelog import BattleLogError, consistency, read_reference
from flywheel.face.checks import problems
from flywheel.face.cli_agreement import judge_agreement_cmd
from flywheel.face.cli_data import (IN_USE, RUNTIME, USAGE, Format, damaged_file, data_app, fail, models_app, open_run,
                                    refuse_together)
from flywheel.face.cli_rate import lc_board_cmd, rate_cmd, style_board_cmd
from flywheel.face.cli_report import report_cmd
from flywheel.face.cli_thresholds import judge_thresholds_cmd
from flywheel.face.queries import result_text
from flywheel.ground import interrupt, reports
from flywheel.ground.atomic import atomic_write_text, read_json
from flywheel.ground.store import RunLockedError, RunStore
from flywheel.learning.rl import RewardsFailed
from flywheel.maths.ratings import Rating
from flywheel.players.server import ServerError
from judges.guard import JudgeGuardError

# Quiet defaults, set by main() before Prefect or Hugging Face is imported; the environment can
# still override each of them. Offline mode is not forced here (a hub model id in `path:` must
# work): the Makefile and the tests set HF_HUB_OFFLINE themselves.
QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "flywheel",
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",  # pre-training logs before the flow starts
    # The temporary local Prefect server may start slowly on a busy 2-core machine (default 20 s).
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",  # tracking.kind mlflow (MLflow reads DO_NOT_TRACK only as "true")
}

app = typer.Typer(no_args_is_help=True, help="Bandit-driven Arena Learning flywheel. Exit codes: 0 done, 1 a failure "
                  "while working (a judge the guard stopped, a conversion that failed), 2 a usage or config error "
                  "(arguments, config fields, unreadable input files), 75 the run directory is in use by another "
                  "process (try again later).")
app.add_typer(data_app, name="data")
app.add_typer(models_app, name="models")
config_app = typer.Typer(no_args_is_help=True, help="The config: resolved as YAML, or its JSON schema.")
app.add_typer(config_app, name="config")


def _version(value: bool) -> None:
    if value:
        import importlib.metadata

        typer.echo(f"flywheel {importlib.metadata.version('flywheel')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Bandit-driven Arena Learning flywheel."""


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    resume: Annotated[Optional[Path], typer.Option(help="Continue this killed or finished run with its own "
                                                   "config.yaml; only --set run.iterations=N (to extend it) may "
                                                   "go with it.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON object: run_dir, summary, config "
                                          "(paths), iterations (completed), instead of the report.")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Also print Prefect's flow and task states and "
                                          "the trainer's logs.")] = False,
) -> None:
    """Run the flywheel: baseline evaluation, then the configured iterations."""
    _console(verbose)
    try:
        cfg = load_config(config, set_) if resume is None else _resume_config(resume, config, set_)
    except ConfigError as e:
        fail(str(e))
    _refuse_problems(cfg)
    if resume is not None:  # in use: say so at once, before Prefect starts (the flow checks again)
        probe = RunStore(resume)
        try:
            probe.lock()
        except RunLockedError as e:
            fail(str(e), IN_USE)
        try:
            _extend(probe.config_path, cfg.run.iterations)
        finally:
            probe.unlock()
    import logging

    from flows.flywheel_flow import run_flywheel  # lazy: Prefect and torch, only for a run

    # stage progress (pre-training, battles, judgments, training); -v: also each player's generation counts
    logging.getLogger("flywheel").setLevel(logging.DEBUG if verbose else logging.INFO)
    interrupt.stop_at_once()  # Ctrl-C and SIGTERM stop at once, with the --resume command
    interrupt.watch_children()  # and a kill -9 of this process alone leaves no server behind
    try:
        run_dir = Path(run_flywheel(cfg, str(resume) if resume else None))
    except RunLockedError as e:
        fail(str(e), IN_USE)
    except FileExistsError as e:
        fail(str(e))
    except (JudgeGuardError, RewardsFailed, CallsFailed) as e:
        fail(str(e), RUNTIME)
    except ServerError as e:  # the model server did not come up: nothing was written
        fail(str(e))
    if as_json:
        store = RunStore(run_dir)
        summary = json.loads(store.summary_path.read_text())
        typer.echo(json.dumps({"run_dir": str(run_dir.resolve()), "summary": str(store.summary_path.resolve()),
                               "config": str(store.config_path.resolve()),
                               "iterations": [e["iteration"] for e in summary.get("iterations", [])]}))
        return
    typer.echo(result_text(open_run(run_dir)))


# What --set may change on --resume: the run goes on with its own config.yaml otherwise.
RESUME_SETTABLE = ("run.iterations",)


def _resume_config(resume: Path, config: Path | None, set_: list[str]):
    """The config a ``--resume`` goes on with: the run's own config.yaml, with ``run.iterations``
    raised if ``--set`` asks (at least the iterations already done). A recipe or any other
    ``--set`` is refused, naming them, rather than silently ignored."""
    store = RunStore(resume)
    if not store.config_path.is_file():
        raise ConfigError(f"--resume {resume}: not a run directory (no config.yaml)")
    refused = [f"CONFIG {config}"] if config is not None else []
    overrides = parse_overrides(set_)
    refused += [f"--set {raw}" for raw, (key, _) in zip(set_, overrides) if key not in RESUME_SETTABLE]
    if refused:
        raise ConfigError(f"--resume goes on with the run's own config.yaml; it takes only --set run.iterations=N "
                          f"(to extend the run), not: {', '.join(refused)}")
    cfg = load_config(store.config_path, set_)
    done = [e.get("iteration") for e in (read_json(store.summary_path) or {}).get("iterations", [])]
    last = max(done, default=0)
    if cfg.run.iterations < last:
        raise ConfigError(f"--set run.iterations={cfg.run.iterations}: the run has already done {last} "
                          f"iteration(s); give at least {last}")
    return cfg


def _extend(path: Path, iterations: int) -> None:
    """Write ``run.iterations`` into a run's config.yaml (only it: the rest stays as written), so
    that a later plain ``--resume`` keeps the extension."""
    import yaml

    tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    if tree.get("run", {}).get("iterations") != iterations:
        tree.setdefault("run", {})["iterations"] = iterations
        atomic_write_text(path, yaml.safe_dump(tree, sort_keys=False))


def _console(verbose: bool) -> None:
    """By default the console shows the stage progress, the leaderboard and the summary tables;
    Prefect's flow- and task-run lines (state changes, and the traceback of a failure the CLI
    reports in one line) still reach the Prefect server and UI, not the console. ``-v`` shows them
    and the trainer's log dicts. Set before Prefect sets up its logging."""
    if verbose:
        os.environ["FLYWHEEL_TRAINER_LOGS"] = "1"
        return
    for logger in ("FLOW_RUNS", "TASK_RUNS"):
        os.environ.setdefault(f"PREFECT_LOGGING_LOGGERS_PREFECT_{logger}_LEVEL", "CRITICAL")


def _refuse_problems(cfg) -> None:
    """Stop before anything is written if the config cannot run: one ``error:`` line per problem."""
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


@config_app.command("show")
def config_show(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
) -> None:
    """Print the resolved config (a recipe over the defaults, then the --set overrides) as YAML:
    every field, as a run would write it to its config.yaml."""
    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    typer.echo(dump_config(cfg), nl=False)


@config_app.command("schema")
def config_schema() -> None:
    """Print the config's JSON schema (for an editor's YAML completion and checks)."""
    typer.echo(json.dumps(FlywheelConfig.model_json_schema(), indent=2))


@app.command(name="bootstrap")
def bootstrap_cmd(
    config: Annotated[Optional[Path], typer.Argument(help="Recipe YAML; default: the embedded world.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a field: dotted.key=value.")] = [],  # noqa: B006
    force: Annotated[bool, typer.Option(help="Rebuild models that already exist.")] = False,
) -> None:
    """Build and pre-train the embedded world's tiny models (deterministic under world.seed)."""
    import logging

    from flywheel.worlds.tinymodels import bootstrap  # lazy: torch

    try:
        cfg = load_config(config, set_)
    except ConfigError as e:
        fail(str(e))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    made = bootstrap(cfg.world, force=force)
    typer.echo(f"{len(made)} model(s) built under {cfg.world.models_dir}")


app.command(name="rate")(rate_cmd)  # flywheel rate: any battle log (cli_rate.py)
app.command(name="report")(report_cmd)  # flywheel report: a run on one HTML page (cli_report.py)
app.command(name="judge-agreement")(judge_agreement_cmd)  # a judge against human votes (cli_agreement.py)
app.command(name="judge-thresholds")(judge_thresholds_cmd)  # a cascade's thresholds, chosen (cli_thresholds.py)


@app.command()
def elo(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    format: Annotated[Format, typer.Option("--format", help="Output format.")] = "table",
    history: Annotated[bool, typer.Option("--history", help="Every model version's Elo per iteration.")] = False,
    by: Annotated[Optional[Literal["category"]], typer.Option("--by", help="One leaderboard per category.")] = None,
    subset: Annotated[Optional[Literal["diverse", "hard", "mix", "all"]], typer.Option(
        help="Eval subset (WizardArena's; all: each and the whole).")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG: Elo history with CI bands, win-rate heatmap.")] = None,
    reference: Annotated[Optional[Path], typer.Option(help="Reference ranking (JSON or CSV) for a consistency report.")] = None,
    lc_baseline: Annotated[Optional[str], typer.Option(
        metavar="MODEL", help="Length-controlled win rates against MODEL (AlpacaEval's).")] = None,
    style: Annotated[bool, typer.Option("--style-control", help="The eval leaderboard with style control (Chatbot "
                     "Arena's): answer length and markdown as covariates, with their coefficients.")] = False,
    judge: Annotated[bool, typer.Option("--judge", help="The judge section: its diagnostics per iteration and, "
                     "for a cascade, each tier's verdicts, escalations, cost and agreement with the last tier.")] = False,
) -> None:
    """A run's eval leaderboard (latest by default)."""
    refuse_together(plot=plot, history=history, by=by, subset=subset, reference=reference, lc_baseline=lc_baseline,
                    style_control=style, judge=judge)
    view = open_run(run_dir)
    if judge:
        try:
            sections = queries.judge_sections(view)
        except queries.QueryError as e:
            fail(str(e))
        if format == "json":
            typer.echo(json.dumps(sections, indent=2))
            return
        columns = {"diagnostics": reports.JUDGE_COLUMNS, "cascade": reports.CASCADE_COLUMNS}
        typer.echo("\n\n".join(reports.render_sections({name: rows}, format, key="section", columns=columns[name])
                                for name, rows in sections.items()))
        return
    if lc_baseline is not None:
        return lc_board_cmd(view, lc_baseline, format)
    if style:
        return style_board_cmd(view, format)

    try:
        last, rows = queries.latest_board(view)
    except queries.QueryError as e:
        fail(str(e))
    if reference is not None:
        try:
            cons = consistency([Rating(**{k: r[k] for k in Rating.__dataclass_fields__}) for r in rows],
                               read_reference(reference))
        except (BattleLogError, ValueError) as e:
            fail(str(e))
        typer.echo(json.dumps(cons, indent=2) if format == "json" else "consistency with the reference: " + json.dumps(cons))
        return
    if plot is not None:
        try:
            queries.plot(view, plot)
        except RuntimeError as e:  # matplotlib is an extra
            fail(str(e), RUNTIME)
        typer.echo(f"wrote {plot}")
        return
    if history:
        typer.echo(reports.render(queries.history_rows(view), format, reports.HISTORY_COLUMNS))
        return
    if by is not None:
        typer.echo(reports.render_sections(queries.category_boards(view), format))
        return
    if subset is not None:
        boards = view.subset_boards(last)
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
    format: Annotated[Format, typer.Option("--format", help="Output format.")] = "table",
) -> None:
    """Where the flywheel spent its battles: per prompt arm, its battles, share, pulls and value."""
    try:
        report = queries.arms_report(open_run(run_dir), iteration)
    except queries.QueryError as e:
        fail(str(e))
    typer.echo(report.header(), err=True)
    cols = ("arm", "battles", "share", "pulls", "effective_pulls", "value")
    typer.echo(reports.render_sections(report.sections, format, key="target", columns=cols))


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
    _refuse_problems(cfg)  # as `flywheel run` would, before a deployment that would fail at each trigger
    import logging

    from flows.deploy import DeploymentError, deploy_to_pool, serve_here, when  # lazy: Prefect

    logging.getLogger("flywheel").setLevel(logging.INFO)
    try:
        schedule_ = when(cron, interval)
        if work_pool is not None:
            dep_id = deploy_to_pool(cfg, name, work_pool, schedule_)
            typer.echo(f"deployment flywheel-scheduled/{name} ({dep_id}) registered with work pool {work_pool}; "
                       f"start a worker: prefect worker start --pool {work_pool}")
            return
    except DeploymentError as e:
        fail(str(e))
    typer.echo(f"serving deployment flywheel-scheduled/{name} ({'cron ' + cron if cron else f'every {interval:g} s'}); "
               "Ctrl-C stops it")
    serve_here(cfg, name, schedule_)


def main() -> None:
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:
        damaged = damaged_file(e)
        if damaged is None:
            raise
        sys.stderr.write(f"error: {damaged}\n")
        sys.exit(USAGE)


if __name__ == "__main__":
    main()
