"""GRPO on conversations (issue 40): a conversation world's RL prompts hold later-turn states made
of the target's own earlier answers and the follow-up asked, rendered as the players render them;
each turn is rewarded against its own reference (the verifier), or in its whole history (the
judge, a reward model); a tiny real run with two-turn battles trains with sft+grpo."""

import json
import shutil

from transformers import AutoTokenizer

from flywheel.config.tree import RL_METHODS, FlywheelConfig, JudgeConfig
from flywheel.ground.chat import raw_prompt
from flywheel.ground.conversation import decode, encode, plain
from flywheel.ground.records import Battle, BattleSpec, Judgment, Prompt, base_name
from flywheel.ground.store import RunStore
from flywheel.learning.judge_rewards import judge_reward, model_reward, verifier_reward
from flywheel.run.context import Context
from flywheel.stages.rl_prompts import rl_prompts
from flywheel.worlds.followups import ProceduralAsker, follow_up
from judges.build import build_verifier
from judges.verifier import VerifierJudge
from tests.test_rl import Scripted

ASKERS = [{"name": "ask", "kind": "procedural"}]
TASKS = {"train_per_cell": 30, "eval_per_cell": 2, "val_per_cell": 2}


def conversation_context(models_dir, root, student_path=None, reward="verifier") -> Context:
    tree = {"world": {"models_dir": str(models_dir), "tasks": TASKS, "conversation": {"turns": 2, "asker": "ask"}},
            "askers": ASKERS, "train": {"method": "sft+grpo", "rl": {"reward": reward}}}
    if student_path is not None:
        tree["targets"] = [{"name": "student", "path": str(student_path), "chat": "on"}]
    return Context(FlywheelConfig.model_validate(tree), RunStore(root))


def side(b: Battle, player: str) -> list[dict]:
    return decode(b.conversation_a if base_name(b.model_a) == player else b.conversation_b)


def test_the_rl_prompts_of_a_conversation_world_hold_turn_2_states_of_the_targets_own_answers(tiny_models_dir,
                                                                                            tmp_path):
    """Real two-turn battles of the tiny models (the student in either seat, twice on one task, a
    battle without it, one on an eval task): each train task gives a turn-1 row and a turn-2 row
    whose history is the student's own first answer, whose text is the follow-up asked and whose
    reference is the asker's from that answer; the raw text is what the player reads, and a chat
    target's conversation renders through its template as its player's does."""
    from flywheel.arena.battles import play_batch
    from flywheel.arena.conversations import turn_prompt
    from flywheel.players import create_player

    ctx = conversation_context(tiny_models_dir, tmp_path / "run")
    train, held = ctx.train_pool[:3], ctx.eval_split[0]
    prompts = {p.id: p for p in [*train, held]}
    specs = [BattleSpec("b0", 1, "train", train[0].id, "student@0", "calc"),
             BattleSpec("b1", 1, "train", train[0].id, "scribe", "student@0"),
             BattleSpec("b2", 1, "train", train[1].id, "generalist", "student@0"),
             BattleSpec("b3", 1, "train", train[2].id, "calc", "scribe"),
             BattleSpec("b4", 1, "train", held.id, "student@0", "calc")]
    play_batch(ctx.roster, ctx.store, specs, prompts)
    battles = ctx.store.battles(1, "train")
    assert all(b.ok and b.multi_turn for b in battles)
    ctx.store.append_judgments(VerifierJudge().judge(battles), 1, "train")
    rows = rl_prompts(ctx, 1, "student").to_list()

    assert sorted((r["prompt_id"], r["turn"]) for r in rows if r["turn"] == 1) == \
        sorted((p.id, 1) for p in train[:2])  # neither the battle without it nor the eval task
    later = [r for r in rows if r["turn"] == 2]
    assert len(later) == 2  # one state per task: its two battles on train[0] share its cached answers
    student = create_player("transformers", "s", path=str(tiny_models_dir / "student"))
    def turn_2_id(b: Battle) -> str:
        mine = side(b, "student")
        return turn_prompt(prompts[b.prompt_id], 1, mine[2]["content"], mine[2].get("reference"), mine[:2]).id

    by_state = {turn_2_id(b): b for b in battles if "student" in (base_name(b.model_a), base_name(b.model_b))}
    for r in later:
        b = by_state[r["prompt_id"]]
        mine = side(b, "student")
        asked = mine[2]["content"]
        assert asked == follow_up(b.prompt, b.reference, 2, ctx.cfg.run.seed) == r["prompt_text"]
        assert decode(r["history"]) == mine[:2]
        assert r["reference"] == ProceduralAsker().reference(mine[:2], asked) == mine[2].get("reference")
        turn = turn_prompt(prompts[b.prompt_id], 1, asked, r["reference"], mine[:2])
        assert r["prompt"] == raw_prompt(asked, None, plain(mine[:2])) == student.render(turn)
        opponent = b.model_a if base_name(b.model_b) == "student" else b.model_b
        theirs = side(b, opponent) if r["baseline_model"] == opponent else None
        if theirs is not None:
            assert r["baseline"] == theirs[3]["content"] and decode(r["baseline_conversation"]) == theirs
    student.close()

    shutil.copytree(tiny_models_dir / "student", tmp_path / "chat")
    tok = AutoTokenizer.from_pretrained(tmp_path / "chat")
    tok.chat_template = ("{% for m in messages %}{{ m['role'][0] }}={{ m['content'] }}{{ eos_token }}{% endfor %}"
                         "{% if add_generation_prompt %}a={% endif %}")
    tok.save_pretrained(tmp_path / "chat")
    chat = conversation_context(tiny_models_dir, tmp_path / "run", student_path=tmp_path / "chat")
    r = next(r for r in rl_prompts(chat, 1, "student").to_list() if r["turn"] == 2)
    player = create_player("transformers", "c", path=str(tmp_path / "chat"), chat="on")
    asked = Prompt("q", r["prompt_text"], "x", 1, history=r["history"])
    assert tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) == player.render(asked)
    player.close()
    chat.roster.pool.release()
    ctx.roster.pool.release()


