import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from flows.flywheel_flow import flywheel, run_flywheel
from flywheel.ground.store import RunLockedError, RunStore
from flywheel.learning.curation import load_dataset_dir
from tests.conftest import flywheel_cli


@pytest.fixture(scope="module")
def finished_run(harness, tiny_models_dir, tmp_path_factory):
    from flywheel.config.tree import FlywheelConfig
    from tests.conftest import machine_threads, tiny_tree

    root = tmp_path_factory.mktemp("runs")
    cfg = FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, root, run__name="flow", run__shard_size=6))
    with machine_threads():  # the golden run
        run_dir = run_flywheel(cfg)  # as the CLI runs it: tagged, on the config's runner
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
    # The mapped shard tasks' wall time is recorded apart: the battle stage only collects after them.
    timings = manifest["timings"]
    assert timings["iter-0001/play-shards-r1"] > timings["iter-0001/battle-r1"]
    assert "iter-0001/judge-shards-r1" in timings
    [where] = manifest["machines"]
    assert where["cpus"] >= 1 and where["python"].startswith("3.") and isinstance(where["gpus"], list)


GOLDEN = Path(__file__).parent / "fixtures" / "golden.json"


def check_golden(name: str, run_dir: Path, models_dir: Path) -> None:
    """The run made exactly what the fixture's run made for the same config and seed
    (tests/fixtures/golden.json): the same battles, answers, verdicts, datasets and accuracies,
    from the shipped pre-trained models (tests/fixtures/tiny-models). Where this CPU's arithmetic
    trained other weights than the fixture machine's, what the pre-trained models alone made (the
    first iteration's battles, verdicts and datasets; iteration 0's evaluation) must still be the
    same, and a warning says the rest was not compared. ``FLYWHEEL_UPDATE_GOLDEN=1`` rewrites the
    entry (only for a change that means to alter results; say so in its commit)."""
    import os
    import warnings

    from tests.golden import before_training, digest, weights_digest

    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    got = {"weights": weights_digest(models_dir), **digest(run_dir)}
    if os.environ.get("FLYWHEEL_UPDATE_GOLDEN") == "1":
        golden[name] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    want = golden[name]
    assert got["weights"] == want["weights"], ("the shipped tiny models are stale (their fingerprint changed, so they "
                                               "were pre-trained anew): python -m tests.golden --models")
    if got["trained"] != want["trained"]:
        warnings.warn(f"golden {name}: this CPU trained other weights than the fixture machine's; compared only "
                      "what the pre-trained models made (iteration 1's battles, verdicts and datasets, iteration 0)",
                      RuntimeWarning)
        assert before_training(got) == before_training(want)
        return
    assert got == want


def test_same_seed_same_results_as_the_fixture_machine_or_on_another_cpu_its_untrained_part(finished_run,
                                                                                             tiny_models_dir):
    check_golden("flow", finished_run.root, tiny_models_dir)


def test_another_cpus_training_still_compares_what_the_shipped_models_made(finished_run, tiny_models_dir,
                                                                           tmp_path, monkeypatch):
    """Where this CPU trained other weights than the fixture machine's, the golden check compares
    iteration 1's battles, verdicts and datasets and iteration 0 (and warns); a change there fails."""
    import tests.test_flow as me

    golden = json.loads(GOLDEN.read_text())
    other = dict(golden["flow"], trained="another-cpu", iterations={**golden["flow"]["iterations"], "2": {}})
    monkeypatch.setattr(me, "GOLDEN", tmp_path / "golden.json")
    me.GOLDEN.write_text(json.dumps({"flow": other}))
    with pytest.warns(RuntimeWarning, match="trained other weights"):
        check_golden("flow", finished_run.root, tiny_models_dir)  # iteration 2 differs: not compared
    other["log"] = {**other["log"], "1/train": [0, "changed"]}
    me.GOLDEN.write_text(json.dumps({"flow": other}))
    with pytest.warns(RuntimeWarning), pytest.raises(AssertionError):
        check_golden("flow", finished_run.root, tiny_models_dir)


