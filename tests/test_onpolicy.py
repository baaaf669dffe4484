"""Learning from the target's own answers: the learnability posterior, flat groups dropped, what
expert iteration and on-policy DPO train on, each method taking a real step on a tiny model, a
sampling phase resumed after a kill, and rewards that fail or cannot score refused."""

import json
import random
import zlib

import pytest
from datasets import Dataset

from flywheel.arena.own_answers import sample_groups
from flywheel.config.tree import TrainConfig
from flywheel.learning.onpolicy import (
    Group,
    OnlinePicker,
    Outcome,
    PromptPosterior,
    SamplingSummary,
    expert_rows,
    keep_chances,
    outcomes_of,
    pick,
    preference_rows,
)
from flywheel.learning.rl import RLPhase
from flywheel.learning.training import TrainJob, train_version
from flywheel.players.hf import TransformersPlayer
from flywheel.players.player import SamplingParams
from tests.test_training import changed


def test_the_posterior_takes_its_cells_rate_as_prior_and_each_prompts_answers_after():
    post = PromptPosterior(strength=2.0)
    assert post.beta("p", "add/1") == (1.0, 1.0)  # nothing seen: uniform
    post.update("p1", "add/1", passes=3, tries=4)  # the cell: 3 of 4 passed
    a, b = post.prior("add/1")
    assert (a, b) == pytest.approx((2 * 4 / 6, 2 * 2 / 6))  # (3+1)/(4+2), worth 2 answers
    assert post.beta("p2", "add/1") == pytest.approx((a, b))  # an unseen prompt of the cell: the prior
    assert post.beta("p1", "add/1") == pytest.approx((a + 3, b + 1))
    # E[p(1-p)] = ab / ((a+b)(a+b+1)): a prompt passed always or never is less learnable than one passed sometimes
    post.update("always", "rev/1", 8, 8)
    post.update("never", "rev/1", 0, 8)
    post.update("half", "rev/1", 4, 8)
    assert post.learnability("half", "rev/1") > post.learnability("always", "rev/1")
    assert post.learnability("half", "rev/1") > post.learnability("never", "rev/1")
    x, y = post.beta("half", "rev/1")
    assert post.learnability("half", "rev/1") == pytest.approx(x * y / ((x + y) * (x + y + 1)))


def test_the_most_learnable_prompts_are_picked_first():
    post = PromptPosterior()
    post.update("solved", "add/1", 8, 8)
    post.update("hopeless", "mul/3", 0, 8)
    rows = [{"prompt_id": p, "category": c.split("/")[0], "level": int(c.split("/")[1])}
            for p, c in (("solved", "add/1"), ("hopeless", "mul/3"), ("new-add", "add/1"), ("new-mul", "mul/3"),
                         ("new-sub", "sub/2"))]
    got = [r["prompt_id"] for r in pick(rows, post, 3, {"new-sub"}, random.Random(0))]
    # sub is seen; among the rest, fresh prompts of seen cells follow their cell, the sampled ones know more
    assert "new-sub" not in got and len(got) == 3
    assert got[-1] in ("solved", "hopeless")


def test_a_categorys_weight_multiplies_its_prompts_learnability_when_picking():
    """train.rl.gap_pick's weights: a prompt of a category weighed 3 beats one twice as learnable
    weighed 1; a category without a weight keeps its learnability as it is."""
    post = PromptPosterior()
    post.update("often", "count/1", 4, 8)  # passed half the time: learnability ~0.23
    post.update("rarely", "sub/1", 1, 8)  # ~0.1
    rows = [{"prompt_id": p, "category": c, "level": 1} for p, c in (("often", "count"), ("rarely", "sub"))]
    assert [r["prompt_id"] for r in pick(rows, post, 1, set(), random.Random(0))] == ["often"]
    assert [r["prompt_id"] for r in pick(rows, post, 1, set(), random.Random(0), {"sub": 3.0})] == ["rarely"]
    assert [r["prompt_id"] for r in pick(rows, post, 1, set(), random.Random(0), {"add": 9.0})] == ["often"]


def test_the_online_picker_picks_prompts_whose_answers_differ_rests_them_and_reads_only_steps_done():
    rows = [{"prompt_id": p, "category": "add", "level": 1} for p in ("mixed", "solved", "hopeless", "mixed2")]
    outcomes = [Outcome(0, "mixed", 40, 80), Outcome(0, "solved", 80, 80), Outcome(0, "hopeless", 0, 80),
                Outcome(0, "mixed2", 41, 80)]
    picker = OnlinePicker(rows, outcomes, k=8, per_chunk=1, seed=0)
    ids = [rows[picker.chunk(c, 0)[0]]["prompt_id"] for c in range(4)]
    # the two whose answers differ, each resting one chunk after it is picked (2 likely to teach, 1 a chunk)
    assert set(ids[:2]) == {"mixed", "mixed2"} and ids[2:] == ids[:2]
    teach = picker.teach(0)
    assert teach[0] > 0.95 and teach[1] < 0.2 and teach[2] < 0.2  # 1 - E[p^8] - E[(1-p)^8]
    again = OnlinePicker(rows, outcomes, k=8, per_chunk=1, seed=0)
    assert [rows[again.chunk(c, 0)[0]]["prompt_id"] for c in range(4)] == ids
    # the trainer's own groups at step 5: both mixed ones solved now, "solved" half forgotten; read only
    # once the picks read step 5, each new group of a prompt halving its earlier ones
    outcomes += [Outcome(5, "mixed", 80, 80), Outcome(5, "mixed2", 80, 80), Outcome(5, "solved", 40, 80)]
    picker.reset()
    assert rows[picker.chunk(0, 4)[0]]["prompt_id"] in ("mixed", "mixed2")
    picker.reset()
    assert rows[picker.chunk(0, 5)[0]]["prompt_id"] == "solved"
    assert picker.passes[0] == 40 / 2 + 80 and picker.tries[0] == 80 / 2 + 80 and picker.passes[1] == 80 / 2 + 40


