"""`flywheel judge-thresholds`: every tier of a cascade judges the same calibration battles (a vote
log's, or a run's train battles), and the earlier tiers' threshold and tie rule reaching the target
agreement with the last tier at the least cost are chosen. The judges are LLM judges on loopback
OpenAI-compatible servers with scripted verdicts and confidences, so the choice is known in advance."""

import json
import math

from typer.testing import CliRunner

from flywheel.config.loading import dump_config, load_config
from flywheel.face.cli import app
from flywheel.ground.atomic import atomic_write_text
from flywheel.ground.records import Battle
from flywheel.ground.store import RunStore
from tests.fakeapi import FakeAPI
from tests.test_judge_agreement import VOTES, api, fair, recipe, row, write_log


def unsure_on_writing(prompt: str) -> tuple[str, list[tuple[str, float]]]:
    """The cheap tier: right and sure (0.95) on every question but writing, where it reverses the
    verdict, unsure (0.6)."""
    verdict = fair(prompt)[2:-2]
    confidence = 0.95
    if "[writing]" in prompt:
        verdict, confidence = {"A>B": "B>A", "B>A": "A>B", "A=B": "A=B"}[verdict], 0.6
    return f"[[{verdict}]]", [("[[", 0.0), (verdict, math.log(confidence)), ("]]", 0.0)]


def cascade(cheap: FakeAPI, strong: FakeAPI) -> dict:
    return {"kind": "cascade", "cascade": {"tiers": [{"kind": "llm", "price": 0.001, "player": api(cheap, "cheap")},
                                                     {"kind": "llm", "price": 0.01, "player": api(strong, "strong")}]}}


def thresholds(*args: str) -> dict:
    out = CliRunner().invoke(app, ["judge-thresholds", *args, "--format", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_the_cheapest_threshold_and_tie_rule_reaching_the_target_are_chosen(tmp_path):
    # 12 votes: 7 coding (q6 a tie), 4 writing (w3 a tie), 1 uncategorised; the cheap tier reverses 3 writing verdicts
    log = write_log(tmp_path / "arena.jsonl", [row(*v) for v in VOTES if v[0] != "FAIL"])
    with FakeAPI("script") as cheap, FakeAPI("script") as strong:
        cheap.script, strong.script = unsure_on_writing, fair
        config = recipe(tmp_path, cascade(cheap, strong) | {"cache": False})
        strict = thresholds(log, "--config", config, "--target", "0.95")
        asked = (len(cheap.requests), len(strong.requests))
        logprobs = [{bool(r["body"].get("logprobs")) for r in s.requests} for s in (cheap, strong)]
        loose = thresholds(log, "--config", config, "--target", "0.7")
        table = CliRunner().invoke(app, ["judge-thresholds", log, "--config", config])
    assert asked == (24, 24)  # every tier judged every battle, both orders, once
    assert logprobs == [{True}, {False}]  # the last tier's verdicts are the reference: no confidence asked
    rows = {r["judging"]: r for r in strict["rows"]}
    assert rows["tier 0 alone: llm:cheap:arena_hard"]["agreement"] == 0.75  # 9 of 12
    assert rows["tier 1 alone: llm:strong:arena_hard"]["agreement"] == 1.0
    # as configured (no threshold, ties escalated): the two ties go on, the reversed verdicts stand
    assert (rows["cascade as configured"]["agreement"], rows["cascade as configured"]["decided"]) == (0.75, "83%, 17%")
    # the target 0.95: a threshold over 0.6 (and at most 0.95) sends the 4 writing battles on; the coding tie stands
    chosen = rows["cascade chosen"]
    assert strict["chosen"] == {"thresholds": [0.775], "ties": ["decide"]}  # midway between 0.6 and 0.95
    assert (chosen["agreement"], chosen["cost_per_battle"], chosen["decided"]) == (1.0, 0.004333, "67%, 33%")
    assert chosen["saving"] == round(0.01 / 0.004333, 2) and strict["reached"]
    pasted = tmp_path / "pasted.yaml"  # the recipe's judge section as it was, but the chosen settings
    pasted.write_text(strict["paste"])
    judge = load_config(pasted).judge
    assert (judge.kind, judge.cache, judge.cascade.tiers[0].threshold, judge.cascade.tiers[0].ties) == (
        "cascade", False, 0.775, "decide")
    assert judge.cascade.tiers[1].threshold is None and judge.cascade.tiers[1].player.model == "strong-1"
    # the target 0.7: the cheap tier alone decides everything, ties too
    assert (loose["chosen"], loose["rows"][-1]["cost_per_battle"], loose["rows"][-1]["saving"]) == (
        {"thresholds": [None], "ties": ["decide"]}, 0.001, 10.0)
    assert table.exit_code == 0, table.output
    assert table.stdout.startswith(f"12 voted battles of {log}, judged by every tier: llm:cheap:arena_hard -> ")
    assert "The recipe's judge section with the chosen settings:" in table.stdout and "ties: decide" in table.stdout


def test_a_runs_train_battles_are_sampled_by_seed_and_its_eval_battles_never(tmp_path):
    store = RunStore(tmp_path / "run")
    atomic_write_text(store.config_path, dump_config(load_config(None, ["run.name=r"])))
    store.append_battles([Battle(battle_id=f"{phase}{i}", iteration=1, phase=phase, prompt_id=f"p{i}",
                                 prompt=f"[coding] question {phase}{i}", category="add", level=1, reference=None,
                                 model_a="a", model_b="b", response_a="good answer", response_b="poor answer")
                          for phase in ("train", "eval") for i in range(10)])
    with FakeAPI("script") as cheap, FakeAPI("script") as strong:
        cheap.script, strong.script = unsure_on_writing, fair
        config = recipe(tmp_path, cascade(cheap, strong) | {"cache": False})
        first = thresholds(str(store.root), "--config", config, "--limit", "4", "--seed", "1")
        asked = {json.dumps(r) for r in strong.requests}
        again = thresholds(str(store.root), "--config", config, "--limit", "4", "--seed", "1")
    assert (first["battles"], first["source_battles"], first["sample_seed"]) == (4, 10, 1)
    assert first["what"] == "train battles"
    assert "question train" in "".join(asked) and "question eval" not in "".join(asked)
    assert first["rows"] == again["rows"] and first["chosen"] == {"thresholds": [None], "ties": ["escalate"]}


def test_a_judge_that_is_not_a_cascade_or_a_folder_without_a_run_is_one_line_exit_2(tmp_path):
    log = write_log(tmp_path / "arena.jsonl", [row(*v) for v in VOTES[:3]])
    with FakeAPI("script") as server:
        config = recipe(tmp_path, {"kind": "llm", "player": api(server, "judge")})
        not_cascade = CliRunner().invoke(app, ["judge-thresholds", log, "--config", config])
        (tmp_path / "empty").mkdir()
        no_run = CliRunner().invoke(app, ["judge-thresholds", str(tmp_path / "empty"), "--config",
                                          recipe(tmp_path, cascade(server, server))])
        assert not server.requests
    assert (not_cascade.exit_code, not_cascade.stderr.strip()) == (
        2, "error: judge.kind llm: thresholds are chosen for a cascade (judge.kind: cascade, judge.cascade.tiers)")
    assert (no_run.exit_code, no_run.stderr.strip()) == (
        2, f"error: {tmp_path / 'empty'}: not a run directory (no config.yaml)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arena.jsonl", "empty", "judge.yaml"]
