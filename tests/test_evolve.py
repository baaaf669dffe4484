"""Evolving prompts (select.evolve): the procedural evolver's operations and references, the
decontamination, lineage in the run directory, resuming a run killed after evolving, the player
evolver through the loopback fake OpenAI server, and an evolver that is no configured player."""

from __future__ import annotations

import random

from flywheel.arena.evolved_prompts import EvolveRequest, evolve
from flywheel.config.tree import EvolveConfig, FlywheelConfig
from flywheel.ground.records import Battle, EvolvedPrompt, Judgment, Prompt
from flywheel.ground.store import RunStore
from flywheel.worlds.evolution import HeldOut, compose, deepen, procedural, solve
from flywheel.worlds.tasks import build_suite
from tests.conftest import tiny_tree
from tests.fakeapi import FakeAPI
from tests.fakeapi import solve as oracle


def test_procedural_evolving_makes_harder_or_composed_prompts_whose_reference_is_right():
    """depth: one operand or string a character longer (two letters more to count), the level one
    up; breadth: rev composed with sort and the arithmetic tasks, the answer written backwards.
    Each new reference is checked against an independent solver (the fake API's)."""
    train, _ = build_suite(3, 6, 0)
    rng = random.Random(0)
    composed = 0
    for p in train:
        deep = procedural(p, "depth", rng)
        assert deep is not None and deep.level == p.level + 1 and deep.category == p.category
        assert len(deep.text) == len(p.text) + (2 if p.category == "count" else 1)
        assert deep.reference == oracle(deep.text), (p.text, deep.text, deep.reference)
        broad = procedural(p, "breadth", rng)
        if p.category in ("rev", "count") or p.reference == p.reference[::-1]:
            assert broad is None  # rev of rev is the prompt; a count or a palindrome reads the same backwards
            continue
        composed += 1
        assert broad.text == "rev " + p.text and broad.category == "rev-" + p.category and broad.level == p.level
        assert broad.reference == oracle(p.text)[::-1]
    assert composed > 20
    assert solve("rev-sort", "rev sort 3141=") == "4311" and solve("rev-add", "rev 12+34=") == "64"
    assert deepen("rev-sort", "rev sort 31=", random.Random(1)).startswith("rev sort 31")
    assert solve("add", "12+x=") is None and deepen("sort", "sort abc=", rng) is None
    assert compose("rev", "rev ab=") is None


def test_decontamination_refuses_exact_twin_and_near_duplicate_prompts_of_eval_and_validation():
    held = [Prompt("e1", "3+5=", "add", 1, "8", "eval"), Prompt("e2", "sort 312=", "sort", 1, "123", "eval"),
            Prompt("v1", "Write a short poem about the sea at night, in four lines.", "chat", 1, None, "validation")]
    h = HeldOut.of(held, 0.8)
    assert h.clash("add", " 3+5= ") == "exact"
    assert h.clash("add", "5+3=") == "twin"  # operands swapped: the same meaning
    assert h.clash("rev-sort", "rev sort 213=") == "twin"  # the task inside a composition is a twin of an eval prompt
    assert h.clash("chat", "Write a short poem about the sea at night, in four lines!") == "near-duplicate"
    assert h.clash("add", "3+6=") is None and h.clash("rev-sort", "rev sort 314=") is None
    assert h.clash("chat", "Write a limerick about a cat.") is None


def _request(parents, lineage=(), held=(), **cfg) -> EvolveRequest:
    return EvolveRequest(parents, EvolveConfig(enabled=True, **cfg), 1, 0, {e.id: e for e in lineage},
                         frozenset(), HeldOut.of(list(held), 0.8), 3)