def test_the_online_picker_weighs_each_prompts_chance_to_teach_by_its_category():
    """train.rl.gap_pick reaches GRPO's and RLOO's online picks: a `sub` prompt less likely to teach
    than an `add` one comes first when `sub` is weighed 4, and how long a picked prompt rests is
    read from the chances alone."""
    rows = [{"prompt_id": "a", "category": "add", "level": 1}, {"prompt_id": "s", "category": "sub", "level": 1}]
    outcomes = [Outcome(0, "a", 40, 80), Outcome(0, "s", 4, 80)]  # teach: ~1.0 and ~0.33
    plain = OnlinePicker(rows, outcomes, k=8, per_chunk=1, seed=0)
    weighed = OnlinePicker(rows, outcomes, k=8, per_chunk=1, seed=0, weights={"sub": 4.0})
    assert [rows[plain.chunk(c, 0)[0]]["prompt_id"] for c in range(2)] == ["a", "a"]  # 1 likely to teach: no rest
    assert [rows[weighed.chunk(c, 0)[0]]["prompt_id"] for c in range(2)] == ["s", "s"]


def test_a_resumed_phase_reads_its_groups_back_from_the_rollout_log_as_the_trainer_scored_them():
    rows = [{"group": "0-1-p", "step": 0, "prompt_id": "p", "reward": r} for r in (1.0, 0.0, None, 1.0)]
    rows += [{"group": "3-0-0", "step": 3, "prompt_id": "q", "reward": r} for r in (1.0, float("nan"), 0.0, 0.5)]
    # a failed reward and one that is not a finite number (which the trainer gets as None) count in neither
    assert outcomes_of(rows, at=1.0) == [Outcome(0, "p", 2, 3), Outcome(3, "q", 1, 3)]


def test_the_picked_sampler_lays_its_prompts_out_as_trls_repeat_sampler():
    from flywheel.learning.rl import PickedSampler

    class Script:
        per_chunk = 2

        def __init__(self):
            self.asked = []

        def reset(self):
            self.asked.append("reset")

        def chunk(self, c, upto):
            self.asked.append((c, upto))
            return [2 * c, 2 * c + 1]

    script = Script()
    sampler = PickedSampler(script, k=3, repeat=2, accumulation=2, chunks=4)
    got = list(sampler)
    assert len(got) == len(sampler) == 4 * 2 * 2 * 3
    assert got[:12] == [0, 0, 0, 1, 1, 1] * 2 and got[12:24] == [2, 2, 2, 3, 3, 3] * 2
    # chunk c is first read as batch 2c, in optimizer step c: it reads the groups of step c - 2 and before
    assert script.asked == ["reset", (0, 0), (1, 0), (2, 0), (3, 1)]


def group(pid, rewards, answers=None):
    return Group({"prompt_id": pid, "prompt_text": f"{pid}=", "category": "add"},
                 tuple(answers or [f"a{i}" for i in range(len(rewards))]), tuple(rewards),
                 tuple(None if r is not None else "down" for r in rewards))


def test_flat_groups_teach_nothing_and_are_dropped():
    flat = [group("all-right", [1.0] * 4), group("all-wrong", [0.0] * 4), group("one-scored", [1.0, None, None, None])]
    mixed = group("mixed", [1.0, 0.0, 1.0, 0.0], ["42", "41", "42", "40"])
    assert all(g.flat for g in flat) and not mixed.flat
    # distinct passed answers, as the target was asked
    assert expert_rows([*flat, mixed], 1.0) == [{"prompt": "mixed=", "history": "", "completion": "42",
                                                 "category": "add"}]
    pairs = preference_rows([*flat, mixed], 1.0)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [("42", "41")]  # one distinct passed answer: one pair
    s = SamplingSummary.of([*flat, mixed], 1.0)
    assert (s.answers, s.failed, s.groups, s.flat, s.all_passed, s.all_failed) == (16, 3, 4, 0.75, 2, 1)
    assert s.by_category["add"]["pass_at_k"] == 0.75 and s.by_category["add"]["flat_groups"] == 0.75


class Scripted:
    """A player whose k answers to a prompt are scripted: prompt i's answers pass ``rates[i]`` of the time."""

    name = "scripted"

    def __init__(self):
        self.asked = []

    def generate(self, prompts, params):
        from flywheel.ground.records import Generation

        self.asked += [p.id for p in prompts]
        return [Generation(self.name, p.id, "right" if int(p.id.split("#")[1]) < int(p.id[1]) else "wrong")
                for p in prompts]


