import subprocess
import sys
from pathlib import Path

import pytest

from flywheel.config.loading import ConfigError, load_config
from flywheel.config.tree import FlywheelConfig

ROOT = Path(__file__).resolve().parents[1]


def test_default_recipe_file_is_the_embedded_default():
    assert load_config(ROOT / "flows/recipes/default.yaml") == FlywheelConfig()
    assert load_config(None) == FlywheelConfig()


def test_set_overrides_are_typed_and_reach_into_lists():
    cfg = load_config(None, ["train.steps=7", "train.learning_rate=1e-4", "train.replay=false",
                             "world.models.1.steps=5", "world.tasks.categories=[add, rev]"])
    assert cfg.train.steps == 7 and cfg.train.learning_rate == 1e-4 and cfg.train.replay is False
    assert cfg.world.models[1].steps == 5
    assert cfg.world.tasks.categories == ["add", "rev"]


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["train.stepz=3"], "train.stepz: unknown field"),
        (["train.steps=-1"], "train.steps"),
        (["train.steps=many"], "train.steps"),
        (["rating.ci=1.5"], "rating.ci"),
        (["world.tasks.categories=[add, poetry]"], "world.tasks"),
        (["world.models.9.steps=1"], "no list item"),
        (["opponents.0.name=Student"], "unique"),
        (["train.method=ppo"], "train.method"),
    ],
)
def test_bad_config_names_the_field(overrides, field):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert field in str(e.value)


def test_bad_yaml_names_the_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("run:\n  iterations: 2\n  seed: [1, 2\n")
    with pytest.raises(ConfigError, match="line"):
        load_config(p)


def test_unknown_section_in_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("run:\n  iterations: 2\nbandits:\n  policy: ucb\n")
    with pytest.raises(ConfigError, match="bandits: unknown field"):
        load_config(p)


def test_cli_rejects_bad_config_with_exit_2_and_writes_nothing(tmp_path, cli_env):
    root = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "flywheel.face.cli", "run", "--set", f"run.root={root}", "--set", "train.steps=-3"],
        capture_output=True, text=True, env=cli_env, timeout=120,
    )
    assert proc.returncode == 2
    assert "train.steps" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not root.exists()


def test_the_shipped_recipes_load():
    cfg = load_config(ROOT / "flows/recipes/vllm_api.yaml")
    assert cfg.targets[0].serve_lora and cfg.judge.kind == "cascade" and cfg.budget.max_usd == 25.0
    assert [t.kind for t in cfg.judge.cascade.tiers] == ["verifier", "llm", "llm"]
    assert {p.kind for p in cfg.opponents} == {"openai", "anthropic"}
    llm = load_config(ROOT / "flows/recipes/smollm2.yaml")
    assert llm.targets[0].path == "data/models/smollm2" and llm.train.lora and llm.judge.verifier.extract == "final"
    assert llm.world.tasks == FlywheelConfig().world.tasks  # the same suite as make demo: shared tiny opponents
    assert llm.judge.kind == "verifier" and not llm.world.prompt_pools  # no model here can judge open prompts
    rl = load_config(ROOT / "flows/recipes/rl.yaml")
    assert [rl.train.method_of(k) for k in (1, 2, 3, 4, 9)] == ["sft", "sft", "sft+expert", "sft+expert", "sft+expert"]
    assert rl.model_copy(update={"train": FlywheelConfig().train}) == FlywheelConfig()  # only train differs
    smol = load_config(ROOT / "flows/recipes/smollm2_rl.yaml")
    assert smol.train.schedule == ["sft", "sft+expert"] and smol.train.rl.reward == "verifier" and smol.train.lora
    assert [smol.train.method_of(k) for k in range(1, smol.run.iterations + 1)] == ["sft", "sft+expert", "sft+expert"]
    assert smol.train.rl.prompts == "train" and smol.train.steps == 120 and smol.train.rl.answers == 1920
    few = load_config(ROOT / "flows/recipes/few_battles.yaml")
    assert few.select.battles_per_iteration == 400 and few.train.schedule == ["sft+expert"]
    assert few.train.rl.prompts == "train" and few.train.rl.reward == "verifier"
    default = FlywheelConfig()
    assert few.model_copy(update={"train": default.train, "select": default.select}) == default  # only these differ
    assert few.select.model_copy(update={"battles_per_iteration": default.select.battles_per_iteration}) == default.select
    big = load_config(ROOT / "flows/recipes/vllm_api_rl.yaml")
    assert big.train.rl.reward == "judge" and big.train.rl.use_vllm and big.judge.kind == "llm"


def test_api_players_need_a_model_and_llm_judges_a_player():
    with pytest.raises(ConfigError, match="needs 'model'"):
        load_config(None, ["opponents.0.kind=openai"])
    with pytest.raises(ConfigError, match="judge"):
        load_config(None, ["judge.kind=llm"])