def test_lineage_generations_methods_in_turn_and_what_is_refused():
    pool = [Prompt("a", "12+34=", "add", 2, "46"), Prompt("b", "sort 9021=", "sort", 3, "0129"),
            Prompt("c", "rev abc=", "rev", 3, "cba")]
    earlier = EvolvedPrompt("a", "12+34=", "add", 2, "46", "p0", "depth", "procedural", 1, 0)  # "a" is itself evolved
    out = evolve(_request(pool, [earlier], held=[Prompt("h", "sort 9021=", "sort", 3, "0129", "eval")]))
    by_parent = {e.parent_id: e for e in out.prompts}
    assert by_parent["a"].method == "depth" and by_parent["a"].generation == 2 and by_parent["a"].level == 3
    # "b" would go breadth (methods in turn), but its rewrite composes an eval prompt: refused as a twin
    # "c": depth would pass max_level 3, and rev has no breadth
    assert "b" not in by_parent and out.refused == {"twin": 1, "no rewrite": 1}
    # a parent already evolved by a method goes the other way; with none left it is skipped
    done = [EvolvedPrompt("x", "123+34=", "add", 3, "157", "a", "depth", "procedural", 2, 1)]
    again = evolve(_request(pool[:1], done))
    assert [e.method for e in again.prompts] == ["breadth"] and again.prompts[0].text == "rev 12+34="
    assert evolve(_request(pool[:1], done, methods=["depth"])).prompts == []


def _play_round(ctx, k: int, rnd: int) -> None:
    """Round (k, rnd) as the select stage plans it, played without models (the target answers 0,
    an opponent the reference) and judged as the verifier would; then the bandits' reward step."""
    from flywheel.stages import select

    select.select_round(ctx, k, rnd, {"student": 400})
    battles, verdicts = [], []
    for s in ctx.store.plan(k, rnd):
        p = ctx.prompts[s.prompt_id]
        a, b = ("0" if m.startswith("student") else p.reference for m in (s.model_a, s.model_b))
        battles.append(Battle(s.battle_id, k, "train", p.id, p.text, p.category, p.level, p.reference, s.model_a,
                              s.model_b, a, b, None, s.arm))
        verdicts.append(Judgment(s.battle_id, "verifier", "tie" if a == b else "model_a" if b == "0" else "model_b"))
    ctx.store.append_battles(battles)
    ctx.store.append_judgments(verdicts, k, "train")
    select.reward_round(ctx, k, rnd)


def test_a_run_killed_after_evolving_resumes_with_the_same_evolved_pool(tiny_config):
    """The evolve stage writes evolved/iter-0001.jsonl and is killed before its record: the
    resumed run keeps the file (same bytes), records the stage once, and the next selection's
    bandit (restored from its saved state) has the evolved arms, each prompt once in the pool.
    The round is played without models: what comes after evolving is the ordinary resume's
    (test_resume.py)."""
    from flywheel.run.context import close_run, open_run
    from flywheel.stages import select
    from flywheel.stages.evolve import evolve_prompts

    cfg, _ = tiny_config(run__name="evolve", select__evolve={"enabled": True, "per_iteration": 6})
    ctx = open_run(cfg)
    try:
        _play_round(ctx, 1, 1)
        evolve_prompts.__wrapped__(ctx, 1)  # the stage's work, not its record: killed in between
    finally:
        close_run(ctx)
    store = ctx.store
    first = store.evolved_path(1).read_bytes()
    assert first and store.stage_json(1, "evolve") is None
    ctx = open_run(cfg, resume=store.root)
    try:
        result = evolve_prompts(ctx, 1).to_json()
        assert store.evolved_path(1).read_bytes() == first and store.stage_json(1, "evolve") == result
        assert "refused" not in result and sum(result["evolved"].values()) == len(store.evolved(1))
        assert set(result["arms"]) <= set(ctx.pool_by_cell) and len(result["arms"]) == 2  # select.evolve.arms
        evolved = store.evolved()
        assert len({e.id for e in evolved}) == len(evolved) >= 4
        train_ids = {p.id for p in ctx.train_pool}
        for e in evolved:  # lineage: a pool prompt the target played, how, which generation
            assert e.parent_id in train_ids and e.generation == 1 and e.iteration == 1 and e.evolver == "procedural"
            assert e.reference == solve(e.category, e.text) and ctx.prompts[e.id].text == e.text
        arms = {a for a in ctx.pool_by_cell if a.startswith("evolved/")}
        assert arms and sum(len(ctx.pool_by_cell[a]) for a in arms) == len(evolved)
        assert store.latest_bandit_state("student", (2, 1)) is not None
        sel = select.load_selector(ctx, "student", 2, 1)
        assert arms <= set(sel.cells) and arms <= set(sel.per_cell)
        select.select_round(ctx, 2, 1, {"student": 400})
        played = {s.arm for s in store.plan(2, 1)}
        assert played <= set(ctx.pool_by_cell) and played & arms
        assert evolve_prompts(ctx, 1).to_json() == result and store.evolved_path(1).read_bytes() == first
    finally:
        close_run(ctx)


