import json
import subprocess
import sys

import pytest
from datasets import load_from_disk
from prefect.testing.utilities import prefect_test_harness

from flows.flywheel_flow import flywheel
from flywheel.arena import read_plan
from flywheel.store import RunLockedError, RunStore


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def finished_run(harness, tiny_models_dir, tmp_path_factory):
    from flywheel.config import FlywheelConfig

    from tests.conftest import tiny_tree

    root = tmp_path_factory.mktemp("runs")
    cfg = FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, root, run__name="flow"))
    run_dir = flywheel(cfg.model_dump(mode="json"))
    return RunStore(root / "flow") if run_dir else None


def test_flow_writes_the_run_directory(finished_run):
    root = finished_run.root
    for name in ("config.yaml", "manifest.json", "summary.json", "ratings/iter-0002.json", "ratings/iter-0002.md",
                 "ratings/history.json", "iter-0001/sft/README.md", "models/student@1/config.json",
                 "models/student@2/config.json"):
        assert (root / name).exists(), name
    summary = json.loads((root / "summary.json").read_text())
    assert summary["run_id"] == "flow" and summary["targets"] == ["student"]
    assert [e["iteration"] for e in summary["iterations"]] == [0, 1, 2]
    base, last = summary["iterations"][0], summary["iterations"][-1]
    assert base["battles"] == 0 and set(base["eval"]) == {"student@0"}
    assert last["battles"] == 48 and last["train_steps"] == {"student": 4}
    ev = last["eval"]["student@2"]
    assert 0 <= ev["accuracy"] <= 1 and set(ev["accuracy_by_category"]) == {"add", "sub", "mul", "rev", "sort", "count"}
    lo, hi = ev["elo_ci"]
    assert lo <= ev["elo"] <= hi
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["packages"]["trl"] and "iter-0002/train" in manifest["timings"]


def test_curated_datasets_open_with_load_from_disk(finished_run):
    root = finished_run.root
    summary = json.loads((root / "summary.json").read_text())
    for e in summary["iterations"][1:]:
        sft = load_from_disk(str(root / f"iter-{e['iteration']:04d}" / "sft"))
        dpo = load_from_disk(str(root / f"iter-{e['iteration']:04d}" / "dpo"))
        assert len(sft) == e["sft_examples"] and len(dpo) == e["dpo_pairs"]
        assert {"prompt", "completion", "source_model", "battle_id"} <= set(sft.column_names)
        assert {"prompt", "chosen", "rejected"} <= set(dpo.column_names)


def test_battle_log_matches_the_plan_exactly(finished_run):
    for k in (1, 2):
        plan = {s.battle_id for s in read_plan(finished_run, k)}
        logged = [b.battle_id for b in finished_run.battles(k, "train")]
        assert sorted(logged) == sorted(plan) and len(set(logged)) == len(logged)
        assert all(b.model_a != b.model_b for b in finished_run.battles(k, "train"))
        # Seats are randomised: the target sits in both positions.
        assert {b.model_a.startswith("student") for b in finished_run.battles(k, "train")} == {True, False}


def test_elo_command_prints_the_leaderboard(finished_run, cli_env):
    out = subprocess.run([sys.executable, "-m", "flywheel.cli", "elo", str(finished_run.root), "--format", "json"],
                         capture_output=True, text=True, env=cli_env, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["model"] for r in rows} == {"student@0", "student@1", "student@2", "calc", "scribe", "generalist"}
    assert all({"rating", "lower", "upper", "rank", "battles", "win_rate"} <= set(r) for r in rows)


def test_a_run_directory_in_use_is_refused(finished_run):
    other = RunStore(finished_run.root)
    other.lock()
    try:
        with pytest.raises(RunLockedError, match="in use"):
            RunStore(finished_run.root).lock()
    finally:
        other.unlock()


def test_each_iteration_publishes_leaderboard_artifacts(finished_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_="leaderboard")))
    kinds = {(a.key, a.type) for a in arts}
    assert ("leaderboard-flow", "table") in kinds and ("leaderboard-md-flow", "markdown") in kinds
    assert sum(a.key == "leaderboard-flow" for a in arts) == 3  # baseline + 2 iterations