def right(prompts, completions, columns):
    return [(1.0 if c == "right" else 0.0, None) for c in completions]


def test_sampling_drops_nothing_but_counts_the_flat_groups_and_keeps_them_on_disk(tmp_path):
    # p0: 0 of 4 right, p2: 2 of 4, p4: all 4
    rows = [{"prompt_id": f"p{i}", "prompt_text": f"p{i}=", "category": "add", "level": 1, "reference": "right"}
            for i in (0, 2, 4)]
    player = Scripted()
    groups = sample_groups(player, SamplingParams(temperature=1.0), rows, right, k=4, budget=100, at=1.0, seed=0,
                           saved=tmp_path / "own.jsonl")
    assert sorted(g.row["prompt_id"] for g in groups) == ["p0", "p2", "p4"] and len(player.asked) == 12
    assert [g.row["prompt_id"] for g in groups if not g.flat] == ["p2"]
    again = sample_groups(Scripted(), SamplingParams(temperature=1.0), rows, right, k=4, budget=100, at=1.0, seed=0,
                          saved=tmp_path / "own.jsonl")
    assert again == groups  # a resumed phase reads its groups back, sampling nothing
    budgeted = sample_groups(Scripted(), SamplingParams(temperature=1.0), rows, right, k=4, budget=8, at=1.0, seed=0)
    assert len(budgeted) == 2  # the answer budget: 2 groups of 4


def test_a_small_budget_is_sampled_in_rounds_that_the_posterior_steers():
    """60 prompts' worth of answers (a SmolLM2 phase) in one round would be picked by the prior alone:
    in four, the first round shows that one cell's prompts are always passed (flat), and the later
    rounds sample the cell whose answers differ."""
    rows = [{"prompt_id": f"p{d}{c}{i:02}", "prompt_text": f"{c}{i}=", "category": cat, "level": 1,
             "reference": "right"} for d, c, cat in (("4", "r", "rev"), ("2", "a", "add")) for i in range(20)]
    groups = sample_groups(Scripted(), SamplingParams(temperature=1.0), rows, right, k=4, budget=64, at=1.0, seed=0)
    assert len(groups) == 16 and {g.round for g in groups} == {1, 2, 3, 4}
    first = [g for g in groups if g.round == 1]
    assert any(g.flat for g in first)  # the prior knows nothing yet: both cells
    assert all(not g.flat for g in groups if g.round > 1)  # then only the cell whose answers differ


class SeedEcho:
    """A server that answers with the seed of its request, as a seeded vLLM or API server samples."""

    name = "echo"

    def generate(self, prompts, params):
        from flywheel.ground.records import Generation

        return [Generation(self.name, p.id, f"seed {params.seed}") for p in prompts]


def test_each_of_a_prompts_answers_is_asked_with_its_own_seed():
    rows = [{"prompt_id": f"p{i}", "prompt_text": f"p{i}=", "category": "add", "level": 1} for i in range(3)]
    # a budget of 48 answers: rounds of 3 prompts, all three in the first
    groups = sample_groups(SeedEcho(), SamplingParams(temperature=1.0), rows, right, k=4, budget=48, at=1.0, seed=5)
    assert {g.round for g in groups} == {1}
    assert all(len(set(g.answers)) == 4 for g in groups)  # one seed for the k copies would give k equal answers
    assert groups[0].answers == groups[1].answers  # the j-th answers of a round share the j-th seed


def test_a_reward_that_raises_leaves_every_answer_unscored():
    def broken(prompts, completions, columns):
        raise ConnectionError("judge down")

    rows = [{"prompt_id": "p2", "prompt_text": "p2=", "category": "add", "level": 1}]
    (g,) = sample_groups(Scripted(), SamplingParams(temperature=1.0), rows, broken, k=4, budget=4, at=1.0, seed=0)
    assert g.rewards == (None,) * 4 and "judge down" in g.errors[0] and g.flat


PROMPTS = Dataset.from_dict({"prompt": ["12+3=", "4*2="] * 2, "prompt_text": ["12+3=", "4*2="] * 2,
                             "reference": ["15", "8"] * 2, "prompt_id": ["p0", "p1", "p2", "p3"],
                             "category": ["add", "mul"] * 2, "level": [1, 1, 1, 1]})


@pytest.mark.parametrize("method,rows", [
    ("sft", {"prompt": ["12+3=", "4*2="], "completion": ["15", "8"]}),  # expert iteration trains these as SFT
    ("dpo", {"prompt": ["12+3=", "4*2="], "chosen": ["15", "8"], "rejected": ["16", "9"]}),  # on-policy DPO
])
def test_the_rows_of_own_answers_take_a_real_step(tiny_models_dir, tmp_path, method, rows):
    data = Dataset.from_dict(rows)
    cfg = TrainConfig(method=method, batch_size=2, checkpoint_steps=0)
    res = train_version(TrainJob(str(tiny_models_dir / "student"), tmp_path / "v1", 2, 0, method=method), cfg,
                        data if method == "sft" else None, data if method == "dpo" else None)
    assert res.steps == 2 and changed(tiny_models_dir / "student", tmp_path / "v1")