def test_a_player_evolver_rewrites_through_the_fake_openai_server(tiny_models_dir, tmp_path):
    """The player evolver gets the in-depth or in-breadth instructions with the parent in them;
    its rewrites join without a reference, a refusal and a copy of an eval prompt do not."""
    from flywheel.run.context import Context
    from flywheel.stages.evolve import player_asker

    def reply(text: str) -> str:
        parent = text.rsplit("Prompt:\n", 1)[1]
        if "poem" in parent:
            return "Sorry, I cannot help with that."
        return f"Rewritten prompt: {parent} Then explain each step." if "more demanding" in text else "What is 3+5="

    with FakeAPI("script") as api:
        api.script = reply
        tree = tiny_tree(tiny_models_dir, tmp_path / "runs", run__name="writer")
        tree["opponents"] = [{"name": "calc"}, {"name": "writer", "kind": "openai", "model": "w-1",
                                                "base_urls": [api.url], "max_new_tokens": 64, "backoff_s": 0.01}]
        tree["judge"] = {"kind": "hybrid", "player": {"name": "judge", "kind": "openai", "model": "j-1",
                                                      "base_urls": [api.url]}}
        tree["select"]["evolve"] = {"enabled": True, "evolver": "writer"}
        ctx = Context(FlywheelConfig.model_validate(tree), RunStore(tmp_path / "run"))
        parents = [Prompt("p1", "Explain recursion.", "chat", 1), Prompt("p2", "Name a planet.", "chat", 1),
                   Prompt("p3", "Write a poem.", "chat", 2)]
        req = EvolveRequest(parents, ctx.cfg.select.evolve, 1, 0, {}, frozenset(),
                            HeldOut.of([Prompt("e", "What is 3+5=", "add", 1, "8", "eval")], 0.8), 3)
        out = evolve(req, player_asker(ctx, 1))
        asked = {t.rsplit("Prompt:\n", 1)[1]: t for t in (r["body"]["messages"][-1]["content"] for r in api.requests)}
    assert sorted(asked) == ["Explain recursion.", "Name a planet.", "Write a poem."]  # methods in turn:
    assert "more demanding" in asked["Explain recursion."] and "brand-new prompt" in asked["Name a planet."]
    assert "more demanding" in asked["Write a poem."]
    assert [(e.parent_id, e.text, e.method, e.level, e.reference, e.evolver) for e in out.prompts] == [
        ("p1", "Explain recursion. Then explain each step.", "depth", 2, None, "writer")]
    assert out.refused == {"exact": 1, "no rewrite": 1}
    assert [row["phase"] for row in ctx.store.usage()] == ["evolve"]


def test_an_evolver_that_is_no_configured_player_is_one_error_line_and_no_run_directory(tmp_path):
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    root = tmp_path / "runs"
    args = ["--set", "select.evolve.enabled=true", "--set", "select.evolve.evolver=nobody", "--set", f"run.root={root}"]
    line = ("error: select.evolve.evolver: 'nobody' is not a configured player; name a target or an opponent "
            "(student, calc, scribe, generalist) or procedural")
    for command in ("check", "run"):
        got = CliRunner().invoke(app, [command, *args])
        assert got.exit_code == 2 and got.stderr.strip() == line, got.output
    assert not root.exists()


def test_a_bandit_takes_new_arms_unpulled_and_keeps_what_it_learnt():
    import numpy as np

    from flywheel.maths.bandits import Bandit

    for policy, kw in (("thompson", {"window": 2}), ("exp3", {})):
        b = Bandit(["a", "b"], policy, **kw)
        b.update([0, 0, 1], [1.0, 1.0, 0.0])
        b.add_arms(["c", "a"])
        assert b.arms == ["a", "b", "c"] and b.pulls.tolist() == [2.0, 1.0, 0.0] and b.total_pulls.tolist() == [2, 1, 0]
        b.update([2], [1.0])
        again = Bandit.from_state(b.state())
        assert again.reward_sum.tolist() == [2.0, 0.0, 1.0] and len(again.select(4, np.random.default_rng(0))) == 4