def scripted_battle(student_answer: str, calc_answer: str, turn_2=("x", "y"), bid="b") -> Battle:
    """A two-turn battle on 17+25= as the arena logs it: the asker's follow-up to both sides, each
    side's turn-2 reference computed by the asker from that side's own answer."""
    asker, task = ProceduralAsker(), {"role": "user", "content": "17+25=", "reference": "42"}
    first = [task, {"role": "assistant", "content": student_answer}]
    asked = asker.ask([first])[0].text

    def conversation(answer: str, last: str) -> str:
        earlier = [task, {"role": "assistant", "content": answer}]
        return encode([*earlier, {"role": "user", "content": asked, "reference": asker.reference(earlier, asked)},
                       {"role": "assistant", "content": last}])

    return Battle(bid, 1, "train", "p-17+25", "17+25=", "add", 2, "42", "student@0", "calc", turn_2[0], turn_2[1],
                  conversation_a=conversation(student_answer, turn_2[0]),
                  conversation_b=conversation(calc_answer, turn_2[1]))


def test_a_turn_2_answer_is_rewarded_against_the_reference_from_its_own_history(tiny_models_dir, tmp_path):
    """The student answered 41 (wrong), the opponent 42: the student's turn-2 state asks the
    follow-up after 41, and its reference builds on 41 (as the battle's does); the verifier
    rewards the answer that builds on 41, not the one right after 42. The judge reward sees both
    whole conversations; a reward model reads the history before the turn."""
    ctx = conversation_context(tiny_models_dir, tmp_path / "run", reward="judge")
    b = scripted_battle("41", "42", turn_2=("?", "?"))
    ctx.store.append_battles([b])
    ctx.store.append_judgments([Judgment("b", "verifier", "model_b")], 1, "train")
    data = rl_prompts(ctx, 1, "student")
    row = next(r for r in data.to_list() if r["turn"] == 2)
    asked = row["prompt_text"]
    own = ProceduralAsker().reference(decode(row["history"]), asked)
    after_right = ProceduralAsker().reference([{"role": "user", "content": "17+25="},
                                               {"role": "assistant", "content": "42"}], asked)
    assert row["reference"] == own != after_right and row["prompt"] == f"17+25=41 {asked}"
    columns = {c: [row[c]] * 2 for c in data.column_names}

    score = verifier_reward(build_verifier(JudgeConfig().verifier))
    assert score([asked] * 2, [own, after_right], columns) == [(1.0, None), (0.0, None)]

    judge = Scripted(["model_a", "model_b"])
    assert [r for r, _ in judge_reward(judge, "student")([asked] * 2, [own, after_right], columns)] == [1.0, 0.0]
    seen = judge.seen[0]
    assert seen.multi_turn and seen.prompt == "17+25=" and seen.response_a == own and seen.model_b == "calc"
    assert decode(seen.conversation_a) == [*decode(row["history"]), {"role": "user", "content": asked,
                                                                    "reference": own},
                                           {"role": "assistant", "content": own}]
    assert decode(seen.conversation_b) == side(b, "calc")  # the opponent's own conversation, whole
    assert judge.seen[0].battle_id != judge.seen[1].battle_id

    class Reads:
        chat, read = False, []

        def score(self, prompts, completions):
            self.read += list(prompts)
            return [0.5] * len(prompts)

    reads = Reads()
    assert model_reward(reads)([asked], [own], {"history": [row["history"]]}) == [(0.5, None)]
    assert model_reward(reads)(["17+25="], ["42"], {}) == [(0.5, None)]  # a first turn reads as before
    assert reads.read == [f"17+25=41 {asked}", "17+25="]
    reads.chat = True
    model_reward(reads)([asked], [own], {"history": [row["history"]]})
    assert reads.read[-1] == [{"role": "user", "content": "17+25="}, {"role": "assistant", "content": "41"},
                              {"role": "user", "content": asked}]  # no reference reaches the model