def test_eval_subsets_are_stratified_and_rated(finished_run):
    root = finished_run.root
    subsets = json.loads((root / "ratings" / "eval-subsets.json").read_text())
    ids = subsets["prompt_ids"]
    assert set(ids["mix"]) == set(ids["diverse"]) | set(ids["hard"])
    evals = {b.prompt_id: b.category for b in finished_run.battles(0, "eval")}
    assert {evals[i] for i in ids["diverse"]} == set(evals.values())  # every category is represented
    boards = json.loads((root / "ratings" / "iter-0002-subsets.json").read_text())
    assert set(boards) == {"diverse", "hard", "mix"} and all(boards.values())
    summary = json.loads((root / "summary.json").read_text())
    assert set(summary["iterations"][-1]["eval"]["student@2"]["elo_by_subset"]) == {"diverse", "hard", "mix"}


def test_elo_history_categories_subsets_and_plot(finished_run, cli_env, tmp_path):
    def elo(*args):
        p = subprocess.run([sys.executable, "-m", "flywheel.cli", "elo", str(finished_run.root), *args],
                           capture_output=True, text=True, env=cli_env, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout

    hist = json.loads(elo("--history", "--format", "json"))
    assert {r["iteration"] for r in hist} == {0, 1, 2}
    assert {r["model"] for r in hist if r["iteration"] == 2} >= {"student@0", "student@1", "student@2"}
    cats = json.loads(elo("--by", "category", "--format", "json"))
    assert {r["category"] for r in cats} == {"add", "sub", "mul", "rev", "sort", "count"}
    hard = json.loads(elo("--subset", "hard", "--format", "json"))
    assert hard and all("rating" in r for r in hard)
    assert "subset: mix" in elo("--subset", "all", "--format", "md")
    png = tmp_path / "elo.png"
    assert "wrote" in elo("--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize("policy", ["uniform", "ucb"])
def test_other_policies_run_end_to_end(harness, tiny_models_dir, tmp_path, policy):
    from flywheel.config import FlywheelConfig

    from tests.conftest import tiny_tree

    tree = tiny_tree(tiny_models_dir, tmp_path, run__name=policy, run__iterations=1, select__policy=policy)
    flywheel(FlywheelConfig.model_validate(tree).model_dump(mode="json"))
    summary = json.loads((tmp_path / policy / "summary.json").read_text())
    assert [e["iteration"] for e in summary["iterations"]] == [0, 1]
    arms = summary["iterations"][1]["bandit"]["student"]
    assert sum(a["battles"] for a in arms) == 48 and abs(sum(a["share"] for a in arms) - 1) < 1e-3


def test_bandit_state_and_report(finished_run, cli_env):
    root = finished_run.root
    states = sorted((root / "bandits").glob("iter-*-student.json"))
    assert [p.name for p in states][:2] == ["iter-0001-r1-student.json", "iter-0001-r2-student.json"]
    assert len(states) == 2 * 4  # 2 iterations x 4 rounds
    last = json.loads(states[-1].read_text())
    assert last["prompt"]["policy"] == "thompson" and sum(last["prompt"]["total_pulls"]) == 96
    out = subprocess.run([sys.executable, "-m", "flywheel.cli", "arms", str(root), "--format", "json"],
                         capture_output=True, text=True, env=cli_env, timeout=120)
    rows = json.loads(out.stdout)
    assert {r["target"] for r in rows} == {"student"} and sum(r["battles"] for r in rows) == 48
    assert {"arm", "share", "pulls", "value"} <= set(rows[0])


def test_elo_consistency_with_a_reference(finished_run, cli_env, tmp_path):
    rows = json.loads((finished_run.root / "ratings" / "iter-0002.json").read_text())
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({r["model"]: r["rating"] for r in rows}))
    out = subprocess.run([sys.executable, "-m", "flywheel.cli", "elo", str(finished_run.root), "--reference", str(ref),
                          "--format", "json"], capture_output=True, text=True, env=cli_env, timeout=120)
    assert out.returncode == 0, out.stderr
    cons = json.loads(out.stdout)
    assert cons["spearman"] == 1.0 and cons["models"] == len(rows)