def test_bandit_is_another_name_for_the_select_section(tmp_path):
    cfg = load_config(None, ["bandit.policy=ucb", "bandit.prompt_floor=0.25"])
    assert (cfg.select.policy, cfg.select.prompt_floor) == ("ucb", 0.25)
    path = tmp_path / "c.yaml"
    path.write_text("bandit:\n  policy: uniform\n")
    assert load_config(path).select.policy == "uniform"
    path.write_text("bandit:\n  policy: uniform\nselect:\n  policy: ucb\n")
    with pytest.raises(ConfigError, match="'bandit' is another name for 'select'"):
        load_config(path)
    with pytest.raises(ConfigError, match="select.policy"):
        load_config(None, ["bandit.policy=greedy"])


def _bad_inputs(tmp_path):
    """(arguments, the one error line expected) for bad inputs caught before anything is written."""
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("run:\n  name: caf\u00e9\n".encode("latin-1"))
    twice = tmp_path / "twice.yaml"
    twice.write_text("run:\n  iterations: 2\ntrain:\n  steps: 3\nrun:\n  seed: 1\n")
    inner = tmp_path / "inner.yaml"
    inner.write_text("train:\n  steps: 3\n  lora: true\n  steps: 4\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    empty = tmp_path / "empty-model"
    empty.mkdir()
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text("{}")
    (no_weights / "tokenizer.json").write_text("{}")
    api = "opponents.0={name: gpt, kind: openai, model: m, base_urls: [%s]}"
    return [
        ([str(latin)], f"error: {latin}: not UTF-8 text (byte 0xe9 at offset 16); save it as UTF-8"),
        ([str(twice)], f"error: {twice}: key 'run' at line 5 repeats the one at line 1 in the same mapping; give it once"),
        ([str(inner)], f"error: {inner}: key 'steps' at line 4 repeats the one at line 2 in the same mapping; give it once"),
        (["--set", f"world.models_dir={a_file}"], f"error: world.models_dir: {a_file} is a file, not a directory"),
        (["--set", f"run.cache_dir={a_file}"], f"error: run.cache_dir: {a_file} is a file, not a directory"),
        (["--set", f"targets.0.path={empty}"], f"error: targets.0 (student): path {empty} holds no model (no config.json)"),
        (["--set", f"targets.0.path={no_weights}"],
         f"error: targets.0 (student): path {no_weights} holds no model (no weights: no *.safetensors, *.bin file)"),
        (["--set", f"targets.0.path={a_file}"],
         f"error: targets.0 (student): path {a_file} holds no model (a file, not a checkpoint folder)"),
        (["--set", api % "localhost:8000/v1"], "error: opponents.0 (gpt): base_urls.0 'localhost:8000/v1' is not an "
         "http(s) URL with a host (e.g. http://127.0.0.1:8000/v1)"),
        (["--set", api % "'http://:8000/v1'"], "error: opponents.0 (gpt): base_urls.0 'http://:8000/v1' is not an "
         "http(s) URL with a host (e.g. http://127.0.0.1:8000/v1)"),
        (["--set", "train.method=grpo", "--set", "train.rl.reward=reward_model", "--set",
          f"train.rl.reward_model={tmp_path / 'no-rm'}"], f"error: train.rl.reward_model: {tmp_path / 'no-rm'} does not "
         "exist (a reward model a run trained: <run>/reward-models/<target>@<k>)"),
        (["--set", "train.method=sft+grpo", "--set", "train.rl.reward=reward_model"], "error: invalid config: "
         "train.rl.reward reward_model: iteration 1 trains with grpo, but no reward model is named "
         "(train.rl.reward_model) and no earlier iteration trains one (method reward in train.schedule)"),
        (["--set", "train.method=grpo", "--set", "train.rl.reward=no_such_module:score"],
         "error: train.rl.reward: kind 'no_such_module:score': cannot import 'no_such_module': No module named "
         "'no_such_module'"),
        (["flows/recipes/tictactoe.yaml", "--set", "train.gap_mix=2"], "error: invalid config: train.gap_mix weighs "
         "by each category's validation accuracy; a games world validates on games, not categories"),
        (["flows/recipes/tictactoe.yaml", "--set", "select.gap_spread=2"], "error: invalid config: select.gap_spread "
         "weighs by each category's validation accuracy; a games world validates on games, not categories"),
        (["--set", "select.gap_spread=2", "--set", "select.prompt_floor=0"], "error: invalid config: select.gap_spread "
         "weighs the battles select.prompt_floor spreads over the cells; with prompt_floor 0 the bandit picks them all"),
        (["--set", "train.rl.gap_pick=2"], "error: invalid config: train.rl.gap_pick weighs how prompts are picked "
         "for the target's own answers, and no iteration picks them (train.schedule: expert, onpolicy_dpo, grpo or "
         "rloo with train.rl.dynamic_sampling, or with train.rl.pick_online in one process)"),
        (["--set", "train.method=sft+expert", "--set", "train.rl.reward=os.path:exists"],
         "error: train.rl.reward: os.path:exists cannot take a reward's arguments (missing a required argument: "
         "'path'): a reward function is called as f(prompts, completions, **columns) and returns one float or None "
         "per completion"),
        (["--set", "train.method=sft+expert", "--set", "train.rl.pass_reward=2"], "error: invalid config: "
         "train.rl.pass_reward 2: the verifier rewards an answer 0 to 1, so no answer would pass; give a threshold "
         "above 0 and at most 1"),
        (["--set", "train.method=sft+expert", "--set", "train.rl.pass_reward=nan"],
         "error: invalid config: train.rl.pass_reward: Input should be a finite number"),
        (["--set", "train.method=onpolicy_dpo", "--set", "train.rl.reward=judge", "--set", "train.rl.pass_reward=0"],
         "error: invalid config: train.rl.pass_reward 0: the judge rewards an answer 0 to 1, so an answer scored 0 "
         "(wrong, or a loss) would pass; give a threshold above 0 and at most 1"),
        (["--set", "train.method=sft+expert", "--set", "train.rl.leave_out=[cnt]"], "error: train.rl.leave_out: "
         "['cnt'] are not categories of the train prompts ['add', 'count', 'mul', 'rev', 'sort', 'sub']"),
        (["--set", "world.tasks.categories=[add]", "--set", "train.rl.leave_out=[add]"], "error: train.rl.leave_out "
         "leaves out every category of the train prompts: none is left to learn from"),
    ]


def test_gap_pick_needs_an_iteration_whose_prompts_the_posterior_picks():
    """train.rl.gap_pick with GRPO without dynamic sampling: accepted where its trainer picks online
    in one process, refused where it does not pick (pick_online false) or cannot (several processes:
    shuffled passes), since the weights would change nothing."""
    base = ["train.method=grpo", "train.rl.dynamic_sampling=false", "train.rl.gap_pick=2"]
    assert load_config(None, base).train.rl.gap_pick == 2
    for more in (["train.rl.pick_online=false"], ["train.launcher=accelerate", "train.num_processes=2"]):
        with pytest.raises(ConfigError, match="no iteration picks them"):
            load_config(None, [*base, *more])


def test_bad_input_is_one_error_line_exit_2_and_no_run_directory(tmp_path, cli_env):
    """Each bad input: `flywheel run` says it in one error: line (exit 2, no traceback) and writes no
    run directory; `flywheel check` says the same."""
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    root = tmp_path / "runs"
    for i, (args, line) in enumerate(_bad_inputs(tmp_path)):
        args = args + ["--set", f"run.root={root}"]
        check = CliRunner().invoke(app, ["check", *args])
        assert check.exit_code == 2 and check.stderr.strip() == line, check.output
        if i in (0, 3):  # a file's error and a --set's, in a real process: its exit status and whole stderr
            proc = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", *args], capture_output=True,
                                  text=True, env=cli_env, timeout=120)
            code, err = proc.returncode, proc.stderr
        else:
            ran = CliRunner().invoke(app, ["run", *args])
            code, err = ran.exit_code, ran.stderr
        assert code == 2 and err.strip() == line, err
        assert not root.exists()