def test_the_category_table_puts_every_target_version_next_to_every_opponent(finished_run):
    from flywheel.ground import reports

    summary = json.loads((finished_run.root / "summary.json").read_text())
    rows, cats = reports.category_rows(summary)
    assert [r["model"] for r in rows] == ["student@0", "student@1", "student@2", "calc", "generalist", "scribe"]
    assert cats == sorted(["add", "sub", "mul", "rev", "sort", "count"])
    last = summary["iterations"][-1]
    assert rows[2]["overall"] == last["eval"]["student@2"]["accuracy"]
    assert {c: rows[3][c] for c in cats} == last["opponents_eval"]["calc"]["accuracy_by_category"]
    table = reports.category_table(summary).splitlines()
    assert table[0].split() == ["model", "overall", *cats] and len(table) == 2 + len(rows)
    # the same on the validation split, the one that steers: the opponents' own validation figures beside
    val, val_cats = reports.category_rows(summary, "validation")
    assert [r["model"] for r in val] == [r["model"] for r in rows] and val_cats == cats
    assert val[2]["overall"] == last["eval"]["student@2"]["validation"]["accuracy"]
    assert {c: val[3][c] for c in cats} == last["opponents_eval"]["calc"]["validation"]["accuracy_by_category"]
    assert val[3] != rows[3]  # calc on the validation prompts, not its eval figures again


def test_the_run_report_shows_the_validation_split_by_category_next_to_every_opponent(finished_run):
    from flywheel.face.queries import VALIDATION_HEADING, result_text
    from flywheel.ground.run_view import RunView

    summary = json.loads((finished_run.root / "summary.json").read_text())
    section = result_text(RunView.open(finished_run.root)).split(VALIDATION_HEADING)[1].strip("\n").split("\n\n")[0]
    lines = section.splitlines()
    assert lines[0].split()[:2] == ["model", "overall"]
    calc = next(x for x in lines if x.startswith("calc "))
    assert calc.split()[1] == f"{summary['iterations'][-1]['opponents_eval']['calc']['validation']['accuracy']:.3f}"


def test_a_runs_datasets_open_with_load_dataset_pandas_and_duckdb(finished_run):
    import duckdb
    import pandas as pd
    from datasets import load_dataset

    root = finished_run.root
    summary = json.loads((root / "summary.json").read_text())
    for e in summary["iterations"][1:]:
        folder = root / f"iter-{e['iteration']:04d}"
        sft, dpo = load_dataset_dir(folder / "sft"), load_dataset_dir(folder / "dpo")
        assert len(sft) == e["sft_examples"] and len(dpo) == e["dpo_pairs"]
        assert {"prompt", "completion", "source_model", "battle_id"} <= set(sft.column_names)
        assert {"prompt", "chosen", "rejected"} <= set(dpo.column_names)
        for kind, n in (("sft", e["sft_examples"]), ("dpo", e["dpo_pairs"])):
            assert len(pd.read_parquet(folder / kind / "data")) == n
            assert duckdb.sql(f"SELECT count(*) FROM '{folder / kind}/data/*.parquet'").fetchall() == [(n,)]
            if n:  # datasets refuses a split with no rows
                assert load_dataset("parquet", data_dir=str(folder / kind / "data"), split="train").num_rows == n


def test_battle_log_matches_the_plan_exactly(finished_run):
    for k in (1, 2):
        plan = {s.battle_id for s in finished_run.plan(k)}
        logged = [b.battle_id for b in finished_run.battles(k, "train")]
        assert sorted(logged) == sorted(plan) and len(set(logged)) == len(logged)
        assert all(b.model_a != b.model_b for b in finished_run.battles(k, "train"))
        # Seats are randomised: the target sits in both positions.
        assert {b.model_a.startswith("student") for b in finished_run.battles(k, "train")} == {True, False}