def digits(prompts, completions, columns):
    return [(sum(ch.isdigit() for ch in c) / max(1, len(c)), None) for c in completions]


def test_a_real_rloo_phase_changes_the_weights(tiny_models_dir, tmp_path):
    cfg = TrainConfig(method="rloo", batch_size=4, checkpoint_steps=0, rl={"generations": 2})
    phase = RLPhase(PROMPTS, digits, tmp_path / "rollouts.jsonl", 6)
    res = train_version(TrainJob(str(tiny_models_dir / "student"), tmp_path / "v1", 2, 0, method="rloo"), cfg, rl=phase)
    assert res.steps == 2 and len(res.rollouts) == 8
    assert changed(tiny_models_dir / "student", tmp_path / "v1")


def test_a_tiny_model_samples_k_different_answers_per_prompt(tiny_models_dir):
    player = TransformersPlayer("student", str(tiny_models_dir / "student"), device="cpu", dtype="float32")
    rows = [{"prompt_id": f"p{i}", "prompt_text": f"{i}+{i}=", "category": "add", "level": 1, "reference": str(2 * i)}
            for i in range(4)]
    groups = sample_groups(player, SamplingParams(max_new_tokens=6, temperature=1.0), rows, digits, k=8, budget=32,
                           at=1.0, seed=0)
    assert len(groups) == 4 and all(len(g.answers) == 8 for g in groups)
    assert any(len(set(g.answers)) > 1 for g in groups)  # sampled, not greedy
    json.dumps([g.row for g in groups])  # what is kept on disk is plain JSON
    # A phase killed while sampling (before its groups are kept) samples them again: the same groups,
    # round by round, from the run's seed.
    again = sample_groups(player, SamplingParams(max_new_tokens=6, temperature=1.0), rows, digits, k=8, budget=32,
                          at=1.0, seed=0)
    assert again == groups


def run_stages(tiny_models_dir, tmp_path, name, **over):
    """A tiny run's stages in this process, without a Prefect server (the flow's own tests run it
    through Prefect): the run directory."""
    from flywheel.config.tree import FlywheelConfig
    from flywheel.run.context import close_run, open_run
    from flywheel.stages.iteration import run_to
    from tests.conftest import tiny_tree

    cfg = FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, tmp_path, run__name=name, **over))
    ctx = open_run(cfg)
    try:
        run_to(ctx, cfg.run.iterations)
    finally:
        close_run(ctx)
    return tmp_path / name


def odd_crc(prompts, completions, **columns):
    """A reward a tiny model's sampled answers differ on, on any device: 1 where the answer's CRC-32
    is odd (a group of four different answers is flat one time in eight)."""
    return [float(zlib.crc32(c.encode()) % 2) for c in completions]


@pytest.mark.parametrize("method", ["sft+expert", "expert"])
def test_expert_iteration_in_a_run_trains_on_the_targets_own_passed_answers(tiny_models_dir, tmp_path, method):
    """train.method sft+expert: the iteration samples the target's own answers to its bandit's
    prompts, keeps them as its rollouts, and trains one SFT phase on the curated rows and the passed
    answers of the groups that teach; expert: on the passed answers alone."""
    from flywheel.learning.curation import load_dataset_dir

    run = run_stages(tiny_models_dir, tmp_path, "expert", run__iterations=1, train__method=method,
                   train__rl={"generations": 4, "reward": "tests.test_onpolicy:odd_crc"})
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    sampled = trained["sampling"]
    own = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    assert len(own) == sampled["answers"] > 0 and {r["step"] for r in own} == {0}
    assert all(r["reward"] == odd_crc([], [r["completion"]])[0] for r in own)
    groups = {}
    for r in own:
        groups.setdefault(r["prompt_id"], []).append(r)
    teach = {p: g for p, g in groups.items() if len({r["reward"] for r in g}) > 1}
    assert sampled["groups"] == len(groups) and sampled["flat_groups"] == pytest.approx(1 - len(teach) / len(groups))
    passed = {(p, r["completion"]) for p, g in teach.items() for r in g if r["reward"] == 1.0}
    curated = len(load_dataset_dir(run / "iter-0001" / "sft")) if method == "sft+expert" else 0
    assert passed and trained["examples"] == curated + len(passed) and "curated_kept" not in sampled  # thin_known off
    assert changed(tiny_models_dir / "student", run / "models" / "student@1")


def test_on_policy_dpo_in_a_run_trains_on_pairs_of_the_targets_own_passed_and_failed_answers(tiny_models_dir, tmp_path):
    """train.method onpolicy_dpo: the iteration samples the target's own answers, keeps them as its
    rollouts, and trains DPO on pairs of them: in every group that teaches, each distinct passed
    answer with a distinct failed one, in turn; a flat group gives no pair."""
    from flywheel.learning.curation import load_dataset_dir

    run = run_stages(tiny_models_dir, tmp_path, "odpo", run__iterations=1, train__method="onpolicy_dpo",
                     train__rl={"generations": 4, "reward": "tests.test_onpolicy:odd_crc"})
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    own = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    assert len(own) == trained["sampling"]["answers"] > 0
    groups: dict[str, list[dict]] = {}
    for r in own:
        groups.setdefault(r["prompt_id"], []).append(r)
    teach = [g for g in groups.values() if len({r["reward"] for r in g}) > 1]
    pairs = sum(min(len({r["completion"] for r in g if r["reward"] == 1.0}),
                    len({r["completion"] for r in g if r["reward"] == 0.0})) for g in teach)
    assert teach and len(teach) < len(groups) and pairs > 0  # some groups flat, some teach
    assert trained["examples"] == pairs and trained["steps"] > 0
    assert changed(tiny_models_dir / "student", run / "models" / "student@1")


