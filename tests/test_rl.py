"""Reinforcement learning from rewards: a real GRPO phase on a tiny model, the rewards built from
each judge kind, failed rewards left out, and a GRPO phase killed and resumed."""

import json

import pytest
from datasets import Dataset

from flywheel.config.tree import FlywheelConfig, JudgeConfig, RLConfig, TrainConfig
from flywheel.learning.judge_rewards import build_reward, function_reward, judge_reward, verifier_reward
from flywheel.learning.rl import RLPhase, RolloutLog, with_advantages
from flywheel.learning.training import TrainJob, train_version
from judges.build import build_verifier
from judges.pairwise import PairwiseJudge
from tests.test_training import changed

PROMPTS = Dataset.from_dict({"prompt": ["12+3=", "rev abc=", "sort 321=", "4*2="] * 4,
                             "reference": ["15", "cba", "123", "8"] * 4,
                             "prompt_id": [f"p{i}" for i in range(16)], "category": ["add", "rev", "sort", "mul"] * 4})


def digit_share(prompts, completions, columns):
    """A reward every answer of a random model gets a different value of: its share of digits.
    Every fourth answer's reward fails."""
    return [(None, "judge unreachable") if i % 4 == 0 else (sum(c.isdigit() for c in text) / max(1, len(text)), None)
            for i, text in enumerate(completions)]


def grpo(tiny_models_dir, out, state, steps=4, checkpoint_steps=0, scorer=digit_share, method="grpo"):
    cfg = TrainConfig(method=method, batch_size=8, checkpoint_steps=checkpoint_steps, rl={"generations": 4})
    phase = RLPhase(PROMPTS, scorer, state.parent / f"{state.name}-rollouts.jsonl", 8)
    return train_version(TrainJob(str(tiny_models_dir / "student"), out, steps, 0, method=method, state_dir=state),
                         cfg, rl=phase)


def test_a_real_grpo_phase_changes_the_weights_and_keeps_its_rollouts(tiny_models_dir, tmp_path):
    res = grpo(tiny_models_dir, tmp_path / "student@1", tmp_path / "state")
    assert res.steps == 4 and res.loss is not None
    assert changed(tiny_models_dir / "student", tmp_path / "student@1")  # every rewarded step moves weights
    rows = res.rollouts
    assert len(rows) == 4 * 8  # 4 steps x (2 prompts x 4 answers)
    assert {r["step"] for r in rows} == {1, 2, 3, 4}
    failed = [r for r in rows if r["reward"] is None]
    assert len(failed) == 8 and all(r["error"] == "judge unreachable" and r["advantage"] == 0.0 for r in failed)
    for g in {r["group"] for r in rows}:  # each group: one prompt, its scored answers' advantages sum to 0
        group = [r for r in rows if r["group"] == g]
        assert len(group) == 4 and len({r["prompt_id"] for r in group}) == 1
        assert abs(sum(r["advantage"] for r in group)) < 1e-6


def half_failed(prompts, completions, columns):
    """Each group of 4 answers (TRL samples a prompt's answers one after another): rewards 1, 0 and
    two failed calls."""
    return [[(1.0, None), (0.0, None), (None, "judge unreachable"), (None, "judge unreachable")][i % 4]
            for i in range(len(completions))]


def test_trl_itself_leaves_a_failed_reward_out_and_never_averages_it_as_0(tiny_models_dir, tmp_path):
    """Read from TRL's own logs (the Trainer's log history, which TRL writes from the rewards and
    advantages it computed), not from this project's recomputation: each group's scored rewards
    are 1 and 0, so the logged mean reward is 0.5 and every group has a spread. Were a failed
    reward trained on as 0 (TRL before 1.6, or a reward path that turns None into 0), the mean
    would be 0.25."""
    res = grpo(tiny_models_dir, tmp_path / "student@1", tmp_path / "state", steps=2, scorer=half_failed)
    logged = [e for e in res.history if "reward" in e]
    assert len(logged) == 2  # one log per step
    assert [e["reward"] for e in logged] == pytest.approx([0.5, 0.5])
    assert all(e["frac_reward_zero_std"] == 0.0 for e in logged)