def test_elo_command_prints_the_leaderboard(finished_run, cli_env):
    out = flywheel_cli("elo", finished_run.root, "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["model"] for r in rows} == {"student@0", "student@1", "student@2", "calc", "scribe", "generalist"}
    assert all({"rating", "lower", "upper", "rank", "battles", "win_rate"} <= set(r) for r in rows)


def test_a_run_directory_in_use_is_refused(finished_run, cli_env):
    cmd = [sys.executable, "-m", "flywheel.face.cli", "run", "--resume", str(finished_run.root), "--json"]
    other = RunStore(finished_run.root)
    other.lock()
    try:
        with pytest.raises(RunLockedError, match="in use"):
            RunStore(finished_run.root).lock()
        busy = subprocess.run(cmd, capture_output=True, text=True, env=cli_env, timeout=300)
        assert busy.returncode == 75 and "in use" in busy.stderr, busy.stderr[-2000:]  # the documented code
    finally:
        other.unlock()
    done = subprocess.run(cmd, capture_output=True, text=True, env=cli_env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)  # --json: only the machine-readable result on stdout
    assert out["run_dir"] == str(finished_run.root.resolve()) and out["iterations"] == [0, 1, 2]
    assert Path(out["summary"]).is_file() and Path(out["config"]).is_file()


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
        p = flywheel_cli("elo", finished_run.root, *args)
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


def test_the_report_page_shows_every_section_of_the_run_on_one_offline_page(finished_run, tmp_path):
    from typer.testing import CliRunner

    from flywheel.face.cli import app
    from tests.test_report_page import read_page

    out = tmp_path / "report.html"
    got = CliRunner().invoke(app, ["report", str(finished_run.root), "--html", str(out)])
    assert got.exit_code == 0 and got.output.startswith(f"wrote {out}"), got.output
    page = read_page(out)  # every section with its heading, every picture a PNG inside the page
    assert page.empty == {}  # a finished run has data for every section
    assert {sid: len(imgs) for sid, imgs in page.images.items()} == {
        "leaderboard": 1, "progress": 1, "categories": 1, "win-matrix": 1, "arms": 1, "judge": 1, "datasets": 1}
    board = json.loads((finished_run.root / "ratings" / "iter-0002.json").read_text())
    assert all(f" {r['model']} " in page.text["leaderboard"] for r in board)
    assert all(f" {c} " in page.text["categories"] for c in ("add", "sub", "mul", "rev", "sort", "count"))
    assert " verifier " in page.text["judge"] and " longer_wins " in page.text["judge"]
    assert " sft " in page.text["datasets"] and " student " in page.text["datasets"]


@pytest.mark.parametrize("policy", ["uniform", "ucb"])
def test_other_policies_run_end_to_end(harness, tiny_models_dir, tmp_path, policy):
    from flywheel.config.loading import load_config
    from tests.conftest import tiny_tree

    # --set bandit.policy=<policy> (the section's other name) reaches select.policy
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_tree(tiny_models_dir, tmp_path, run__name=policy, run__iterations=1)))
    auto = ["select.prompt_floor=auto"] if policy == "ucb" else []  # the adaptive floor, through a real run
    cfg = load_config(path, [f"bandit.policy={policy}", *auto])
    assert cfg.select.policy == policy
    flywheel(cfg.model_dump(mode="json"))
    summary = json.loads((tmp_path / policy / "summary.json").read_text())
    assert [e["iteration"] for e in summary["iterations"]] == [0, 1]
    arms = summary["iterations"][1]["bandit"]["student"]
    assert sum(a["battles"] for a in arms) == 48 and abs(sum(a["share"] for a in arms) - 1) < 1e-3
    if auto:  # all even before any reward, then what the rewards' spread over the cells leaves
        from flywheel.face.queries import arms_report
        from flywheel.ground.run_view import RunView

        report = arms_report(RunView.open(tmp_path / policy), None)
        assert report.floors[1] == {"student": 1.0} and set(report.floors) == {1, 2, 3, 4}
        assert all(0 <= f["student"] <= 1 for f in report.floors.values())
        assert "prompt floor (auto) per round: r1 student 1.00; r2 student " in report.header()


def test_bandit_state_and_report(finished_run, cli_env):
    root = finished_run.root
    states = sorted((root / "bandits").glob("iter-*-student.json"))
    assert [p.name for p in states][:2] == ["iter-0001-r1-student.json", "iter-0001-r2-student.json"]
    assert len(states) == 2 * 4  # 2 iterations x 4 rounds
    last = json.loads(states[-1].read_text())
    assert last["prompt"]["policy"] == "thompson" and sum(last["prompt"]["total_pulls"]) == 96
    # The select stage's reward step learnt each round once: its record says from how many battles.
    plans = {r: finished_run.plan(2, r) for r in range(1, 5)}
    for r in range(1, 5):
        reward = finished_run.stage_json(2, f"reward-r{r}")
        assert reward["reward"] == "yield" and reward["battles"] == {"student": len(plans[r])}
        assert 0 <= reward["mean"]["student"] <= 1
    out = flywheel_cli("arms", root, "--format", "json")
    rows = json.loads(out.stdout)
    assert {r["target"] for r in rows} == {"student"} and sum(r["battles"] for r in rows) == 48
    assert {"arm", "share", "pulls", "value"} <= set(rows[0])