def test_gap_pick_spends_the_first_round_on_the_categories_its_target_trails_most(tiny_models_dir, tmp_path):
    """train.rl.gap_pick 2 in a tiny run: the train stage records each category's weight, 1 + 2 x
    the best opponent's validation accuracy there minus student@0's (at least 1), and the first
    round, where every prompt's learnability is still its cell's prior of one half, samples only
    prompts of the categories weighed most."""
    from flywheel.learning.curation import load_dataset_dir
    from flywheel.worlds.world import world_pools
    from tests.conftest import gaps_run, tiny_world

    rl = {"generations": 4, "reward": "tests.test_onpolicy:odd_crc", "prompts": "train", "answers": 128,
          "gap_pick": 2.0}
    run, own, best = gaps_run(tiny_models_dir, tmp_path, "pick", train__method="sft+expert", train__rl=rl)
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    weights = trained["picks"]
    assert weights == {c: pytest.approx(1 + 2 * max(0.0, best[c] - own[c]), abs=1e-4) for c in own}
    top = {c for c, w in weights.items() if w == max(weights.values())}
    assert max(weights.values()) > 1.5  # the tiny student trails an opponent somewhere
    rows = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    first = {r["category"] for r in rows if r["group"].split("-")[1] == "1"}
    # unweighed, the first round's 8 picks would be ties broken at random over every category's prompts
    assert first == top and len({p.category for p in world_pools(tiny_world(tiny_models_dir)).train}) > len(top)


def test_the_few_battles_recipe_samples_its_own_answers_to_train_prompts_no_battle_reached(tiny_models_dir, tmp_path):
    """flows/recipes/few_battles.yaml's own settings over a tiny run of 8 battles: the first
    iteration already learns from the target's own answers (its schedule), sampled to train prompts
    beyond the battles' (train.rl.prompts train), never to an eval or validation prompt, and its
    SFT phase trains on the curated rows and the passed answers of the groups that teach."""
    from pathlib import Path

    import yaml

    from flywheel.config.tree import FlywheelConfig
    from flywheel.ground.store import RunStore
    from flywheel.learning.curation import load_dataset_dir
    from flywheel.worlds.world import world_pools
    from tests.conftest import tiny_tree

    recipe = yaml.safe_load((Path(__file__).resolve().parent.parent / "flows/recipes/few_battles.yaml").read_text())
    over = {"run__iterations": 1, "select__battles_per_iteration": 8, "train__schedule": recipe["train"]["schedule"],
            "train__rl": {**recipe["train"]["rl"], "answers": 128}}
    run = run_stages(tiny_models_dir, tmp_path, "few", **over)
    battled = {j.battle.prompt_id for j in RunStore(run).judged(1, "train")}
    own = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    sampled = {r["prompt_id"] for r in own}
    assert len(battled) <= 8 and len(sampled) == 128 // recipe["train"]["rl"]["generations"]
    assert sampled - battled  # train prompts no battle reached
    splits = world_pools(FlywheelConfig.model_validate(tiny_tree(tiny_models_dir, tmp_path, **over)).world)
    assert sampled <= {p.id for p in splits.train} and not sampled & {p.id for p in splits.eval + splits.validation}
    groups: dict[str, set[float]] = {}
    for r in own:
        groups.setdefault(r["prompt_id"], set()).add(r["reward"])
    passed = {(r["prompt_id"], r["completion"]) for r in own if r["reward"] == 1.0 and len(groups[r["prompt_id"]]) > 1}
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    assert trained["examples"] == len(load_dataset_dir(run / "iter-0001" / "sft")) + len(passed)
    assert changed(tiny_models_dir / "student", run / "models" / "student@1")


def test_each_category_keeps_its_curated_rows_by_the_chance_its_own_pass_rate_gives():
    """min(1, 4 (1 - p)) per category: p = 7/8 keeps half the rows, p at most 3/4 all, p = 1 none;
    failed rewards are not answers; a category without one scored answer is absent (all kept)."""
    def g(pid, category, rewards):
        return Group({"prompt_id": pid, "prompt_text": pid, "category": category},
                     tuple(f"a{i}" for i in range(len(rewards))), tuple(rewards),
                     tuple(None if r is not None else "down" for r in rewards))

    groups = [g("r1", "rev", [1.0] * 4), g("r2", "rev", [1.0, 1.0, 1.0, 0.0]), g("s1", "sub", [1.0, 0.0, 0.0, None]),
              g("a1", "add", [1.0, 1.0, 1.0, 0.0]), g("x1", None, [1.0, 1.0]), g("c1", "count", [None, None])]
    assert keep_chances(groups, 1.0) == {"": 0.0, "add": 1.0, "rev": 0.5, "sub": 1.0}