def test_advantages_are_the_groups_normalised_rewards():
    rows = [{"group": "g", "reward": r} for r in (1.0, 0.0, None, 0.0)] + [{"group": "h", "reward": None}]
    adv = [r["advantage"] for r in with_advantages(rows)]
    std = (1 / 3) ** 0.5  # rewards 1, 0, 0: mean 1/3, unbiased standard deviation sqrt(1/3)
    assert adv[0] == pytest.approx((2 / 3) / (std + 1e-4)) and adv[1] == pytest.approx((-1 / 3) / (std + 1e-4))
    assert adv[2] == 0.0 and adv[4] == 0.0


@pytest.mark.parametrize("method", ["grpo", "rloo"])
def test_a_grpo_phase_killed_after_a_checkpoint_resumes_to_the_same_weights_and_rollouts(tiny_models_dir, tmp_path,
                                                                                         monkeypatch, method):
    import flywheel.ground.progress

    class Killed(Exception):
        pass

    real = flywheel.ground.progress.trainer_callback

    def killing(desc, total):
        handler = real(desc, total)

        class Kill(type(handler)):
            def on_save(self, args, state, control, **kw):
                if state.global_step == 2:
                    raise Killed

        handler.__class__ = Kill
        return handler

    straight = grpo(tiny_models_dir, tmp_path / "straight", tmp_path / "s0", checkpoint_steps=2, method=method)
    monkeypatch.setattr(flywheel.ground.progress, "trainer_callback", killing)
    with pytest.raises(Killed):
        grpo(tiny_models_dir, tmp_path / "resumed", tmp_path / "s1", checkpoint_steps=2, method=method)
    log = RolloutLog(tmp_path / "s1-rollouts.jsonl")
    log.append([{"step": 3, "reward": 1.0, "group": "x"}])  # a step after the checkpoint that the kill lost
    monkeypatch.setattr(flywheel.ground.progress, "trainer_callback", real)
    resumed = grpo(tiny_models_dir, tmp_path / "resumed", tmp_path / "s1", checkpoint_steps=2, method=method)
    assert changed(tiny_models_dir / "student", tmp_path / "straight")
    assert changed(tmp_path / "straight", tmp_path / "resumed") == []
    assert resumed.loss == pytest.approx(straight.loss)
    strip = [{k: v for k, v in r.items() if k != "group"} for r in straight.rollouts]
    assert [{k: v for k, v in r.items() if k != "group"} for r in resumed.rollouts] == strip


def test_the_online_picker_reads_only_groups_already_scored(tiny_models_dir, tmp_path, monkeypatch):
    """A resumed phase replays its picks from the groups its rollout log kept, so each pick may read
    only the groups of steps that a phase never interrupted has scored by then. Under the real
    Trainer (2 micro-batches of gradient accumulation an optimizer step, each its own dataloader
    batch), every pick that reads a trainer's step finds that step's groups already there."""
    from flywheel.learning.onpolicy import OnlinePicker

    seen = []
    real = OnlinePicker.chunk

    def chunk(self, c, upto):
        seen.append((c, upto, max((o.step for o in self.outcomes), default=0)))
        return real(self, c, upto)

    monkeypatch.setattr(OnlinePicker, "chunk", chunk)
    cfg = TrainConfig(method="grpo", batch_size=4, checkpoint_steps=0,
                      rl={"generations": 4, "args": {"gradient_accumulation_steps": 2}})
    phase = RLPhase(PROMPTS, digit_share, tmp_path / "rollouts.jsonl", 8)
    train_version(TrainJob(str(tiny_models_dir / "student"), tmp_path / "v1", 6, 0, method="grpo"), cfg, rl=phase)
    assert [c for c, _, _ in seen][:6] == list(range(6)) and max(u for _, u, _ in seen) >= 2
    # a step of margin: when chunk c is picked the groups of step c - 1 are scored, and it reads up to c - 2
    assert all(scored > upto or upto == 0 for _, upto, scored in seen), seen