def test_grpo_on_conversations_is_no_longer_refused_but_a_reward_blind_to_history_is(tmp_path):
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    tree = {"world": {"conversation": {"turns": 2, "asker": "ask"}}, "askers": ASKERS}
    for train in ({"method": "sft+grpo"}, {"schedule": ["sft", "grpo"], "rl": {"reward": "judge"}}):
        assert FlywheelConfig.model_validate({**tree, "train": train}).train.method_of(2) in RL_METHODS
    FlywheelConfig.model_validate({"train": {"method": "grpo", "rl": {"reward": "judge"}},  # single turns: as before
                                   "judge": {"kind": "reward_model", "reward_model": "some/folder"}})
    args = ["--set", "world.conversation={turns: 2, asker: ask}", "--set", "askers=[{name: ask, kind: procedural}]",
            "--set", "train.method=grpo", "--set", "train.rl.reward=judge", "--set", "judge.kind=reward_model",
            "--set", f"judge.reward_model={tmp_path}", "--set", f"run.root={tmp_path / 'runs'}"]
    got = CliRunner().invoke(app, ["check", *args])
    assert got.exit_code == 2 and got.stderr.strip() == (
        "error: invalid config: train.rl.reward judge: the reward-model judge (judge.kind reward_model) reads an "
        "answer after the first user turn alone, not after a conversation's history; use train.rl.reward "
        "reward_model (it reads the history)"), got.output


def test_a_tiny_two_turn_run_learns_with_sft_then_grpo_on_both_turns(tiny_models_dir, tmp_path, harness):
    """A real run: two-turn battles with the procedural asker, then SFT and GRPO (verifier reward).
    Its rollouts hold turn-2 answers, asked after the target's own turn-1 answers, each row saying
    its turn; no eval or validation task is among them."""
    from flywheel.config.loading import load_config
    from flywheel.learning.curation import load_dataset_dir
    from flywheel.worlds.world import world_pools
    from tests.test_rl import run_tiny

    # The session's tiny models (pre-trained on first turns), named apart and outside the world's
    # models_dir: the run pre-trains no multi-turn models (a minute on two cores).
    players = {"targets": [{"name": "pupil", "path": str(tiny_models_dir / "student")}],
               "opponents": [{"name": "adder", "path": str(tiny_models_dir / "calc")},
                             {"name": "writer", "path": str(tiny_models_dir / "scribe")}]}
    run = run_tiny(tmp_path / "no-models", tmp_path, "rl-talk", run__iterations=1, train__method="sft+grpo",
                   train__rl={"generations": 4, "dynamic_sampling": False, "pick_online": False},
                   world__conversation={"turns": 2, "asker": "ask"}, askers=ASKERS,
                   **players)
    data = load_dataset_dir(run / "iter-0001" / "rollouts").to_list()
    trained = json.loads((run / "iter-0001" / "stages" / "train.json").read_text())["pupil"]
    assert trained["steps"] == 4 and trained["rewards"]["scored"] == len(data) and len(data) % 8 == 0
    assert {r["turn"] for r in data} == {1, 2}
    _, eval_split, validation = world_pools(load_config(run / "config.yaml").world)
    held = {p.text for p in eval_split + validation}
    for r in data:
        earlier = decode(r["history"])
        assert (r["turn"] == 1) == (earlier == [])
        assert not ({r["prompt"]} | {m["content"] for m in earlier if m["role"] == "user"}) & held
    played = {b.prompt: side(b, "pupil") for b in RunStore(run).battles(1, "train") if "pupil" in b.model_a + b.model_b}
    for r in (r for r in data if r["turn"] == 2):
        first = decode(r["history"])[0]["content"]
        assert decode(r["history"]) == played[first][:2] and r["prompt"] == played[first][2]["content"]


def test_the_multiturn_rl_recipe_is_the_multiturn_recipe_with_grpo_in_its_last_iteration():
    from pathlib import Path

    from flywheel.config.loading import load_config

    recipes = Path(__file__).parents[1] / "flows" / "recipes"
    both, talk = (load_config(recipes / f"{n}.yaml") for n in ("multiturn_rl", "multiturn"))
    assert both.model_copy(update={"train": talk.train}) == talk
    assert [both.train.method_of(k) for k in range(1, 5)] == ["sft", "sft", "sft", "grpo"]