def sub_solved(prompts, completions, category, **columns):
    """The target answers every `sub` prompt right and every other wrong."""
    return [1.0 if c == "sub" else 0.0 for c in category]


def all_solved(prompts, completions, **columns):
    return [1.0] * len(completions)


@pytest.mark.parametrize("reward, kept", [("sub_solved", "not sub"), ("all_solved", "all")])
def test_expert_iteration_drops_the_curated_rows_of_a_category_its_target_always_passes(tiny_models_dir, tmp_path,
                                                                                       reward, kept):
    """train.rl.thin_known: a category whose every sampled answer passes keeps none of its curated
    rows, one whose every answer fails keeps all; where thinning would leave none, every row stays.
    (Every group is flat: no row of its own answers. Off, every row stays: the test above.)"""
    from flywheel.learning.curation import load_dataset_dir

    run = run_stages(tiny_models_dir, tmp_path, "thin", run__iterations=1, train__method="sft+expert",
                     train__rl={"generations": 4, "reward": f"tests.test_onpolicy:{reward}", "answers": 400,
                                "thin_known": True})
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    curated = load_dataset_dir(run / "iter-0001" / "sft").to_list()
    sampled = {r["category"] for r in load_dataset_dir(run / "iter-0001" / "rollouts").to_list()}
    assert "sub" in sampled and len(sampled) > 1 and any(r["category"] == "sub" for r in curated)
    want = sum(r["category"] != "sub" for r in curated) if kept == "not sub" else len(curated)
    assert 0 < want and trained["examples"] == want
    chance = {c: (0.0 if reward == "all_solved" or c == "sub" else 1.0) for c in sampled}
    assert trained["sampling"]["curated_kept"] == {"rows": want, "of": len(curated), "chance": chance}