def test_elo_consistency_with_a_reference(finished_run, cli_env, tmp_path):
    rows = json.loads((finished_run.root / "ratings" / "iter-0002.json").read_text())
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({r["model"]: r["rating"] for r in rows}))
    out = flywheel_cli("elo", finished_run.root, "--reference", ref, "--format", "json")
    assert out.returncode == 0, out.stderr
    cons = json.loads(out.stdout)
    assert cons["spearman"] == 1.0 and cons["models"] == len(rows)


# -- flywheel data: ls, show, stats, export on a real run directory ---------------------------
def data(cli_env, *args, ok=True):
    p = flywheel_cli("data", *args)
    assert (p.returncode == 0) == ok, p.stderr
    return p


def test_data_ls_lists_every_dataset_with_rows_and_sizes(finished_run, cli_env):
    root = finished_run.root
    rows = json.loads(data(cli_env, "ls", root, "--format", "json").stdout)
    by = {(r["iteration"], r["dataset"]): r for r in rows}
    summary = json.loads((root / "summary.json").read_text())
    for e in summary["iterations"][1:]:
        k = e["iteration"]
        assert by[(k, "sft")]["rows"] == e["sft_examples"] and by[(k, "dpo")]["rows"] == e["dpo_pairs"]
        assert by[(k, "battles")]["rows"] == len(finished_run.battles(k)) and by[(k, "sft")]["bytes"] > 0
    assert "iter-0001/sft" in data(cli_env, "ls", root).stdout
    assert "not a run directory" in data(cli_env, "ls", root / "iter-0001", ok=False).stderr


