"""Models served over HTTP by a real server: `transformers serve` (in transformers) loads the tiny
models and each trained version by path. The openai player asks them as the local player does, a
run starts and stops the server itself (serve.command), and what goes wrong is refused or stops
the run cleanly: a server that does not come up, a path that does not exist, a server that dies.
The production path's run also reports to MLflow (tracking.kind), across its kill and resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from flywheel.config.tree import ServeConfig
from flywheel.players.hf import TransformersPlayer
from flywheel.players.openai_player import OpenAIPlayer
from flywheel.players.player import SamplingParams
from flywheel.players.server import base_url, start, stop
from flywheel.worlds.tasks import build_suite
from tests.conftest import free_port, tiny_tree

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")
SERVE = ["transformers", "serve", "--device", "cpu"]


def served_tree(models_dir: Path, runs: Path, port: int, **over) -> dict:
    url = f"http://127.0.0.1:{port}/v1"
    tree = tiny_tree(models_dir, runs, **over)
    fast = {"kind": "openai", "base_urls": [url], "max_concurrency": 8, "max_retries": 1, "backoff_s": 0.05,
            "timeout_s": 30}
    tree["targets"] = [{"name": "student", "path": str(models_dir / "student"), **fast}]
    tree["opponents"] = [{"name": n, "path": str(models_dir / n), **fast} for n in ("calc", "scribe")]
    return tree


def requests_in(log: Path, ok_only: bool = False) -> int:
    """Completions requests in a server's own log (answered 200, with ``ok_only``)."""
    return sum(1 for line in log.read_text().splitlines()
               if "POST /v1/completions" in line and (not ok_only or " 200 " in line))


def test_a_served_tiny_model_answers_as_the_local_player_does(tiny_models_dir, tmp_path):
    cfg = ServeConfig(command=SERVE, port=free_port())
    log = tmp_path / "server.log"
    proc = start(cfg, log)
    try:
        prompts = build_suite(0, 1, 4)[-1][:24]  # eval prompts of every category
        params = SamplingParams(12, None, 0, ())
        for name in ("calc", "scribe"):
            path = str(tiny_models_dir / name)
            # on the server's device (SERVE: the CPU); auto would pick a GPU, in bf16
            local = TransformersPlayer(name, path, device="cpu").generate(prompts, params)
            served = OpenAIPlayer(name, model=path, base_urls=[base_url(cfg)])
            served.chat = False  # no chat template: raw text through /v1/completions
            remote = served.generate(prompts, params)
            assert [g.error for g in remote] == [None] * len(prompts)
            assert [g.text for g in remote] == [g.text for g in local]
        assert requests_in(log) == 2 * len(prompts)  # the server's own count
    finally:
        stop(proc)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{cfg.port}/health", timeout=2)


@pytest.mark.parametrize("command, says", [
    ([sys.executable, "-c", "import time; time.sleep(60)"], "did not answer"),
    ([sys.executable, "-c", "raise SystemExit(3)"], "exited with code 3"),
])
def test_a_server_that_does_not_come_up_is_refused_and_nothing_is_written(tiny_models_dir, tmp_path, cli_env,
                                                                          command, says):
    port = free_port()
    tree = served_tree(tiny_models_dir, tmp_path / "runs", port, run__name="never")
    tree["serve"] = {"command": command, "port": port, "startup_timeout_s": 3}
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tree))
    got = subprocess.run([FLYWHEEL, "run", str(recipe)], env=cli_env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 2, got.stderr[-2000:]
    [line] = got.stderr.strip().splitlines()
    assert line.startswith("error: serve: the server ") and says in line
    assert not (tmp_path / "runs" / "never").exists()


def test_a_served_model_path_that_does_not_exist_is_refused(tiny_models_dir, tmp_path, cli_env):
    tree = served_tree(tiny_models_dir, tmp_path / "runs", free_port(), run__name="nopath")
    tree["opponents"][0]["path"] = str(tmp_path / "no-such-model")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tree))
    got = subprocess.run([FLYWHEEL, "run", str(recipe)], env=cli_env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        f"error: opponents.0 (calc): path {tmp_path / 'no-such-model'} does not exist"]
    assert not (tmp_path / "runs").exists()


def server_pid(port: int) -> int:
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "serve" in cmd and "--port" in cmd and cmd[cmd.index("--port") + 1] == str(port):
            return p.pid
    raise AssertionError(f"no server on port {port}")


