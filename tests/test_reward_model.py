"""A reward model from the arena (issue 37): TRL's RewardTrainer on the tiny student, the scorer
that reads it, and the judge (``judge.kind: reward_model``) that decides battles with it."""

import dataclasses
import json
import math
import random

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForSequenceClassification, set_seed

from flywheel.config.tree import JudgeConfig, TrainConfig
from flywheel.ground.records import Battle
from flywheel.learning.reward_training import pair_accuracy, train_reward_model
from judges.build import build_judge
from judges.reward_model import RewardModelJudge, bt_margin
from judges.reward_scorer import RewardScorer

CFG = TrainConfig(batch_size=16, checkpoint_steps=0)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny model's operations are too small to split: one thread trains them fastest, and
    several fight the other processes on the machine for its cores (ten times slower on two busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def sums(seed: int, n: int, exclude: frozenset = frozenset()) -> Dataset:
    """``a+b=`` prompts: chosen the sum, rejected its negation (a sign error: wrong, and easy to see)."""
    rng, rows = random.Random(seed), {}
    while len(rows) < n:
        a, b = rng.randint(1, 49), rng.randint(1, 49)
        if f"{a}+{b}=" not in exclude:
            rows[f"{a}+{b}="] = str(a + b)
    return Dataset.from_dict({"prompt": list(rows), "chosen": list(rows.values()),
                              "rejected": ["-" + s for s in rows.values()]})


def swapped(pairs: Dataset) -> Dataset:
    return pairs.rename_columns({"chosen": "rejected", "rejected": "chosen"})


TRAIN = sums(1, 64)
HELD_OUT = sums(2, 100, exclude=frozenset(TRAIN["prompt"]))


@pytest.fixture(scope="module")
def reward_model(tiny_models_dir, tmp_path_factory):
    """The tiny student turned reward model: 24 steps on the sums (and what they taught it)."""
    out = tmp_path_factory.mktemp("rm") / "student@1"
    res = train_reward_model(str(tiny_models_dir / "student"), out, TRAIN, CFG, steps=24, seed=0)
    return out, res


def test_a_reward_trainer_step_moves_the_head_and_the_body(tiny_models_dir, tmp_path):
    base = str(tiny_models_dir / "student")
    out = tmp_path / "student@1"
    res = train_reward_model(base, out, TRAIN, TrainConfig(batch_size=8), steps=2, seed=3)
    assert res.steps == 2 and res.pairs == 64 and res.loss is not None and math.isfinite(res.loss)
    set_seed(3)  # the head as training initialised it
    before = dict(AutoModelForSequenceClassification.from_pretrained(base, num_labels=1).named_parameters())
    after = dict(AutoModelForSequenceClassification.from_pretrained(out).named_parameters())
    assert "score.weight" in after and after.keys() == before.keys()
    moved = [n for n in before if not torch.equal(before[n], after[n])]
    # The head and every weight of the body. The final norm's bias may stay: it adds the same
    # score.weight . bias to the chosen and the rejected reward, and the loss sees their difference only
    # (its gradient is zero up to rounding, and biases are not decayed).
    assert set(before) - set(moved) <= {"transformer.ln_f.bias"} and "score.weight" in moved
    saved = AutoModelForSequenceClassification.from_pretrained(out).config
    assert saved.num_labels == 1 and saved.pad_token_id == 0  # the tokenizer's <pad>: where a sequence ends
    card = (out / "README.md").read_text()
    assert "- steps: 2;" in card and "- pairs: 64 (prompt, chosen, rejected; text)" in card and base in card
    assert f"training pairs (chosen scored above rejected, final weights): {res.train_accuracy:.3f}" in card


def test_a_few_dozen_steps_rank_held_out_sums_and_swapped_labels_teach_the_opposite(reward_model, tiny_models_dir,
                                                                                     tmp_path):
    path, res = reward_model
    assert res.steps == 24 and res.loss < 0.6 and res.accuracy is None  # held-out accuracy: the caller's
    scorer = RewardScorer(path, device="cpu")
    held = pair_accuracy(scorer, HELD_OUT)
    assert held is not None and held >= 0.9 and res.train_accuracy >= 0.9
    assert dataclasses.replace(res, accuracy=held).accuracy == held
    assert pair_accuracy(scorer, HELD_OUT.select([])) is None
    assert pair_accuracy(scorer, TRAIN) == res.train_accuracy  # the scorer reads pairs as the trainer did
    # The same steps on the same pairs with the labels swapped: the ranking follows the labels.
    other = tmp_path / "swapped"
    train_reward_model(str(tiny_models_dir / "student"), other, swapped(TRAIN), CFG, steps=24, seed=0)
    assert pair_accuracy(RewardScorer(other, device="cpu"), HELD_OUT) <= 0.1


def test_scores_in_a_batch_equal_scores_one_at_a_time(reward_model):
    scorer = RewardScorer(reward_model[0], device="cpu", batch_size=64)
    prompts, answers = ["1+2=", "12+30=", "7+7="], ["3", "-42", "14 is the sum of seven and seven"]
    batched = scorer.score(prompts, answers)
    alone = [scorer.score([p], [a])[0] for p, a in zip(prompts, answers)]
    assert batched == pytest.approx(alone, abs=1e-5)
    # Read as TRL reads a text pair in training: prompt + answer + <eos>.
    assert scorer.ids("1+2=", "3") == scorer.tokenizer("1+2=3<eos>")["input_ids"]
    assert scorer.score([], []) == []


def battle(bid: str, a: str, b: str, prompt: str = "20+22=", error: str | None = None) -> Battle:
    return Battle(bid, 1, "train", "p" + bid, prompt, "add", 1, None, "student@1", "calc", a, b, error)


def test_the_judge_decides_battles_as_the_scorer_ranks_answers(reward_model):
    path, _ = reward_model
    judge = build_judge(JudgeConfig(kind="reward_model", reward_model=str(path)), roster=None)
    assert isinstance(judge, RewardModelJudge) and judge.name == "reward_model:student@1" and not judge.chat
    battles = [battle("1", "42", "-42"), battle("2", "-42", "42"), battle("3", "42", "42"),
               battle("4", "42", "  "), battle("5", "42", "-42", error="timeout"), battle("6", "7", "-7", "3+4=")]
    js = judge.judge(battles)
    assert [j.battle_id for j in js] == ["1", "2", "3", "4", "5", "6"]
    assert [j.winner for j in js] == ["model_a", "model_b", "tie", None, None, "model_a"]
    assert js[3].error == "empty response (b)" and js[4].error == "battle failed: timeout"
    assert js[2].margin == 0 and js[2].score_a == js[2].score_b
    scores = judge.scorer.score(["20+22=", "20+22=", "3+4=", "3+4="], ["42", "-42", "7", "-7"])
    for j, (ra, rb) in ((js[0], scores[:2]), (js[1], scores[1::-1]), (js[5], scores[2:])):
        assert (j.score_a, j.score_b) == pytest.approx((ra, rb), abs=1e-5)
        assert j.margin == pytest.approx(bt_margin(ra, rb)) and 0 < j.margin < 1 and j.flip is None
    # A margin below the tie margin is a tie; the tie margin is the config's.
    wide = build_judge(JudgeConfig(kind="reward_model", reward_model=str(path),
                                   reward_tie_margin=js[0].margin + 1e-6), roster=None)
    assert wide.judge(battles[:1])[0].winner == "tie"


def test_bt_margin_is_the_confidence_beyond_a_coin_flip():
    assert bt_margin(0.0, 0.0) == 0
    assert bt_margin(1.0, 0.0) == pytest.approx(2 / (1 + math.exp(-1)) - 1) == bt_margin(0.0, 1.0)
    assert 0.999 < bt_margin(10.0, 0.0) < 1


def test_a_reward_model_judge_needs_the_path_of_a_reward_model():
    from pydantic import ValidationError

    from flywheel.config.loading import ConfigError, load_config

    with pytest.raises(ValidationError, match="kind reward_model needs judge.reward_model"):
        JudgeConfig(kind="reward_model")
    with pytest.raises(ConfigError, match="kind reward_model needs judge.reward_model"):
        load_config(None, ["judge.kind=reward_model"])
    assert load_config(None, ["judge.kind=reward_model", "judge.reward_model=runs/x/reward-models/student@1"]
                       ).judge.reward_model == "runs/x/reward-models/student@1"
    with pytest.raises(ValidationError):
        JudgeConfig(kind="reward_model", reward_model="x", reward_tie_margin=1.0)


def test_no_pairs_or_no_steps_is_an_error_not_a_random_head(tiny_models_dir, tmp_path):
    base = str(tiny_models_dir / "student")
    with pytest.raises(ValueError, match="nothing to train on"):
        train_reward_model(base, tmp_path / "a", TRAIN.select([]), CFG, steps=4, seed=0)
    with pytest.raises(ValueError, match="nothing to train on"):
        train_reward_model(base, tmp_path / "b", TRAIN, CFG, steps=0, seed=0)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_reward_training_killed_after_a_checkpoint_resumes_to_the_same_weights(tiny_models_dir, tmp_path,
                                                                               monkeypatch):
    """With train.checkpoint_steps and a state_dir, a kill loses only the steps since the last
    checkpoint; the resumed model has the weights, loss and accuracy of a run never interrupted, and
    a run whose training had finished trains no step more."""
    import flywheel.ground.progress

    class Killed(Exception):
        pass

    real, steps_run = flywheel.ground.progress.trainer_callback, []

    def watched(desc: str, total: int, kill: bool):
        handler = real(desc, total)

        class Watch(type(handler)):
            def on_step_end(self, args, state, control, **kw):
                steps_run.append(state.global_step)
                return super().on_step_end(args, state, control, **kw)

            def on_save(self, args, state, control, **kw):
                if kill and state.global_step == 2:
                    raise Killed  # the process dies right after this checkpoint is written

        handler.__class__ = Watch
        return handler

    base, cfg = str(tiny_models_dir / "student"), TrainConfig(batch_size=8, checkpoint_steps=2)
    straight = train_reward_model(base, tmp_path / "straight", TRAIN, cfg, steps=4, seed=0, state_dir=tmp_path / "s0")
    state = tmp_path / "state"
    monkeypatch.setattr(flywheel.ground.progress, "trainer_callback", lambda d, t: watched(d, t, kill=True))
    with pytest.raises(Killed):
        train_reward_model(base, tmp_path / "resumed", TRAIN, cfg, steps=4, seed=0, state_dir=state)
    assert steps_run == [1, 2] and not (tmp_path / "resumed").exists()
    steps_run.clear()
    monkeypatch.setattr(flywheel.ground.progress, "trainer_callback", lambda d, t: watched(d, t, kill=False))
    resumed = train_reward_model(base, tmp_path / "resumed", TRAIN, cfg, steps=4, seed=0, state_dir=state)
    assert steps_run == [3, 4] and resumed == straight
    assert json.loads((state / "reward" / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    steps_run.clear()
    again = train_reward_model(base, tmp_path / "again", TRAIN, cfg, steps=4, seed=0, state_dir=state)
    assert steps_run == [] and again == straight
    weights = [dict(AutoModelForSequenceClassification.from_pretrained(tmp_path / d).named_parameters())
               for d in ("straight", "resumed", "again")]
    assert all(torch.equal(weights[0][n], w[n]) for w in weights[1:] for n in weights[0])


# A chat template for the tiny tokenizer: each turn is its role's initial, a space, the content, <eos>.
TEMPLATE = "{% for m in messages %}{{ m['role'][0] }} {{ m['content'] }}{{ eos_token }}{% endfor %}"


def test_conversational_pairs_are_read_through_the_chat_template_in_training_and_in_judging(tiny_models_dir,
                                                                                            tmp_path):
    import shutil

    from transformers import AutoTokenizer

    from flywheel.ground.chat import assistant, messages

    chat = tmp_path / "chat-student"
    shutil.copytree(tiny_models_dir / "student", chat)
    tokenizer = AutoTokenizer.from_pretrained(chat)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(chat)
    rows = TRAIN.select(range(32))
    pairs = Dataset.from_dict({"prompt": [messages(p, "add") for p in rows["prompt"]],
                               "chosen": [assistant(c) for c in rows["chosen"]],
                               "rejected": [assistant(r) for r in rows["rejected"]]})
    res = train_reward_model(str(chat), tmp_path / "rm", pairs, CFG, steps=2, seed=0)
    assert res.steps == 2 and res.pairs == 32
    assert "conversational" in (tmp_path / "rm" / "README.md").read_text()
    scorer = RewardScorer(tmp_path / "rm", device="cpu")
    assert scorer.chat and scorer.ids(messages("1+2=", "add"), "3") == list(
        tokenizer("s add<eos>u 1+2=<eos>a 3<eos>")["input_ids"])
    assert pair_accuracy(scorer, pairs) == res.train_accuracy  # the same ids as the trainer's
    judge = RewardModelJudge(tmp_path / "rm", tie_margin=0, device="cpu")  # the scorer's arithmetic (on a GPU: bf16)
    j = judge.judge([battle("1", "42", "-42")])[0]
    assert judge.chat and (j.score_a, j.score_b) == pytest.approx(
        scorer.score([[{"role": "user", "content": "20+22="}]] * 2, [assistant("42"), assistant("-42")]), abs=1e-5)
