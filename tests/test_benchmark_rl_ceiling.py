"""benchmarks.rl_ceiling: the oracle that labels every train prompt right, the yardstick the on-policy
arms are read against. It must train on the train split alone and score a model as a run does."""

from pathlib import Path

from benchmarks.rl import timed_run
from benchmarks.rl_ceiling import eval_by_category, oracle_rows
from flywheel.worlds.world import world_pools


def test_the_oracle_trains_on_every_train_reference_and_never_on_a_held_out_prompt(tiny_config):
    cfg, _ = tiny_config()
    splits = world_pools(cfg.world)
    rows = oracle_rows(splits)
    train = [p for p in splits.train if p.reference is not None]
    assert rows and len(rows) == len(train)
    assert [(r["prompt"], r["completion"]) for r in rows] == [(p.text, p.reference) for p in train]
    held = {p.text for p in splits.eval + splits.validation}
    assert held and not held & {r["prompt"] for r in rows}


def test_the_oracle_scores_a_version_as_the_run_scored_it(tiny_config, tmp_path):
    """Each model's eval accuracy per category, as the run recorded it in summary.json, is what the
    benchmark's own scoring finds for the same checkpoint."""
    cfg, path = tiny_config(run__iterations=1, run__name="scored")
    summary, _ = timed_run(0, [], tmp_path / "runs", path)
    assert summary["timings"]["iter-0001/train"] > 0  # what benchmarks.rl --summaries keeps of each stage's time
    entry = summary["iterations"][1]
    recorded = {"student@1": entry["eval"]["student@1"], **entry["opponents_eval"]}
    folders = {"student@1": tmp_path / "runs" / "scored" / "models" / "student@1",
               **{name: Path(cfg.world.models_dir) / name for name in entry["opponents_eval"]}}
    splits = world_pools(cfg.world)
    for name, folder in folders.items():
        got = eval_by_category(str(folder), splits.eval, cfg.targets[0].max_new_tokens)
        assert got == {**recorded[name]["accuracy_by_category"], "overall": recorded[name]["accuracy"]}, name
        # the validation split too, for the opponents as for the target: what a tuning rule reads them against
        got = eval_by_category(str(folder), splits.validation, cfg.targets[0].max_new_tokens)
        val = recorded[name]["validation"]
        assert val["prompts"] == len(splits.validation), name
        assert got == {**val["accuracy_by_category"], "overall": val["accuracy"]}, name
    assert any(0 < r["accuracy"] < 1 for r in recorded.values())


def test_the_oracles_mix_repeats_the_categories_named_and_no_other(tiny_config):
    from collections import Counter

    cfg, _ = tiny_config()
    splits = world_pools(cfg.world)
    once = Counter(r["prompt"] for r in oracle_rows(splits))
    mixed = Counter(r["prompt"] for r in oracle_rows(splits, {"sub": 3}))
    subs = {p.text for p in splits.train if p.category == "sub"}
    assert subs and all(mixed[t] == 3 * once[t] for t in subs)
    assert all(mixed[t] == once[t] for t in once if t not in subs)


def test_a_short_run_prints_both_arms_on_the_oracles_rows_and_ends_with_the_ratio(tmp_path, cli_env):
    """``python -m benchmarks.rl_ceiling`` as a user runs it, on the tiny suite and models (pre-trained
    into its own models root): both arms per world, the oracle on every train row with `sub` twice."""
    import subprocess
    import sys

    import yaml

    from flywheel.config.loading import load_config
    from tests.conftest import TINY_MODELS, TINY_TASKS

    sets = ["run.iterations=1", "train.steps=4", "train.batch_size=8", "select.battles_per_iteration=48",
            *(f"world.tasks.{k}={v}" for k, v in TINY_TASKS.items()),
            "world.models=" + yaml.safe_dump(TINY_MODELS, default_flow_style=True).strip()]
    out = subprocess.run([sys.executable, "-m", "benchmarks.rl_ceiling", "--jobs", "1", "--models-root",
                          str(tmp_path / "models"), "--repeat", "sub=2", *(x for s in sets for x in ("--set", s))],
                         env=cli_env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    splits = world_pools(load_config(None, [*sets, f"world.models_dir={tmp_path / 'models'}"]).world)
    lines = out.stdout.strip().splitlines()
    [run] = [line for line in lines if line.startswith("suite 1234 / pre-training 0")]
    assert ": sft " in run and f"on {len(oracle_rows(splits, {'sub': 2}))} rows" in run
    assert any(line.startswith("sft    final eval accuracy") for line in lines)
    assert any(line.startswith("oracle final eval accuracy") for line in lines)
    assert lines[-1].startswith("ratio: ")
    # which categories count as learnable reads the commonest-answer guess of the world the runs took (its
    # --set pool sizes), not the default world's
    from benchmarks.rl import guess_by_category

    world = [*sets, "world.tasks.seed=1234", "world.seed=0"]
    printed = [", ".join(f"{c} {g:.3f}" for c, g in sorted(guess_by_category(w).items()))
               for w in (world, world[len(sets):])]
    assert printed[0] != printed[1]
    [line] = [x for x in lines if x.startswith("the commonest answer of the train split")]
    assert line.endswith(": " + printed[0])
