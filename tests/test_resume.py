"""A run killed mid-iteration (SIGKILL, no clean-up; Ctrl-C; SIGTERM) resumes with no battle lost or duplicated."""

import json
import os
import signal
import subprocess
import sys
import time


from flywheel.ground.store import RunStore


def _as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a shell's background job would ignore SIGINT


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=_as_from_a_terminal)


def _kill_when(proc: subprocess.Popen, ready, how: int) -> str:
    """Once ``ready()`` holds, send ``how`` to the run and everything it started (as a terminal's
    Ctrl-C does: its process group); returns what it printed on stderr."""
    deadline = time.time() + 240
    while not ready() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert ready(), proc.stderr.read().decode()[-2000:]
    os.killpg(proc.pid, how)
    _, err = proc.communicate(timeout=60)
    if how != signal.SIGKILL:  # it stops at once and says how to go on, with no traceback
        assert proc.returncode == 128 + how, err.decode()[-2000:]
    return err.decode()


def _done_iterations(run_dir) -> list[int]:
    return [e["iteration"] for e in json.loads((run_dir / "summary.json").read_text())["iterations"]]


def test_a_run_killed_three_ways_resumes_without_losses_or_duplicates(tiny_config, cli_env):
    """One run of 2 iterations, killed three times, each kill resumed: Ctrl-C in iteration 1's
    first round, SIGTERM in iteration 2's (the resume crossed an iteration boundary), and kill -9
    (no clean-up) once the resume has played one more shard. Nothing is lost or counted twice,
    and the plans are those of the same run never interrupted."""
    cfg, path = tiny_config(run__name="killed", run__iterations=2, select__battles_per_iteration=96,
                            run__shard_size=24)
    run_dir = cfg.run.root / "killed"
    battles = run_dir / "battles"
    cmd = [sys.executable, "-m", "flywheel.face.cli", "run"]
    resume = cmd + ["--resume", str(run_dir)]
    hint = f"continue it with: flywheel run --resume {run_dir}"

    err = _kill_when(_start(cmd + [str(path)], cli_env),
                     lambda: (battles / "iter-0001-train-r1-s0000.parquet").exists(), signal.SIGINT)
    assert hint in err and "Traceback" not in err
    assert _done_iterations(run_dir) == [0]  # killed inside iteration 1

    err = _kill_when(_start(resume, cli_env), lambda: (battles / "iter-0002-train-r1-s0000.parquet").exists(),
                     signal.SIGTERM)
    assert hint in err and "Traceback" not in err
    assert _done_iterations(run_dir) == [0, 1]  # iteration 1 finished, killed inside iteration 2

    shards = set(battles.glob("iter-0002-*.parquet"))
    _kill_when(_start(resume, cli_env), lambda: bool(set(battles.glob("iter-0002-*.parquet")) - shards),
               signal.SIGKILL)
    assert _done_iterations(run_dir) == [0, 1]

    resumed = subprocess.run(resume, env=cli_env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Eval leaderboard" in resumed.stdout

    store = RunStore(run_dir)
    for k in (1, 2):
        plan = [s.battle_id for s in store.plan(k)]
        logged = [b.battle_id for b in store.battles(k, "train")]
        assert len(plan) == 96
        assert sorted(logged) == sorted(plan), "battles lost or duplicated"
        judged = store.judgments(k, "train")
        assert set(judged) == set(plan)
    eval_ids = [b.battle_id for b in store.battles(None, "eval")]
    assert len(eval_ids) == len(set(eval_ids))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [e["iteration"] for e in summary["iterations"]] == [0, 1, 2]
    assert all(e["battles"] == 96 for e in summary["iterations"][1:])
    assert not list(run_dir.glob("iter-*/train-state"))  # training's checkpoints go once its version is saved

    # The same run, never interrupted, plans exactly the same battles: the bandit state and every
    # selection round were restored, not redrawn.
    assert [[s.battle_id for s in store.plan(k)] for k in (1, 2)] == straight_plans(tiny_config)


def straight_plans(tiny_config) -> list[list[str]]:
    """The battle ids that the killed run's config plans in iterations 1 and 2 when never
    interrupted: run in this process, without Prefect (run_to is what the flow runs too)."""
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.iteration import run_to

    straight, _ = tiny_config(run__name="straight", select__battles_per_iteration=96, run__shard_size=24)
    ctx = open_run(straight)
    try:
        run_to(ctx, straight.run.iterations)
    finally:
        close_run(ctx)
    ref = RunStore(straight.run.root / "straight")
    return [[s.battle_id for s in ref.plan(k)] for k in (1, 2)]


def test_a_run_directory_made_before_the_stage_restructure_resumes(tiny_models_dir, cli_env, tmp_path):
    """tests/fixtures/run-before-16 was written by the code before issue 16's restructure, killed in
    round 2 of iteration 1 (round 1 played and judged, one shard of round 2 played). Today's code
    resumes it: nothing on disk is redone or rewritten, and the iteration completes."""
    import shutil
    from pathlib import Path

    import yaml

    fixture = Path(__file__).parent / "fixtures" / "run-before-16"
    run_dir = tmp_path / "runs" / "before-16"
    shutil.copytree(fixture, run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["run"]["root"], cfg["world"]["models_dir"] = str(tmp_path / "runs"), str(tiny_models_dir)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    def kept_as_is(p: Path) -> bool:  # logs, plans, stage results and bandit state (not the caches)
        logs = p.suffix in (".parquet", ".jsonl") and p.parent.name != "cache"
        return p.is_file() and (logs or p.parent.name in ("stages", "bandits"))

    kept = {p.relative_to(fixture): p.read_bytes() for p in fixture.rglob("*") if kept_as_is(p)}
    before = json.loads((fixture / "summary.json").read_text())

    resumed = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", "--resume", str(run_dir)], env=cli_env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for rel, data in kept.items():  # logs only grow; shards, plans and stage results stay as they were
        now = (run_dir / rel).read_bytes()
        assert (now.startswith(data) if rel.name == "usage.jsonl" else now == data), f"{rel} was rewritten"
    store = RunStore(run_dir)
    plan = [s.battle_id for s in store.plan(1)]
    logged = [b.battle_id for b in store.battles(1, "train")]
    assert len(plan) == 48 and sorted(logged) == sorted(plan)
    assert set(store.judgments(1, "train")) == set(plan)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [e["iteration"] for e in summary["iterations"]] == [0, 1]
    assert summary["iterations"][0] == before["iterations"][0]
    assert summary["iterations"][1]["battles"] == 48 and (run_dir / "models" / "student@1" / "config.json").exists()


def test_the_watchdog_ends_what_it_last_saw_whole_when_the_run_dies_during_a_look(monkeypatch):
    """The run dies while the watchdog lists its descendants: they have moved to a new parent, so
    that look finds none; the watchdog must end the ones of its last whole look, not nothing."""
    import itertools

    import psutil

    from flywheel.ground import interrupt

    class Child:
        pid = 4242

        def is_running(self):
            return True

    looks = itertools.chain([[Child()]], itertools.repeat([]))  # later looks: taken as the run died, its children moved

    class Run:
        def __init__(self, pid):
            pass

        def children(self, recursive):
            return next(looks)

    parents = iter([1, 1, 1, 7, 7, 7])  # the run (pid 1) is the parent until the second look
    ended = []
    monkeypatch.setattr(psutil, "Process", Run)
    monkeypatch.setattr(interrupt.os, "getppid", lambda: next(parents))
    monkeypatch.setattr(interrupt.time, "sleep", lambda s: None)
    monkeypatch.setattr(interrupt.signal, "signal", lambda *a: None)
    monkeypatch.setattr(interrupt, "end", lambda children: ended.extend(c.pid for c in children))
    interrupt.watch(1)
    assert ended == [4242]


def test_a_run_killed_alone_leaves_no_process_behind(tiny_config, cli_env):
    """kill -9 of `flywheel run`'s process alone (as the OOM killer does), not of its group: its
    watchdog ends what it started, Prefect's temporary server first of all."""
    import psutil

    cfg, path = tiny_config(run__name="alone", select__battles_per_iteration=96, run__shard_size=24)
    env = {k: v for k, v in cli_env.items() if k != "PREFECT_API_URL"}  # no server: Prefect starts its own
    proc = subprocess.Popen([sys.executable, "-m", "flywheel.face.cli", "run", str(path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    started = cfg.run.root / "alone" / "config.yaml"  # written once the server is up and the run has begun

    def commands() -> list[str]:
        try:
            return [" ".join(c.cmdline()) for c in psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def both(cmds: list[str]) -> bool:
        return any("uvicorn" in c for c in cmds) and any("flywheel.ground.interrupt WATCH" in c for c in cmds)

    deadline = time.time() + 240
    while not (started.exists() and both(commands())) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert started.exists() and both(commands()), proc.stderr.read().decode()[-2000:]
    time.sleep(1.5)  # the watchdog looks every 0.5 s: it has seen the server
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.wait(timeout=30)
    proc.stderr.close()
    _, alive = psutil.wait_procs(children, timeout=20)
    assert not alive, [" ".join(c.cmdline()) for c in alive]


def test_resume_extends_a_finished_run_with_run_iterations_and_refuses_anything_else(tiny_config, cli_env):
    """``--resume DIR --set run.iterations=N`` extends a finished run (and config.yaml keeps N for a
    later plain --resume); a recipe or any other --set with --resume is one error line naming them,
    exit 2, nothing written; N below the iterations done is refused too."""
    import yaml

    cfg, path = tiny_config(run__name="extended", run__iterations=1, select__battles_per_iteration=16, train__steps=2)
    run_dir = cfg.run.root / "extended"
    cli = [sys.executable, "-m", "flywheel.face.cli", "run"]
    first = subprocess.run(cli + [str(path)], env=cli_env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]

    def snapshot():
        return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"}

    before = snapshot()
    for extra in ([str(path)], ["--set", "select.policy=uniform"], [str(path), "--set", "run.iterations=2",
                                                                     "--set", "train.steps=9"]):
        refused = subprocess.run(cli + extra + ["--resume", str(run_dir)], env=cli_env, capture_output=True, text=True,
                                 timeout=120)
        assert refused.returncode == 2, refused.stderr[-3000:]
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --resume"), refused.stderr
        named = [f"CONFIG {path}"] if str(path) in extra else []
        named += [f"--set {s}" for s in extra if s.startswith(("select.", "train."))]
        assert all(n in lines[0] for n in named) and "run.iterations=2" not in lines[0].split("not:")[1], lines[0]
    assert snapshot() == before, "a refused --resume wrote something"

    extended = subprocess.run(cli + ["--set", "run.iterations=2", "--resume", str(run_dir)], env=cli_env,
                              capture_output=True, text=True, timeout=600)
    assert extended.returncode == 0, extended.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [e["iteration"] for e in summary["iterations"]] == [0, 1, 2]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["run"]["iterations"] == 2  # a plain --resume keeps it

    fewer = subprocess.run(cli + ["--set", "run.iterations=1", "--resume", str(run_dir)], env=cli_env,
                           capture_output=True, text=True, timeout=120)
    assert fewer.returncode == 2 and fewer.stderr.strip().splitlines() == [
        "error: --set run.iterations=1: the run has already done 2 iteration(s); give at least 2"], fewer.stderr