def test_the_verifier_reward_scores_against_the_reference():
    score = verifier_reward(build_verifier(JudgeConfig().verifier))
    got = score(["1+1=", "2+2=", "x"], ["2", "5", "y"], {"reference": ["2", "4", None]})
    assert got == [(1.0, None), (0.0, None), (None, "no reference answer")]


def tenfold(response, reference):
    """A user check that breaks the verifier's contract (a score in [0, 1]): 10 for a right answer."""
    return 10.0 * (response.strip() == reference)


def test_a_check_scoring_outside_0_to_1_is_a_failed_reward_not_a_reward():
    vc = JudgeConfig(verifier={"match": "callable", "function": "tests.test_rl:tenfold"}).verifier
    got = verifier_reward(build_verifier(vc))(["1+1=", "2+2="], ["2", "5"], {"reference": ["2", "4"]})
    assert got == [(None, "check failed: ValueError('check scored 10.0, outside 0 to 1')"), (0.0, None)]


class Scripted(PairwiseJudge):
    """A judge that answers from a script, and fails where the script says so."""

    name = "scripted"

    def __init__(self, verdicts):
        self.verdicts, self.seen = verdicts, []

    def judge(self, battles):
        from flywheel.ground.records import Judgment

        self.seen += battles
        return [Judgment(b.battle_id, self.name, w, 1.0, error=None if w else "unparseable verdict")
                for b, w in zip(battles, self.verdicts)]


def test_the_judge_reward_compares_with_the_baseline_and_never_scores_a_failure():
    judge = Scripted(["model_a", "tie", "model_b", None, "tie (bothbad)"])
    score = judge_reward(judge, "student")
    cols = {"baseline": ["4", "4", "4", "4", "4", None], "baseline_model": ["calc"] * 6, "reference": ["4"] * 6,
            "category": ["add"] * 6}
    got = score(["2+2="] * 6, ["4", "four", "5", "?", "6", "4"], cols)
    assert [r for r, _ in got] == [1.0, 0.5, 0.0, None, 0.0, None]
    assert got[3][1] == "unparseable verdict" and got[5][1].startswith("no baseline")
    assert [(b.model_a, b.model_b, b.response_a, b.response_b) for b in judge.seen][0] == ("student", "calc", "4", "4")
    assert len(judge.seen) == 5  # the answer without a baseline is never sent to the judge