def test_data_show_stats_and_card_with_lineage(finished_run, cli_env):
    sft = finished_run.root / "iter-0001" / "sft"
    shown = [json.loads(line) for line in data(cli_env, "show", sft, "--limit", "3").stdout.splitlines()]
    assert len(shown) == min(3, len(load_dataset_dir(str(sft)))) and all("completion" in r for r in shown)
    battles = [json.loads(line) for line in data(cli_env, "show", finished_run.root / "battles", "--limit", "2").stdout.splitlines()]
    assert len(battles) == 2 and "response_a" in battles[0]
    st = json.loads(data(cli_env, "stats", sft).stdout)
    n = len(load_dataset_dir(str(sft)))
    assert st["rows"] == n and sum(st["categories"].values()) == n and sum(st["sources"].values()) == n
    assert st["lengths"]["prompt"]["min"] <= st["lengths"]["prompt"]["max"]
    if n:
        assert st["judge_margins"]["judged"] == n
    card = (sft / "README.md").read_text()
    lineage = json.loads((sft / "manifest.json").read_text())
    assert "judge: verifier" in card and "targets: student@0" in card
    assert lineage["iteration"] == 1 and lineage["rows"] == n and lineage["run_id"] == "flow"
    assert lineage["battle_log"] and all((finished_run.root / p).exists() for p in lineage["battle_log"])
    assert "opponents" in lineage and lineage["eval_split_hash"]
    bad = finished_run.root.parent / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{oops\n')
    assert "bad.jsonl:2" in data(cli_env, "show", bad, ok=False).stderr


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "sharegpt", "alpaca"])
def test_data_export_formats(finished_run, cli_env, tmp_path, fmt):
    import pyarrow.parquet as pq

    sft, dpo = finished_run.root / "iter-0002" / "sft", finished_run.root / "iter-0002" / "dpo"
    src = load_dataset_dir(str(sft)).to_list()
    out = tmp_path / f"sft.{fmt}"
    data(cli_env, "export", sft, "--format", fmt, "--out", out)
    rows = pq.read_table(out).to_pylist() if fmt == "parquet" else [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == len(src)
    if fmt == "alpaca" and rows:
        assert rows[0] == {"instruction": src[0]["prompt"], "input": "", "output": src[0]["completion"]}
    if fmt == "sharegpt" and rows:
        assert rows[0]["conversations"][1] == {"from": "gpt", "value": src[0]["completion"]}
    if fmt in ("jsonl", "parquet"):
        assert rows == src
    pairs = load_dataset_dir(str(dpo)).to_list()
    out = tmp_path / f"dpo.{fmt}"
    data(cli_env, "export", dpo, "--format", fmt, "--out", out)
    if fmt == "alpaca" and pairs:
        first = json.loads(out.read_text().splitlines()[0])
        assert (first["chosen"], first["rejected"]) == (pairs[0]["chosen"], pairs[0]["rejected"])
    if fmt == "sharegpt":
        assert "needs SFT rows" in data(cli_env, "export", finished_run.root / "battles", "--format", fmt,
                                        "--out", tmp_path / "x", ok=False).stderr


# -- scale-out: mapped shards on a local Dask cluster -------------------------------------------
def test_a_local_dask_cluster_plays_the_same_battles_as_the_default_runner(finished_run, harness, tiny_models_dir):
    pytest.importorskip("prefect_dask")
    from flows.flywheel_flow import run_flywheel
    from flywheel.config.tree import FlywheelConfig
    from tests.conftest import tiny_tree

    tree = tiny_tree(tiny_models_dir, finished_run.root.parent, run__name="dask", run__iterations=1,
                     run__shard_size=6, run__task_runner="dask", run__workers=2)
    dask = RunStore(Path(run_flywheel(FlywheelConfig.model_validate(tree))))
    shards = sorted(f.name for f in (dask.root / "battles").glob("iter-0001-train-*.parquet"))
    assert len(shards) == 4 * 2 and shards[:2] == ["iter-0001-train-r1-s0000.parquet", "iter-0001-train-r1-s0001.parquet"]
    usage = dask.read_jsonl("usage.jsonl")
    workers = {u["worker"] for u in usage if u["iteration"] == 1 and u["phase"] == "train"}
    assert len(workers) == 2, workers  # the shards ran on the cluster's two worker processes

    def log(store):
        judged = store.judgments(1, "train")
        return {b.battle_id: (b.model_a, b.model_b, b.response_a, b.response_b, judged[b.battle_id].winner)
                for b in store.battles(1, "train")}

    assert len(log(dask)) == 48 and log(dask) == log(finished_run)  # same battles, answers and verdicts


# -- several targets: compute allocation ------------------------------------------------------
def test_three_targets_share_compute_proportionally_and_merge(harness, tiny_models_dir, tmp_path):
    from flywheel.config.tree import FlywheelConfig
    from tests.conftest import machine_threads, tiny_tree

    tree = tiny_tree(tiny_models_dir, tmp_path, run__name="alloc", run__iterations=2, rating__bootstrap_rounds=5,
                     allocate__policy="proportional", allocate__warmup=1, allocate__floor=0.1,
                     allocate__sharing="federated", allocate__merge_strength=0.5, allocate__signal="loss")
    base = str(tiny_models_dir / "student")
    tree["targets"] = [{"name": "fast", "path": base, "learning_rate": 1e-2},
                       {"name": "mid", "path": base}, {"name": "slow", "path": base, "learning_rate": 1e-6}]
    with machine_threads():  # the golden run
        root = Path(flywheel(FlywheelConfig.model_validate(tree).model_dump(mode="json")))
    summary = json.loads((root / "summary.json").read_text())
    assert summary["targets"] == ["fast", "mid", "slow"]
    # The allocation recorded after iteration k is what iteration k+1 runs on: a warm-up of one
    # iteration at equal shares (allocated after the baseline), then the policy acts.
    warm, acting = summary["iterations"][0]["allocation"], summary["iterations"][1]["allocation"]
    assert warm["policy"] == "proportional" and not warm["acting"]
    assert warm["shares"] == pytest.approx({"fast": 1 / 3, "mid": 1 / 3, "slow": 1 / 3}, abs=1e-5)
    assert acting["acting"] and sum(acting["shares"].values()) == pytest.approx(1.0, abs=1e-5)
    assert min(acting["shares"].values()) >= 0.1 - 1e-9 and set(acting["learning_rates"]) == {"fast", "mid", "slow"}
    # signal loss: a learning rate is the drop of the *validation* loss per training step (the eval
    # split is only reported: its loss is recorded too, and it is not what the rate follows)
    loss = {t: [e["eval"][f"{t}@{e['iteration']}"]["validation"]["loss"] for e in summary["iterations"]]
            for t in ("fast", "mid", "slow")}
    eval_loss = [e["eval"][f"fast@{e['iteration']}"]["eval_loss"] for e in summary["iterations"]]
    assert eval_loss[0] - eval_loss[1] != pytest.approx(loss["fast"][0] - loss["fast"][1], rel=1e-3)
    steps = {t: summary["iterations"][1]["train_steps"][t] for t in loss}
    assert acting["learning_rates"]["fast"] == pytest.approx((loss["fast"][0] - loss["fast"][1]) / steps["fast"], rel=1e-3)
    assert loss["fast"][1] < loss["fast"][0] and loss["slow"][0] - loss["slow"][1] < loss["fast"][0] - loss["fast"][1]
    for k, alloc in ((1, warm), (2, acting)):  # battles and training steps per target follow the shares
        plan = RunStore(root).plan(k)
        per_target = {t: sum(1 for s in plan if f"{t}@{k - 1}" in (s.model_a, s.model_b)) for t in ("fast", "mid", "slow")}
        assert per_target == alloc["battles"]
        assert all(summary["iterations"][k]["train_steps"][t] <= alloc["train_steps"][t] for t in per_target)
    for t in ("fast", "mid", "slow"):
        assert (root / "models" / f"{t}@2" / "config.json").exists()
    check_golden("alloc", root, tiny_models_dir)
    # Federated: after each iteration's training the three (same-architecture) targets were merged,
    # weighted by accuracy; each version is half its own trained weights, half the weighted average.
    from safetensors.torch import load_file

    for k in (1, 2):
        merged = summary["iterations"][k]["merge"]
        (group,) = merged["groups"]
        assert group["targets"] == ["fast", "mid", "slow"] and sum(group["weights"].values()) == pytest.approx(1, abs=1e-5)
        trained = {t: load_file(str(root / "models" / ".premerge" / f"{t}@{k}" / "model.safetensors")) for t in group["targets"]}
        final = {t: load_file(str(root / "models" / f"{t}@{k}" / "model.safetensors")) for t in group["targets"]}
        for key, w in trained["fast"].items():
            avg = sum(group["weights"][t] * trained[t][key] for t in trained)
            for t in trained:
                assert torch.allclose(final[t][key], 0.5 * trained[t][key] + 0.5 * avg, atol=1e-5)
    from flywheel.ground.reports import allocation_lines

    table = allocation_lines(summary)
    assert "merge_weight" in table and f'{summary["iterations"][2]["merge"]["groups"][0]["weights"]["fast"]:.3f}' in table


def test_mixed_sharing_pools_then_separates_when_rates_diverge(harness, tiny_models_dir, tmp_path):
    """Two targets from one checkpoint, one learning and one (almost) not: iteration 1 trains
    both on the pooled traces; their validation-loss rates then diverge, the allocation records
    the switch, and iteration 2 trains each on its own traces only."""
    from flywheel.config.tree import FlywheelConfig
    from tests.conftest import tiny_tree

    student = str(tiny_models_dir / "student")
    tree = tiny_tree(tiny_models_dir, tmp_path, run__name="mixed", train__steps=8,
                     targets=[{"name": "fast", "path": student, "learning_rate": 0.02},
                              {"name": "still", "path": student, "learning_rate": 1e-9}],
                     allocate={"sharing": "mixed", "signal": "loss", "mixed_spread": 0.01})
    flywheel(FlywheelConfig.model_validate(tree).model_dump(mode="json"))
    store = RunStore(tmp_path / "mixed")
    its = json.loads(store.summary_path.read_text())["iterations"]
    assert its[0]["allocation"]["pooled"] is True and its[0]["allocation"]["spread"] is None
    after_1 = its[1]["allocation"]
    assert after_1["pooled"] is False and after_1["spread"] > 0.01, after_1
    sft = {k: load_dataset_dir(str(store.dataset_dir(k, "sft")))["target"] for k in (1, 2)}
    trained = {k: store.stage_json(k, "train") for k in (1, 2)}
    examples = {k: {t: r["examples"] for t, r in trained[k].items()} for k in (1, 2)}
    assert set(sft[1]) == {"fast", "still"}  # both targets lost battles: pooling has something to pool
    assert examples[1] == {"fast": len(sft[1]), "still": len(sft[1])}  # pooled
    own = {t: sum(x == t for k in (1, 2) for x in sft[k]) for t in ("fast", "still")}  # own, with replay
    assert examples[2] == own and own["fast"] != len(sft[1]) + len(sft[2])


def test_exports_in_arena_arena_hard_and_messages_layouts(finished_run, cli_env, tmp_path):
    def cli(*args):
        p = flywheel_cli(*args)
        assert p.returncode == 0, p.stderr
        return p.stdout

    root = finished_run.root
    log = tmp_path / "arena.jsonl"
    cli("data", "export", str(root), "--format", "arena", "--phase", "eval", "--out", str(log))
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    judged = finished_run.judged(None, "eval")
    assert len(rows) == len(judged) and {r["phase"] for r in rows} == {"eval"}
    assert all(r["conversation_a"][1]["role"] == "assistant" and r["tstamp"] > 0 for r in rows)
    # the exported log, rated by `flywheel rate`, reproduces `flywheel elo` within 0.5 Elo
    rated = {r["model"]: r["rating"] for r in json.loads(cli("rate", str(log), "--format", "json"))}
    board = {r["model"]: r["rating"] for r in json.loads(cli("elo", str(root), "--format", "json"))}
    assert rated.keys() == board.keys() and all(abs(rated[m] - board[m]) <= 0.5 for m in board)

    hard = tmp_path / "hard"
    cli("data", "export", str(root), "--format", "arena-hard", "--phase", "eval", "--out", str(hard))
    questions = [json.loads(line) for line in (hard / "question.jsonl").read_text().splitlines()]
    assert len(questions) == len({jb.battle.prompt_id for jb in judged})
    answers = [json.loads(line) for line in (hard / "model_answer" / "calc.jsonl").read_text().splitlines()]
    assert answers and all(a["model_id"] == "calc" and a["choices"][0]["turns"][0]["content"] is not None for a in answers)
    games = [json.loads(line) for f in (hard / "model_judgment").rglob("student@1.jsonl") for line in f.read_text().splitlines()]
    assert games and all(g["model"] == "student@1" and g["games"][0]["score"] in ("A>B", "B>A", "A=B") for g in games)
    # student@1 won where the baseline (A) lost
    wins = sum(1 for jb in judged if (jb.battle.model_a, jb.judgment.winner) == ("student@1", "model_a")
               or (jb.battle.model_b, jb.judgment.winner) == ("student@1", "model_b"))
    assert wins == sum(1 for g in games if g["games"][0]["score"] == "B>A")

    sft = root / "iter-0001" / "sft"
    out = tmp_path / "sft.messages.jsonl"
    cli("data", "export", str(sft), "--format", "messages", "--out", str(out))
    msgs = [json.loads(line) for line in out.read_text().splitlines()]
    assert msgs and all(m["messages"][-1]["role"] == "assistant" and m["messages"][0]["role"] in ("user", "system")
                        for m in msgs)


def test_data_push_dry_run_lists_the_commit_and_a_failed_push_is_one_line(finished_run, cli_env):
    import yaml

    from flywheel.face.hub import push_operations
    from flywheel.ground.run_view import RunView

    root = finished_run.root
    ops = push_operations(RunView.open(root))
    paths = [op.path_in_repo for op in ops]
    assert paths[0] == "README.md" and "iter-0001/sft/data/train-00000-of-00001.parquet" in paths
    assert "iter-0002/dpo/README.md" in paths and "iter-0001/sft/manifest.json" in paths
    assert not any(p.startswith(("battles/", "models/", "cache/")) for p in paths)  # datasets only
    front = yaml.safe_load(ops[0].path_or_fileobj.decode().split("---")[1])
    summary = json.loads((root / "summary.json").read_text())["iterations"]
    want = {f"{kind}-iter{e['iteration']}" for e in summary[1:] for kind, n in (("sft", e["sft_examples"]),
                                                                                 ("dpo", e["dpo_pairs"])) if n}
    assert {c["config_name"] for c in front["configs"]} == want
    cmd = [sys.executable, "-m", "flywheel.face.cli", "data", "push", str(root), "--repo", "someone/flywheel-run"]
    dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, env=cli_env, timeout=120)
    assert dry.returncode == 0 and dry.stdout.splitlines()[0].startswith("README.md\t")
    assert len(dry.stdout.splitlines()) == len(ops) and "nothing was uploaded" in dry.stderr
    offline = subprocess.run(cmd, capture_output=True, text=True, env={**cli_env, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert offline.returncode == 1 and offline.stderr.startswith("error: push to someone/flywheel-run failed")
    assert "Traceback" not in offline.stderr


def test_prefect_run_names_tags_artifacts_assets_and_dataset_events(finished_run):
    """Read back from the (real, local) Prefect server the flow run made: the flow run and task
    runs are named and tagged, the artifacts are there, and every dataset announced an event."""
    import time

    import anyio
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterKey,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterName,
    )

    async def read(names: list[str]):
        async with get_client() as client:
            # the session's server: the fixture's flow run is the one that made this run directory, not a
            # `--resume` of it (test_a_run_directory_in_use_is_refused), nor an earlier fixture's
            named = await client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=["flow-iter2"])))
            runs = [r for r in named if r.parameters.get("resume") is None
                    and Path(r.parameters["config"]["run"]["root"]) == finished_run.root.parent]
            tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[r.id for r in runs])))
            keys = ["leaderboard-flow", "judge-flow", "allocation-flow", "datasets-flow"]
            arts = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
            found = {}
            for name, resource in zip(names, resources, strict=True):
                got = await client._client.post("/events/filter", json={
                    "filter": {"event": {"name": [name]}, "resource": resource}, "limit": 50})
                found[name] = got.json()["events"]
            return runs, tasks, arts, found

    from flows.flywheel_flow import asset_key

    names = ["flywheel.dataset.created", "prefect.asset.materialization.succeeded"]
    assets_made = [asset_key(finished_run.root / "iter-0001" / "sft"), asset_key(finished_run.root / "models" / "student@2")]
    resources = [{"id_prefix": ["flywheel.dataset.flow."]}, {"id": assets_made}]
    expected = {"select-i1-r1", "play-i1-r1-s0000", "judge-i1-r1-s0000", "judge-i1-r1", "curate-i1", "train-i2",
                "evaluate-i0", "datasets-i1", "checkpoints-i2"}
    for _ in range(90):  # task runs and events reach the server asynchronously (slowly on a loaded machine)
        runs, tasks, arts, events = anyio.run(read, names)
        by_name = {t.name: t for t in tasks if runs and t.flow_run_id == runs[0].id}
        # this run's events only: another worker's run of the same name reports to the same server
        mine = [e for e in events[names[0]] if e["payload"].get("path", "").startswith(str(finished_run.root))]
        assets = {e["resource"]["prefect.resource.id"] for e in events[names[1]]}
        if len(mine) >= 4 and expected <= set(by_name) and set(assets_made) <= assets:
            break
        time.sleep(1)
    assert len(runs) == 1 and {"flywheel", "run:flow"} <= set(runs[0].tags)
    assert expected <= set(by_name), sorted(by_name)
    assert {"flywheel", "run:flow", "iteration:1"} <= set(by_name["play-i1-r1-s0000"].tags)
    keys = {a.key for a in arts}
    assert {"leaderboard-flow", "judge-flow", "allocation-flow", "datasets-flow"} <= keys
    created = {e["resource"]["prefect.resource.id"]: e["payload"] for e in mine}
    for k in (1, 2):
        for kind in ("sft", "dpo"):
            payload = created[f"flywheel.dataset.flow.iter{k}.{kind}"]
            assert payload["rows"] == len(load_dataset_dir(payload["path"])) and payload["iteration"] == k
    assert set(assets_made) <= assets


