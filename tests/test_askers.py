"""Askers as bandit arms (issue 40 part 4): the asker bandit moves away from a useless asker, its
state goes through the store, one asker plans as before; the repeating asker; Chatbot Arena logs
as a multi-turn prompt pool."""

from __future__ import annotations

import json

from flywheel.config.tree import FlywheelConfig
from flywheel.ground.conversation import decode
from flywheel.ground.records import Battle, Judgment, stable_id
from flywheel.ground.store import RunStore
from flywheel.run.context import Context
from flywheel.run.selectors import load_selector
from flywheel.stages.select import reward_round, select_round
from flywheel.worlds.followups import RepeatingAsker

ASKERS = [{"name": "followups", "kind": "procedural"}, {"name": "parrot", "kind": "procedural", "procedure": "repeat"}]


def _context(tmp_path, asker, rounds: int = 4, name: str = "run") -> Context:
    cfg = FlywheelConfig.model_validate({
        "world": {"tasks": {"categories": ["add", "sub"], "levels": [1, 2], "train_per_cell": 20,
                            "val_per_cell": 2, "eval_per_cell": 2},
                  "conversation": {"turns": 2, "asker": asker}},
        "askers": ASKERS, "select": {"battles_per_iteration": 40 * rounds, "rounds": rounds}})
    return Context(cfg, RunStore(tmp_path / name))


def _play_round(ctx: Context, k: int, rnd: int, teaches: dict[str, float]) -> None:
    """Round ``rnd``'s plan as scripted battles: the target loses (a new training example) with
    probability ``teaches[asker]``, drawn from the battle id, and ties otherwise."""
    specs = ctx.store.plan(k, rnd)
    battles, verdicts = [], []
    for s in specs:
        p = next(p for p in ctx.train_pool if p.id == s.prompt_id)
        lost = int(stable_id(s.battle_id, "lost"), 16) % 1000 < 1000 * teaches[s.asker]
        target_a = s.model_a.startswith("student")
        battles.append(Battle(s.battle_id, k, "train", p.id, p.text, p.category, p.level, p.reference, s.model_a,
                              s.model_b, "x", "y", None, s.arm, asker=s.asker))
        verdicts.append(Judgment(s.battle_id, "verifier", ("model_b" if target_a else "model_a") if lost else "tie"))
    ctx.store.append_battles(battles)
    ctx.store.append_judgments(verdicts, k, "train")


def test_the_asker_bandit_spends_most_battles_on_the_asker_whose_conversations_teach(tmp_path):
    ctx = _context(tmp_path, ["followups", "parrot"])
    shares = []
    for rnd in range(1, 5):
        result = select_round(ctx, 1, rnd, {"student": 160})
        shares.append(result.askers["followups"] / result.battles)
        _play_round(ctx, 1, rnd, {"followups": 0.6, "parrot": 0.05})
        reward_round(ctx, 1, rnd)
    # even at first, then mostly the useful asker (the same asker draws with both teaching alike: 0.45, 0.15, 0.8)
    assert shares[0] < 0.6 and sum(shares[1:]) / 3 > 0.85, shares
    # the state went through the store: a resumed run restores the asker bandit as it was left
    sel = load_selector(ctx, "student", 2, 1)
    saved = json.loads(ctx.store.bandit_path("student", 1, 4).read_text())
    assert sel.askers.state() == saved["askers"] and sel.askers.arms == ["followups", "parrot"]
    assert sel.askers.means()[0] > sel.askers.means()[1]
    # the same run with one asker configured now: no asker bandit (no battle names an unconfigured asker)
    assert load_selector(_context(tmp_path, "followups"), "student", 2, 1).askers is None


def test_a_rounds_result_counts_its_plans_battles_per_arm_and_per_asker_by_name(tmp_path):
    ctx = _context(tmp_path, ["followups", "parrot"])
    result = select_round(ctx, 1, 1, {"student": 160})
    plan = ctx.store.plan(1, 1)
    assert result.arms == {a: sum(s.arm == a for s in plan) for a in sorted({s.arm for s in plan})}
    assert list(result.arms) == sorted(result.arms) and len(result.arms) > 1
    assert result.askers == {"followups": sum(s.asker == "followups" for s in plan),
                             "parrot": sum(s.asker == "parrot" for s in plan)}
    assert sum(result.arms.values()) == sum(result.askers.values()) == result.battles == len(plan) == 40


def test_one_asker_plans_the_battles_of_several_without_an_asker_column(tmp_path):
    one = _context(tmp_path, "followups", name="one")
    two = _context(tmp_path, ["followups", "parrot"], name="two")
    assert select_round(one, 1, 1, {"student": 160}).askers is None
    select_round(two, 1, 1, {"student": 160})
    a, b = one.store.plan(1, 1), two.store.plan(1, 1)
    assert [(s.battle_id, s.prompt_id, s.model_a, s.model_b, s.arm) for s in a] == \
        [(s.battle_id, s.prompt_id, s.model_a, s.model_b, s.arm) for s in b]  # the asker draws are apart
    assert {s.asker for s in a} == {""} and {s.asker for s in b} == {"followups", "parrot"}
    assert load_selector(one, "student", 1, 2).askers is None


def test_the_repeating_asker_asks_the_first_turn_again_with_its_reference(tmp_path):
    asker = RepeatingAsker("parrot")
    talk = [{"role": "user", "content": "17+25=", "reference": "42"}, {"role": "assistant", "content": "41"}]
    assert [t.text for t in asker.ask([talk])] == ["17+25="]
    assert asker.reference(talk, "17+25=") == "42"
    roster = _context(tmp_path, ["followups", "parrot"]).roster
    assert isinstance(roster.asker("parrot"), RepeatingAsker) and roster.asker().name == "followups"


def test_an_asker_list_naming_an_unconfigured_asker_is_one_error_line(tmp_path):
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    root = tmp_path / "runs"
    got = CliRunner().invoke(app, ["check", "--set", "world.conversation.asker=[followups, nobody]", "--set",
                                   "askers=[{name: followups, kind: procedural}]", "--set", f"run.root={root}"])
    assert got.exit_code == 2 and got.stderr.strip() == (
        "error: invalid config: world.conversation.asker 'nobody' is not a configured player: name one of askers "
        "(configured: followups)"), got.output
    assert "Traceback" not in got.output and not root.exists()


def test_chatbot_arena_conversations_are_a_multi_turn_prompt_pool(tmp_path):
    from flywheel.worlds.prompts import ingest

    turns = [{"role": "user", "content": "What is a flywheel?"}, {"role": "assistant", "content": "A wheel."},
             {"role": "user", "content": "Why is it heavy?"}, {"role": "assistant", "content": "Inertia."}]
    rows = [{"question_id": "q1", "model_a": "x", "model_b": "y", "winner": "model_a", "conversation_a": turns,
             "conversation_b": turns, "turn": 2, "language": "English"},
            {"question_id": "q2", "conversation_a": json.dumps(turns[:2]), "category": "physics"},  # JSON text
            {"question_id": "q3", "conversation_a": [turns[1], turns[0]]},
            {"question_id": "q4", "conversation_a": "not json"}]
    path = tmp_path / "arena.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = ingest(path)
    assert [(p.text, decode(p.turns), p.category) for p in got.prompts] == [
        ("What is a flywheel?", ["Why is it heavy?"], "user")]  # q2 repeats q1's first turn: a duplicate
    assert got.duplicates == 1
    assert [why.split(":")[0] for _, why in got.bad] == ["turn 1", "Expecting value"]
    assert ingest(path, "arena", dedup=False).prompts[1].category == "physics"