def test_a_served_and_tracked_run_asks_each_version_by_path_and_outlives_its_server_dying(
        tiny_models_dir, tmp_path, cli_env):
    pytest.importorskip("mlflow")  # the tracking extra, which make install installs (a GPU check may carry none)
    port = free_port()
    tree = served_tree(tiny_models_dir, tmp_path / "runs", port, run__name="served", run__iterations=1)
    tree["serve"] = {"command": SERVE, "port": port}  # the run starts and stops its own server
    uri = f"sqlite:///{tmp_path / 'tracker' / 'mlflow.db'}"
    tree["tracking"] = {"kind": "mlflow", "uri": uri}  # and reports to MLflow, across the kill and the resume
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tree))
    run = tmp_path / "runs" / "served"
    proc = subprocess.Popen([FLYWHEEL, "run", str(recipe)], env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (run / "iter-0000" / "stages" / "evaluate.json").exists():  # the baseline is done
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    os.kill(server_pid(port), signal.SIGKILL)  # the server dies before iteration 1's battles
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    [line] = [x for x in err.splitlines() if x.startswith("error:") or "Traceback" in x]
    assert "answers failed after retries" in line and f"flywheel run --resume {run}" in line
    assert not list((run / "battles").glob("iter-0001-*"))  # nothing of the failed round was kept
    again = subprocess.run([FLYWHEEL, "run", "--resume", str(run)], env=cli_env, capture_output=True, text=True,
                           timeout=600)  # starts a server of its own again
    assert again.returncode == 0, again.stderr[-3000:]
    logs = sorted((run / "server-logs").iterdir())
    assert len(logs) == 2  # one per start, in the run directory
    assert f"Loading {(run / 'models' / 'student@1').resolve()}" in logs[1].read_text()  # the new version, by path
    usage = [json.loads(line) for line in (run / "usage.jsonl").read_text().splitlines()]
    answered = sum(r.get("calls", 0) - r.get("retries", 0) - r.get("failures", 0) for r in usage)  # calls: attempts
    assert answered == sum(requests_in(log, ok_only=True) for log in logs) > 0  # each answer counted once
    from flywheel.ground.store import RunStore

    battles = RunStore(run).battles(1, "train")
    assert len({b.battle_id for b in battles}) == len(battles) == tree["select"]["battles_per_iteration"]
    assert all(b.ok for b in battles)
    summary = json.loads((run / "summary.json").read_text())
    assert [e["iteration"] for e in summary["iterations"]] == [0, 1]
    with pytest.raises(httpx.HTTPError):  # stopped with the run
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    tracked_as_summary(uri, run, summary)


def tracked_as_summary(uri: str, run: Path, summary: dict) -> None:
    """The run's figures, read back through MLflow's own client, are summary.json's and the train
    stage's: one MLflow run for the flywheel run (the resumed process went on in it), each iteration
    logged once (the baseline by the process that was stopped, iteration 1 by the resumed one)."""
    from mlflow.tracking import MlflowClient

    from flywheel.ground.store import RunStore

    store = RunStore(run)
    client = MlflowClient(uri)
    run_id = json.loads(store.tracking_path.read_text())["run_id"]

    def history(key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))

    got = client.get_run(run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "served"
    assert got.data.tags["flywheel.run_dir"] == str(run.resolve())
    assert got.data.params["train.steps"] == "4" and got.data.params["tracking.kind"] == "mlflow"
    assert history("iteration") == [(0, 0), (1, 1)]  # each once
    base, first = summary["iterations"]
    assert history("eval/student/accuracy") == [(0, base["eval"]["student@0"]["accuracy"]),
                                                (1, first["eval"]["student@1"]["accuracy"])]
    assert history("eval/calc/accuracy/add")[-1] == (1, first["opponents_eval"]["calc"]["accuracy_by_category"]["add"])
    student = first["eval"]["student@1"]
    assert [history(f"elo/student{part}")[-1] for part in ("", "/lower", "/upper")] == \
        [(1, student["elo"]), (1, student["elo_ci"][0]), (1, student["elo_ci"][1])]
    assert history("validation/student/accuracy")[-1] == (1, student["validation"]["accuracy"])
    arm = first["bandit"]["student"][0]
    assert history(f"bandit/student/{arm['arm']}/share") == [(1, arm["share"])]
    assert history("judge/judged") == [(0, base["judge"]["judged"]), (1, first["judge"]["judged"])]
    assert history("train/student/loss") == [(1, store.stage_json(1, "train")["student"]["loss"])]
    assert [s for s, _ in history("trainer/student/sft/loss")] == [1, 2, 3, 4]  # the trainer's logged steps
    experiment = client.get_experiment_by_name("flywheel")
    assert [r.info.run_id for r in client.search_runs([experiment.experiment_id])] == [run_id]


def test_served_players_are_asked_for_their_paths_as_their_weights_read(tiny_models_dir, tmp_path):
    """What a run resolves for openai players that name a path and no model: each target version
    asked for by its checkpoint folder, the judge's model by its own path, both in raw text (the
    tiny models have no chat template); a player with a model name keeps it and chats."""
    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.store import RunStore
    from flywheel.worlds.world import Roster

    tree = served_tree(tiny_models_dir, tmp_path / "runs", 8000)
    tree["judge"] = {"kind": "llm", "player": {"name": "judge", "kind": "openai", "path": str(tiny_models_dir / "calc"),
                                               "base_urls": ["http://127.0.0.1:8000/v1"]}}
    tree["opponents"].append({"name": "named", "kind": "openai", "model": "gpt-x", "base_urls": ["http://x:1/v1"]})
    cfg = FlywheelConfig.model_validate(tree)
    store = RunStore(tmp_path / "run")
    roster = Roster(cfg, store)
    version = roster.build(cfg.targets[0], "student@1")
    assert (version.model, version.chat) == (str(store.model_dir("student@1").resolve()), False)
    judge = roster.build(cfg.judge.player, "judge")
    assert (judge.model, judge.chat) == (str((tiny_models_dir / "calc").resolve()), False)
    named = roster.build(cfg.opponents[-1], "named")
    assert (named.model, named.chat) == ("gpt-x", True)