def test_a_damaged_run_file_or_checkpoint_is_named_in_one_line(finished_run, cli_env, tmp_path):
    """A run writes atomically, so a file it cannot read was changed outside it: the commands that
    read it say which file, in one line, exit 2, with no traceback."""
    import shutil

    run = tmp_path / "damaged"
    shutil.copytree(finished_run.root, run)
    shard = sorted((run / "battles").glob("iter-0001-train-*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:200])
    ratings = sorted((run / "ratings").glob("iter-*.json"))[-1]
    ratings.write_text(ratings.read_text()[:50])
    for args, named in ((["data", "ls", str(run)], shard), (["elo", str(run)], ratings)):
        p = subprocess.run([sys.executable, "-m", "flywheel.face.cli", *args], env=cli_env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
        assert p.stderr.startswith("error: ") and str(named) in p.stderr and len(p.stderr.splitlines()) == 1
    # a checkpoint whose weights were cut short: the run stops at its first load, naming it
    model = tmp_path / "damaged-student"
    shutil.copytree(finished_run.root / "models" / "student@1", model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    cfg = yaml.safe_load((finished_run.root / "config.yaml").read_text())
    cfg["targets"][0]["path"], cfg["run"]["name"] = str(model), "damaged-model"
    (tmp_path / "damaged.yaml").write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", str(tmp_path / "damaged.yaml")], env=cli_env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"error: {model}: its weights cannot be read" in p.stderr