def test_a_users_reward_function(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def short(prompts, completions, reference, **kw):\n"
        "    return [1.0 if c == r else (None if c == '?' else 'bad') for c, r in zip(completions, reference)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    score = function_reward("my_rewards:short")
    got = score(["a", "b", "c"], ["x", "?", "z"], {"reference": ["x", "y", "w"]})
    assert got[0] == (1.0, None) and got[1][0] is None and got[2][0] is None and "no number" in got[2][1]
    built = build_reward(RLConfig(reward="my_rewards:short"), JudgeConfig(), None, "student")
    assert built(["a"], ["x"], {"reference": ["x"]}) == [(1.0, None)]


def test_the_judge_reward_is_the_runs_judge(tiny_models_dir):
    judge = Scripted(["model_a"])
    built = build_reward(RLConfig(reward="judge"), JudgeConfig(), judge, "student")
    assert built(["2+2="], ["4"], {"baseline": ["5"]}) == [(1.0, None)] and len(judge.seen) == 1


@pytest.mark.parametrize("train, why", [
    ({"method": "grpo", "rl": {"reward": "reward_model"}}, "no reward model is named"),
    ({"schedule": ["sft", "grpo", "reward"], "rl": {"reward": "reward_model"}}, "iteration 2 trains with grpo"),
    ({"method": "grpo", "batch_size": 6}, "not a multiple of train.rl.generations"),
    ({"method": "grpo", "rl": {"reward": "nope"}}, "expected verifier, judge, reward_model or module:function"),
    ({"method": "grpo", "rl": {"args": {"no_such_field": 1}}}, "not fields of trl.GRPOConfig"),
])
def test_grpo_without_a_usable_reward_is_refused(train, why):
    with pytest.raises(ValueError, match=why):
        FlywheelConfig(train=train)


def test_the_schedule_names_each_iterations_method():
    tc = TrainConfig(schedule=["sft", "sft", "grpo"])
    assert [tc.method_of(k) for k in range(1, 6)] == ["sft", "sft", "grpo", "grpo", "grpo"]
    assert TrainConfig(method="dpo").method_of(3) == "dpo"
    FlywheelConfig(train={"schedule": ["reward", "grpo"], "rl": {"reward": "reward_model"}})  # trained before use


def test_grpo_arguments_for_a_cuda_machine_sample_through_vllm():
    from flywheel.learning.rl import grpo_args
    from flywheel.learning.training import Hardware, training_args

    tc = TrainConfig(method="grpo", rl={"use_vllm": True, "learning_rate": 1e-5, "args": {"loss_type": "dr_grpo"}})
    phase = RLPhase(PROMPTS, digit_share, None, 64, vllm_url="http://gpu-box:8000")
    base = training_args(tc, 10, 0, "/tmp/x", 512, Hardware(cuda=True, bf16=True))
    args = grpo_args(base, tc.rl, phase, hw_cuda=True)
    assert args["bf16"] and not args["fp16"] and args["dataloader_pin_memory"]
    assert args["use_vllm"] and args["vllm_mode"] == "server" and args["vllm_server_base_url"] == "http://gpu-box:8000"
    assert args["learning_rate"] == 1e-5 and args["loss_type"] == "dr_grpo" and "max_length" not in args
    assert args["num_generations"] == 8 and args["max_completion_length"] == 64
    import trl

    trl.GRPOConfig(**{**args, "use_vllm": False, "bf16": False, "dataloader_pin_memory": False})  # TRL takes them
    with pytest.raises(RuntimeError, match="CUDA only"):
        grpo_args(training_args(tc, 10, 0, "/tmp/x", 512, Hardware(False, False)), tc.rl, phase, hw_cuda=False)
    assert json.dumps(args)  # plain values, loggable


def run_tiny(tiny_models_dir, tmp_path, name, **over):
    """A tiny run of the flow in this process; call it from a test that asks for ``harness``."""
    import yaml

    from flows.flywheel_flow import flywheel
    from flywheel.config.loading import load_config
    from tests.conftest import tiny_tree

    path = tmp_path / f"{name}.yaml"
    tree = tiny_tree(tiny_models_dir, tmp_path, run__name=name, **over)
    path.write_text(yaml.safe_dump(tree))
    flywheel(load_config(path).model_dump(mode="json"))
    return tmp_path / name


def test_sft_then_a_reward_model_then_grpo_on_its_rewards(tiny_models_dir, tmp_path, harness):
    """train.schedule [sft, reward, grpo]: iteration 1 imitates; iteration 2 trains a reward model
    on the judged pairs (its pair accuracy measured on validation pairs) and carries the target
    forward; iteration 3 learns from that model's rewards on the prompts its bandit chose, and its
    rollouts are a dataset on disk with a card."""
    from flywheel.ground.store import RunStore
    from flywheel.learning.curation import load_dataset_dir

    run = run_tiny(tiny_models_dir, tmp_path, "rl", run__iterations=3, train__schedule=["sft", "reward", "grpo"],
                   train__rl={"generations": 4, "reward": "reward_model"}, curate__include_target_ties=False)
    stages = {k: json.loads((run / f"iter-000{k}" / "stages" / "train.json").read_text())["student"] for k in (1, 2, 3)}
    made = stages[2]["reward_model"]
    assert made["path"].endswith("reward-models/student@2") and made["steps"] == 4 and made["pairs"] > 0
    assert made["validation_pairs"] == 0 or 0.0 <= made["accuracy"] <= 1.0
    assert (run / "reward-models" / "student@2" / "README.md").exists()
    assert changed(run / "models" / "student@1", run / "models" / "student@2") == []  # carried forward
    assert not (run / "iter-0001" / "rollouts").exists() and not (run / "iter-0003" / "rollouts-log").exists()
    everything = load_dataset_dir(run / "iter-0003" / "rollouts")
    data = everything.filter(lambda r: r["step"] > 0)  # the trainer's; step 0: sampled before (dynamic sampling)
    assert len(everything) - len(data) == stages[3]["sampling"]["answers"]
    assert len(data) == 4 * 8 and set(data["target"]) == {"student"} and set(data["iteration"]) == {3}
    assert None not in data["reward"] and len(set(data["reward"])) > 4  # a reward model's scores, not 0/1
    assert stages[3]["rewards"]["scored"] == 32 and stages[3]["rewards"]["failed"] == 0
    chosen = {jb.battle.prompt for jb in RunStore(run).judged(3, "train")}
    assert set(data["prompt"]) <= chosen
    assert "# GRPO rollouts, iteration 3" in (run / "iter-0003" / "rollouts" / "README.md").read_text()


def test_grpo_rewarded_by_an_api_judge_that_fails_sometimes(tiny_models_dir, tmp_path, harness):
    """The LLM judge (a loopback OpenAI-compatible server) as GRPO's reward: calls about an answer
    with a "q" in it fail for good (after their retries), others pass after transient faults. The
    run completes; every failed reward is recorded with its error and never scored."""
    from flywheel.learning.curation import load_dataset_dir
    from tests.fakeapi import FakeAPI, fenced_blocks

    def has_q(text):
        blocks = fenced_blocks(text)
        return "q" in blocks.get("ANSWER A", "") + blocks.get("ANSWER B", "")

    with FakeAPI("judge", fail_when=has_q) as jud:
        jud.faults = [429, 500]
        judge = {"kind": "llm", "player": {"name": "judge", "kind": "openai", "model": "judge-1", "base_urls": [jud.url],
                                           "max_new_tokens": 64, "max_retries": 1, "backoff_s": 0.01, "timeout_s": 5}}
        run = run_tiny(tiny_models_dir, tmp_path, "rl-judge", run__iterations=1, train__method="grpo", judge=judge,
                       train__rl={"generations": 4, "reward": "judge", "dynamic_sampling": False},
                       judge__max_invalid_rate=1.0)
    data = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    failed = [r for r in data if r["reward"] is None]
    assert failed and all(r["error"] and r["advantage"] == 0.0 for r in failed)
    assert all(r["reward"] in (0.0, 0.5, 1.0) for r in data if r["reward"] is not None)
    assert all(r["reward"] is None for r in data if "q" in r["completion"])  # a failed call is never a 0
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    assert trained["rewards"]["failed"] == len(failed) and trained["rewards"]["scored"] == len(data) - len(failed)


def test_left_padded_answers_are_scored_where_they_were_sampled(tiny_models_dir):
    """GRPO scores left-padded (prompt, answer) rows without position ids: on a GPT-2 (learned
    absolute positions) a padded row would be read at shifted positions. With the filled position
    ids each row's logits equal those of the same row alone, unpadded."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from flywheel.learning.rl import fill_position_ids

    path = tiny_models_dir / "student"
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    rows = tok(["3+4=7", "count a aabcabcaa=5"], return_tensors="pt", padding=True)
    alone = model(**tok(["3+4=7"], return_tensors="pt")).logits[0, -1]
    with torch.no_grad():
        shifted = model(input_ids=rows.input_ids, attention_mask=rows.attention_mask).logits[0, -1]
        handle = fill_position_ids(model)
        filled = model(input_ids=rows.input_ids, attention_mask=rows.attention_mask).logits[0, -1]
        handle.remove()
    assert not torch.allclose(shifted, alone, atol=1e-3)  # what TRL's forward alone would read
    assert torch.allclose(filled, alone, atol=1e-4)