def test_a_key_repeated_in_a_list_of_mappings_or_a_merge_key_is_not_a_repeat(tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text("opponents:\n  - &a {name: a, kind: random}\n  - <<: *a\n    name: b\n")
    assert [(p.name, p.kind) for p in load_config(ok).opponents] == [("a", "random"), ("b", "random")]
    twice = tmp_path / "twice.yaml"
    twice.write_text("opponents:\n  - {name: a, kind: random, kind: minimax}\n")
    with pytest.raises(ConfigError, match="key 'kind' at line 2 repeats the one at line 2"):
        load_config(twice)


def test_config_show_prints_the_resolved_config_and_schema_the_json_schema(tmp_path):
    import json

    import yaml
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    shown = CliRunner().invoke(app, ["config", "show"])
    assert shown.exit_code == 0 and load_config(None) == FlywheelConfig.model_validate(yaml.safe_load(shown.stdout))
    recipe = tmp_path / "my.yaml"
    recipe.write_text("run: {iterations: 5}\n")
    shown = CliRunner().invoke(app, ["config", "show", str(recipe), "--set", "train.steps=7"])
    tree = yaml.safe_load(shown.stdout)
    assert (tree["run"]["iterations"], tree["train"]["steps"]) == (5, 7)
    assert FlywheelConfig.model_validate(tree) == load_config(recipe, ["train.steps=7"])
    bad = CliRunner().invoke(app, ["config", "show", "--set", "train.steps=-1"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: invalid config:") and "train.steps" in bad.stderr

    schema = CliRunner().invoke(app, ["config", "schema"])
    assert schema.exit_code == 0 and json.loads(schema.stdout) == FlywheelConfig.model_json_schema()