def test_a_phase_whose_rewards_mostly_fail_stops_the_run_and_makes_no_version(tiny_models_dir, tmp_path, cli_env):
    """`flywheel run` with a user's reward module that never gives a reward: one error line, exit 1,
    no version made from the phase, and its groups not kept (a run resumed once the reward is fixed
    samples and scores them again)."""
    import subprocess
    import sys

    import yaml

    from tests.conftest import tiny_tree

    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "my_rewards.py").write_text("def never(prompts, completions, **columns):\n"
                                                     "    return [None] * len(completions)\n")
    recipe = tmp_path / "never.yaml"
    recipe.write_text(yaml.safe_dump(tiny_tree(tiny_models_dir, tmp_path, run__name="never", run__iterations=1,
                                               train__method="expert",
                                               train__rl={"generations": 4, "reward": "my_rewards:never"})))
    env = {**cli_env, "PYTHONPATH": str(tmp_path / "user")}
    proc = subprocess.run([sys.executable, "-m", "flywheel.face.cli", "run", str(recipe)], capture_output=True,
                          text=True, env=env, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and errors == [
        "error: train.rl.reward my_rewards:never: 100% of target student's rewards failed (over train.rl.max_failed "
        "50%; the first: my_rewards:never gave no number: None); no version was made: fix the reward, then resume "
        "the run"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    run = tmp_path / "never"
    assert (run / "config.yaml").exists() and not (run / "models" / "student@1").exists()
    assert not list(run.glob("iter-0001/train-state/*/own-answers.jsonl"))
    assert not (run / "iter-0001" / "stages" / "train.json").exists()


def test_a_reward_that_is_not_a_finite_number_counts_as_failed():
    """The trainer takes NaN or infinity as no reward, so the phase's check counts them as failed."""
    from flywheel.learning.rl import RewardsFailed, check_rewards

    rl = TrainConfig().rl
    check_rewards(rl, "student@1", [1.0, 0.0, float("nan")], [None, None, None])  # a third failed: under 50%
    with pytest.raises(RewardsFailed, match="67% of target student@1's rewards failed"):
        check_rewards(rl, "student@1", [1.0, float("nan"), float("inf")], [None, None, None])


NEVER_CALLED: list[int] = []  # the answers of each call of ``never``


def never(prompts, completions, **columns):
    NEVER_CALLED.append(len(completions))
    return [None] * len(completions)


def test_a_grpo_phase_whose_rewards_mostly_fail_makes_no_version_and_keeps_no_step_of_it(tiny_models_dir, tmp_path):
    """GRPO without dynamic sampling (nothing sampled before the phase: its trainer's rewards are
    the first): a reward that never gives a number stops the phase after a tenth of its steps, and
    the run with train.rl.max_failed's error; no version is made, and the phase's steps are not kept
    (a run resumed once the reward is fixed trains the phase again from its start)."""
    from flywheel.learning.rl import RewardsFailed

    NEVER_CALLED.clear()

    with pytest.raises(RewardsFailed, match=r"train.rl.reward tests.test_onpolicy:never: 100% of target student@1's "
                                            r"rewards failed \(over train.rl.max_failed 50%"):
        run_stages(tiny_models_dir, tmp_path, "never", run__iterations=1, train__method="grpo", train__steps=10,
                   train__rl={"generations": 4, "reward": "tests.test_onpolicy:never", "dynamic_sampling": False})
    assert len(NEVER_CALLED) == 1  # one step's answers of the phase's 10: it stopped after the first
    run = tmp_path / "never"
    assert not (run / "models" / "student@1").exists() and not (run / "iter-0001" / "stages" / "train.json").exists()
    log_ = run / "iter-0001" / "rollouts-log" / "student.jsonl"  # the phase's steps' rollouts, as they were scored
    assert log_.exists() and not [r for r in map(json.loads, log_.read_text().splitlines()) if r["step"] > 0]


def test_grpo_with_dynamic_sampling_trains_only_on_prompts_whose_answers_differ(tiny_models_dir, tmp_path):
    """train.rl.dynamic_sampling (the default) with shuffled passes (pick_online false): the answers
    sampled before the phase are its rollouts' step 0; the trainer's steps learn only on the prompts
    whose sampled answers got more than one reward."""
    from flywheel.learning.curation import load_dataset_dir

    run = run_stages(tiny_models_dir, tmp_path, "ds", run__iterations=1, train__method="grpo",
                   train__rl={"generations": 4, "reward": "tests.test_onpolicy:odd_crc", "pick_online": False})
    rows = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    sampled = [r for r in rows if r["step"] == 0]
    rewards = {}
    for r in sampled:
        rewards.setdefault(r["prompt_id"], set()).add(r["reward"])
    teach = {p for p, got in rewards.items() if len(got) > 1}
    trained = [r for r in rows if r["step"] > 0]
    assert teach and set(rewards) - teach  # some prompts' answers all got one reward: those are dropped
    assert trained and {r["prompt_id"] for r in trained} <= teach
    stage = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]
    assert stage["sampling"]["answers"] == len(sampled) and stage["rewards"]["scored"] == len(trained)
    from flywheel.face.queries import OWN_ANSWERS_HEADING, result_text
    from flywheel.ground.run_view import RunView

    table = result_text(RunView.open(run)).split(OWN_ANSWERS_HEADING)[1].strip("\n").split("\n\n")[0].splitlines()
    head, row = table[0].split(), table[2].split()  # what `flywheel run` prints: this iteration's row
    got = dict(zip(head, row))
    assert got["method"] == "grpo" and int(got["sampled"]) == len(sampled)
    assert int(got["trainer_answers"]) == len(trained)
    assert float(got["per_step"]) == pytest.approx(len(rows) / stage["steps"], abs=0.05) and got["failed"] == "0"
    from flywheel.face.report_page import write_report

    write_report(RunView.open(run), tmp_path / "report.html")  # the HTML report has the same table
    html = (tmp_path / "report.html").read_text()
    assert "learnt from its own answers" in html and f'<td class="num">{len(trained)}</td>' in html


def longer(prompt, a, b, reference):
    """A custom judge that decides every battle, with or without a reference: the longer answer wins."""
    return "A" if len(a) > len(b) else "B" if len(b) > len(a) else "tie"


def test_the_verifier_reward_samples_no_own_answer_to_a_pool_prompt_without_a_reference(tiny_models_dir, tmp_path):
    """A prompt pool of open prompts (no reference answer) beside the task suite, under a judge that
    decides them: the battles reach them, and the verifier reward, which could score none of them,
    samples its own answers only to the prompts with a reference (none of its rewards fails)."""
    from flywheel.ground.store import RunStore
    from flywheel.learning.curation import load_dataset_dir

    pool = tmp_path / "open.jsonl"
    pool.write_text("".join(json.dumps({"prompt": f"Tell me a story about the number {i}.", "category": "chat"}) + "\n"
                            for i in range(200)))
    run = run_stages(tiny_models_dir, tmp_path, "open", run__iterations=1, train__method="sft+expert",
                     train__rl={"generations": 4}, world__prompt_pools=[{"path": str(pool)}],
                     world__tasks__categories=["add", "sub"], world__tasks__levels=[1],  # 3 cells, one of them open
                     judge={"kind": "custom", "custom": "tests.test_onpolicy:longer"})
    battled = {j.battle.prompt_id: j.battle.reference for j in RunStore(run).judged(1, "train")}
    assert any(ref is None for ref in battled.values())  # the bandit picked open prompts too
    own = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    assert own and all(battled[r["prompt_id"]] is not None and r["reward"] is not None for r in own)


def test_left_out_categories_get_none_of_the_own_answers_and_keep_their_curated_rows(tiny_models_dir, tmp_path):
    """train.rl.leave_out [count, sub] in a tiny run: the target's own answers are sampled to prompts
    of the other categories only (the first round alone, ties at the prior, would otherwise reach
    every category), while the phase still trains on the curated rows of those."""
    from flywheel.learning.curation import load_dataset_dir

    rl = {"generations": 4, "reward": "tests.test_onpolicy:odd_crc", "prompts": "train", "answers": 128,
          "leave_out": ["count", "sub"]}
    run = run_stages(tiny_models_dir, tmp_path, "out", train__method="sft+expert", train__rl=rl)
    own = {r["category"] for r in load_dataset_dir(run / "iter-0001" / "rollouts").to_list()}
    curated = {r["category"] for r in load_dataset_dir(run / "iter-0001" / "sft").to_list()}
    assert len(own) >= 3 and not own & {"count", "sub"} and curated & {"count", "sub"}


def test_learning_on_every_train_prompt_needs_a_reward_that_reads_the_prompt_alone():
    from flywheel.config.tree import FlywheelConfig

    FlywheelConfig(train={"method": "sft+expert", "rl": {"prompts": "train"}})  # the verifier: fine
    with pytest.raises(ValueError, match="train.rl.prompts train: the judge reward compares an answer with the "
                                         "battles' baseline answer"):
        FlywheelConfig(train={"method": "sft+expert", "rl": {"prompts": "train", "reward": "judge"}})


@pytest.mark.parametrize("train, kept", [({}, {"p0", "p1"}),  # picked online: the picker reads every prompt
                                         ({"launcher": "accelerate", "num_processes": 2}, {"p1"}),
                                         ({"rl": {"pick_online": False}}, {"p1"})])
def test_grpo_learns_only_on_prompts_that_taught_unless_its_trainer_picks_online(train, kept):
    """Under several processes the trainer keeps TRL's shuffled sampler, so the flat groups' prompts
    are left out before it, as with pick_online false."""
    from types import SimpleNamespace

    from flywheel.stages.train import from_own_answers

    cfg = SimpleNamespace(train=TrainConfig(batch_size=4, **{**train, "rl": {"generations": 4, **train.get("rl", {})}}))
    roster = SimpleNamespace(is_chat=lambda t: False, config=lambda t: SimpleNamespace(system_prompt=None))
    prompts = Dataset.from_dict({"prompt_id": ["p0", "p1"], "prompt": ["p0=", "p1="]})
    groups = [group("p0", [1.0] * 4), group("p1", [1.0, 0.0, 1.0, 0.0])]
    rl, _, _, method = from_own_answers(SimpleNamespace(cfg=cfg, roster=roster), 1, "student", groups=groups,
                                        rl=RLPhase(prompts, right, "rollouts.jsonl", 8), sft=None, method="grpo")
    assert method == "grpo" and set(rl.prompts["prompt_id"]) == kept


def half_flat(prompts, completions, **columns):
    """A reward that is 1 for every answer to half the prompts (by their id's CRC-32: those groups are
    always flat) and ``odd_crc``'s to the others."""
    return [1.0 if zlib.crc32(p.encode()) % 2 == 0 else float(zlib.crc32(c.encode()) % 2)
            for p, c in zip(columns["prompt_id"], completions)]


def test_the_trainer_picks_online_the_prompts_whose_answers_differ(tiny_models_dir, tmp_path):
    """train.rl.pick_online (the default): the groups sampled before the phase and the trainer's own
    steer which prompts each step learns on. Half the prompts always give a flat group: sampled
    before the phase (every prompt, here), they are seldom picked, and the trainer's groups are far
    less often flat."""
    from flywheel.learning.curation import load_dataset_dir
    from flywheel.learning.rl import RewardSummary

    run = run_stages(tiny_models_dir, tmp_path, "online", run__iterations=1, train__method="grpo",
                     train__rl={"generations": 4, "reward": "tests.test_onpolicy:half_flat", "answers": 1000})
    rows = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    before = RewardSummary.of([r for r in rows if r["step"] == 0]).flat_groups
    trained = [r for r in rows if r["step"] > 0]
    during = RewardSummary.of(trained).flat_groups
    flat_prompts = {r["prompt_id"] for r in rows if zlib.crc32(r["prompt_id"].encode()) % 2 == 0}
    # Sampled before the phase, every prompt once: at least the always-flat half of the groups is flat
    # (the others too, one time in eight); picked at random, the trainer's would be as often.
    sampled = {r["prompt_id"] for r in rows if r["step"] == 0}
    always_flat = len(sampled & flat_prompts) / len(sampled)
    assert always_flat > 0.4 and before >= always_flat and during < 0.3, (always_flat, before, during)
    assert sum(r["prompt_id"] in flat_prompts for r in trained) < 0.2 * len(trained)


def test_grpos_online_picks_lean_to_the_category_gap_pick_weighs_most(tiny_models_dir, tmp_path):
    """train.rl.gap_pick reaches the trainer's own picks: with the category its tiny student trails
    weighed far above the rest, GRPO's steps learn on that category's prompts several times as often
    as it holds of the prompts."""
    from flywheel.learning.curation import load_dataset_dir
    from tests.conftest import gaps_run

    rl = {"generations": 4, "reward": "tests.test_onpolicy:half_flat", "answers": 1000, "gap_pick": 50.0}
    run, _, _ = gaps_run(tiny_models_dir, tmp_path, "leaning", train__method="grpo", train__rl=rl)
    weights = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["student"]["picks"]
    top = max(weights, key=weights.get)
    rows = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    prompts = {r["prompt_id"]: r["category"] for r in rows if r["step"] == 0}  # every prompt, sampled before
    trained = [r["category"] for r in rows if r["step"] > 0]
    held = sum(c == top for c in prompts.values()) / len(prompts)
    assert 0 < held < 0.5 and sum(c == top for c in trained) / len(trained) > 2 * held, (top, held)
