"""The judge cascade (judges/cascade.py): its tiers are real judges (the verifier, LLM judges behind
OpenAI-compatible endpoints on 127.0.0.1, reached through the openai SDK, whose verdicts and
log-probabilities each test scripts). Escalation on each unsure case, the seeded audit, a failing
tier, a resumed round, the tiers' guard, the reports, and the config's bad input."""

import json
import math
import re

import pytest
import yaml

from flywheel.config.parts import JudgeConfig
from flywheel.config.tree import FlywheelConfig
from flywheel.ground.records import Battle, BattleSpec, Judgment
from flywheel.players import create_player
from flywheel.players.api import RetryPolicy
from flywheel.run.context import close_run, open_run
from flywheel.run.summary import judge_report
from flywheel.stages.judge import judge_round, judge_shard
from flywheel.worlds.tasks import build_suite
from judges.cascade import CascadeJudge, Tier, audited, cascade_of
from judges.cascade_report import choose_thresholds, tier_figures, wilson
from judges.diagnostics import flip_rate
from judges.guard import JudgeGuardError, check
from judges.llm import LLMJudge
from judges.verifier import VerifierJudge
from tests.fakeapi import FakeAPI, NoisyJudge, fenced_blocks, judge_reply

NO_RETRY = RetryPolicy(max_retries=0, backoff_s=0.01, max_backoff_s=0.1)


def llm(server, name, confidence=False) -> LLMJudge:
    player = create_player("openai", name, model=name, base_urls=[server.url], retry=NO_RETRY, max_concurrency=8)
    return LLMJudge(player, max_new_tokens=64, confidence=confidence)


def battle(bid, prompt, ra, rb, ref=None) -> Battle:
    return Battle(bid, 1, "train", "p" + bid, prompt, "add", 1, ref, "student@1", "calc", ra, rb)


def scripted(prompt: str):
    """The cheap judge of the first test: honest and sure, but unsure (0.3) on 4+4, biased to seat A on 3+3."""
    question = fenced_blocks(prompt)["QUESTION"]
    if question == "3+3=":
        return judge_reply(prompt, biased_to="A")
    verdict = re.search(r"\[\[(.*?)\]\]", judge_reply(prompt))[1]
    return f"[[{verdict}]]", [("[[", 0.0), (verdict, math.log(0.3 if question == "4+4=" else 0.95)), ("]]", 0.0)]


def test_each_unsure_case_goes_to_the_next_tier_and_every_tier_it_passed_is_recorded():
    with FakeAPI("script") as cheap, FakeAPI("judge") as strong:
        cheap.script = scripted
        cheap.fail_when = lambda text: "5+5=" in text  # this tier's calls fail: an API error
        tiers = [Tier(VerifierJudge(), 0.0, exact=True), Tier(llm(cheap, "cheap", confidence=True), 0.001, 0.8),
                 Tier(llm(strong, "strong"), 0.02)]
        battles = [battle("ref", "6+6=", "12", "11", ref="12"),  # the verifier decides
                   battle("sure", "1+1=", "2", "3"),  # no reference: the cheap judge, sure, decides
                   battle("tie", "2+2=", "4", "4"),  # a tie: on to the strong judge
                   battle("flip", "3+3=", "6", "7"),  # the orders disagree
                   battle("unsure", "4+4=", "8", "9"),  # confidence 0.3 < 0.8
                   battle("failed", "5+5=", "10", "11"),  # the cheap judge's calls fail
                   battle("both", "7+7=", "14", "14", ref="14")]  # the verifier's tie: the cheap one's tie too
        js = {j.battle_id: j for j in CascadeJudge(tiers, audit_share=0.0).judge(battles)}
    decided = {bid: cascade_of(j)["tier"] for bid, j in js.items()}
    assert decided == {"ref": 0, "sure": 1, "tie": 2, "flip": 2, "unsure": 2, "failed": 2, "both": 2}
    why = {bid: [step["unsure"] for step in cascade_of(j)["trail"]] for bid, j in js.items()}
    assert why == {"ref": [None], "sure": ["no reference", None], "tie": ["no reference", "tie", None],
                   "flip": ["no reference", "orders disagree", None],
                   "unsure": ["no reference", "low confidence", None],
                   "failed": ["no reference", "failed", None], "both": ["tie", "tie", None]}
    failed = cascade_of(js["failed"])["trail"][1]
    assert failed["winner"] is None and "judge call failed" in failed["error"]
    assert round(cascade_of(js["sure"])["trail"][1]["confidence"], 6) == 0.95
    assert round(cascade_of(js["unsure"])["trail"][1]["confidence"], 6) == 0.3
    # The deciding tier's verdict is the judgment: its judge's name, its winner.
    assert js["ref"].judge == "verifier" and js["sure"].judge == "llm:cheap:arena_hard"
    assert js["flip"].judge == "llm:strong:arena_hard" and js["flip"].winner == "model_a" and not js["flip"].flip
    assert [js[b].winner for b in ("ref", "sure", "tie", "unsure", "failed")] == ["model_a"] * 2 + ["tie"] + ["model_a"] * 2
    # The strong judge was asked for the five battles the others passed on, both orders, nothing else.
    assert len(strong.requests) == 2 * 5


def seat_a_when_unsure(prompt: str):
    """A strong judge sure (0.95) of every battle but 4+4= (0.3), where it also prefers seat A."""
    question = fenced_blocks(prompt)["QUESTION"]
    reply = judge_reply(prompt, biased_to="A" if question == "4+4=" else None)
    verdict = re.search(r"\[\[(.*?)\]\]", reply)[1]
    return f"[[{verdict}]]", [("[[", 0.0), (verdict, math.log(0.3 if question == "4+4=" else 0.95)), ("]]", 0.0)]


def test_a_tier_asks_the_second_order_only_when_unsure_and_a_battle_it_was_sure_of_costs_half():
    with FakeAPI("judge") as cheap, FakeAPI("script") as strong:
        strong.script = seat_a_when_unsure
        last = LLMJudge(create_player("openai", "strong", model="strong", base_urls=[strong.url], retry=NO_RETRY),
                        max_new_tokens=64, confidence=True, second_order="when_unsure", sure_above=0.8)
        tiers = [Tier(llm(cheap, "cheap"), 0.001), Tier(last, 0.02)]
        right = [battle(f"r{i}", f"{i}+1=", str(i + 1), str(i + 2)) if i % 2 else
                 battle(f"r{i}", f"{i}+1=", str(i + 2), str(i + 1)) for i in range(1, 21)]
        battles = [*right, battle("tie", "9+9=", "18", "18"), battle("unsure", "4+4=", "8", "8")]
        js = {j.battle_id: j for j in CascadeJudge(tiers, audit_share=0.0).judge(battles)}
        seats = [(fenced_blocks(r["body"]["messages"][-1]["content"])["QUESTION"],
                  fenced_blocks(r["body"]["messages"][-1]["content"])["ANSWER A"].strip()) for r in strong.requests]
    # The cheap judge decided the 20 battles with one right answer; the ties went on (ties escalate).
    assert {bid for bid, j in js.items() if cascade_of(j)["tier"] == 1} == {"tie", "unsure"}
    # The tie the strong judge was sure of: one order. 4+4= at 0.3: both orders, which disagree (seat A): a tie.
    assert [step["spent"] for step in cascade_of(js["tie"])["trail"]] == [1.0, 0.5] and js["tie"].flip is None
    assert cascade_of(js["unsure"])["trail"][1]["spent"] == 1.0 and js["unsure"].flip is True
    assert js["unsure"].winner == "tie" and js["tie"].winner == "tie"
    assert sorted(seats) == [("4+4=", "8"), ("4+4=", "8"), ("9+9=", "18")]
    rows = tier_figures(js.values(), [0.001, 0.02])
    assert rows[1]["asked"] == 2 and rows[1]["cost_usd"] == round(1.5 * 0.02, 6)
    # Position bias is read where both orders were asked of every battle: the cheap tier's 20, not
    # the strong tier's flip, which it showed only because it was unsure there.
    assert flip_rate(list(js.values())) == {"rate": 0.0, "judged_both_orders": 20}
    assert check(battles, js, JudgeConfig()).flip_rate == 0.0  # the judge guard reads the same


def asked_first(server) -> dict[str, str]:
    """Question -> the answer the judge was shown in seat A (each question asked once)."""
    blocks = [fenced_blocks(r["body"]["messages"][-1]["content"]) for r in server.requests]
    return {b["QUESTION"]: b["ANSWER A"].strip() for b in blocks}


def test_one_order_first_draws_the_seats_per_battle_and_reads_each_verdict_in_the_battles_own_seats():
    battles = [battle(f"s{i}", f"{i}+1=", str(i + 1), str(i + 2)) if i % 2 else
               battle(f"s{i}", f"{i}+1=", str(i + 2), str(i + 1)) for i in range(1, 41)]
    with FakeAPI("judge") as strong:
        judge = LLMJudge(create_player("openai", "strong", model="strong", base_urls=[strong.url], retry=NO_RETRY),
                         max_new_tokens=64, second_order="when_unsure")
        costed = judge.judge_costed(battles)
        seat_a = asked_first(strong)
    assert len(strong.requests) == 40 and [spent for _, spent in costed] == [0.5] * 40
    # Half the battles, about, were asked with their answers swapped: a judge biased to a seat favours no model.
    assert 10 <= sum(seat_a[b.prompt] != b.response_a for b in battles) <= 30
    assert [j.winner for j, _ in costed] == ["model_a" if i % 2 else "model_b" for i in range(1, 41)]
    assert all(j.flip is None for j, _ in costed)
    assert [j.raw[:6] for j, _ in costed] == ["[B,A] " if seat_a[b.prompt] != b.response_a else "[A,B] "
                                              for b in battles]
    with FakeAPI("judge") as again:  # the draw is the battle's own: the same seats on resume
        judge = LLMJudge(create_player("openai", "strong", model="strong", base_urls=[again.url], retry=NO_RETRY),
                         max_new_tokens=64, second_order="when_unsure")
        judge.judge(battles[20:] + battles[:20])
        assert asked_first(again) == seat_a


def test_the_audit_is_drawn_by_seed_and_never_counted_twice():
    suite, _ = build_suite(0, 12, 0)
    wrong = lambda p: p.reference + "9"
    battles = [battle(f"b{i}", p.text, p.reference if i % 3 else wrong(p), wrong(p) if i % 3 else p.reference,
                      ref=p.reference) if i % 5 else battle(f"b{i}", p.text, p.reference, p.reference, ref=p.reference)
               for i, p in enumerate(suite[:120])]
    with FakeAPI("judge") as strong:
        def cascade(seed):
            return CascadeJudge([Tier(VerifierJudge(), 0.0, exact=True), Tier(llm(strong, "strong"), 0.02)],
                                audit_share=0.2, audit_seed=seed)

        whole = cascade(7).judge(battles)
        asked = len(strong.requests)
        halves = cascade(7).judge(battles[:50]) + cascade(7).judge(battles[50:])  # batched otherwise: the same draw
        other = cascade(8).judge(battles)
    picked = lambda js: {j.battle_id for j in js if cascade_of(j)["audit"] is not None}
    escalated = {j.battle_id for j in whole if cascade_of(j)["tier"] == 1}
    assert escalated == {f"b{i}" for i in range(0, 120, 5)}  # the verifier's ties
    assert picked(whole) == picked(halves) == {b.battle_id for b in battles if audited(b.battle_id, 7, 0.2)
                                               and b.battle_id not in escalated}
    assert picked(other) != picked(whole) and 10 <= len(picked(whole)) <= 35
    assert not picked(whole) & escalated  # a battle the last tier decided is never audited too
    assert asked == 2 * (len(escalated) + len(picked(whole)))  # each battle judged by the last tier once
    assert [j.to_row() for j in whole] == [j.to_row() for j in halves]
    assert len(whole) == len(battles) and all(j.judge == "verifier" for j in whole if j.battle_id in picked(whole))
    rows = tier_figures(whole, [0.0, 0.02])
    assert (rows[0]["decided"], rows[1]["decided"]) == (len(battles) - len(escalated), len(escalated))
    assert rows[1]["asked"] == len(escalated) + len(picked(whole)) and rows[0]["audited"] == len(picked(whole))
    assert rows[0]["agreement"] == 1.0 and rows[0]["agreement_ci"][0] > 0.8  # the honest judge agrees


def test_a_failing_tier_escalates_and_is_recorded_and_a_failing_last_tier_leaves_the_battle_invalid():
    with FakeAPI("judge") as cheap, FakeAPI("judge") as strong:
        cheap.fail_when = lambda text: True
        battles = [battle(f"b{i}", f"{i}+1=", str(i + 1), "0") for i in range(6)]
        js = CascadeJudge([Tier(llm(cheap, "cheap"), 0.001), Tier(llm(strong, "strong"), 0.02)], 0.0).judge(battles)
        assert all(j.valid and cascade_of(j)["tier"] == 1 and j.winner == "model_a" for j in js)
        assert all(cascade_of(j)["trail"][0]["unsure"] == "failed" for j in js)
        rows = tier_figures(js, [0.001, 0.02])
        assert rows[0]["escalated_share"] == 1.0 and rows[0]["decided"] == 0 and rows[1]["decided"] == 6
        strong.fail_when = lambda text: True
        js = CascadeJudge([Tier(llm(cheap, "cheap"), 0.001), Tier(llm(strong, "strong"), 0.02)], 0.0).judge(battles)
    assert all(not j.valid and "judge call failed" in j.error for j in js)
    assert all([s["error"] is not None for s in cascade_of(j)["trail"]] == [True, True] for j in js)


# -- in a run: the judge stage over a round of logged battles ------------------------------------

def run_config(tmp_path, name, cheap, strong, **cascade) -> FlywheelConfig:
    api = {"kind": "openai", "max_retries": 0, "backoff_s": 0.01, "max_new_tokens": 64, "max_concurrency": 8}
    tiers = [{"kind": "verifier"},
             {"kind": "llm", "price": 0.001, "threshold": 0.7,
              "player": {"name": "cheap", "model": "cheap-1", "base_urls": [cheap.url], **api}},
             {"kind": "llm", "price": 0.02, "player": {"name": "strong", "model": "strong-1", "base_urls": [strong.url], **api}}]
    tree = {"run": {"root": str(tmp_path / "runs"), "name": name, "shard_size": 10},
            "select": {"rounds": 1, "battles_per_iteration": 40},
            "judge": {"kind": "cascade", "cascade": {"tiers": tiers, **cascade}}}
    return FlywheelConfig.model_validate(tree)


def log_round(ctx, n: int = 40) -> None:
    """Round 1 of iteration 1 as the battle stage leaves it: the plan and its battle shards. Half
    the prompts keep their reference (the verifier's); half are open (the LLM tiers')."""
    prompts = build_suite(3, 10, 0)[0][:n]
    battles = []
    for i, p in enumerate(prompts):
        right, wrong = p.reference, p.reference + "1"
        ra, rb = [(right, wrong), (wrong, right), (right, right), (wrong, wrong + "2")][i % 4]
        battles.append(Battle(f"b{i:03d}", 1, "train", p.id, p.text, p.category, p.level,
                              p.reference if i % 2 else None, "student@1", "calc", ra, rb))
    specs = [BattleSpec(b.battle_id, 1, "train", b.prompt_id, b.model_a, b.model_b) for b in battles]
    ctx.store.write_plan(1, 1, specs, ctx.cfg.run.shard_size)
    for i in range(0, n, ctx.cfg.run.shard_size):
        ctx.store.append_battles(battles[i:i + ctx.cfg.run.shard_size], ctx.store.shard_name(1, 1, i // 10))


def verdicts(ctx) -> dict[str, dict]:
    return {bid: j.to_row() for bid, j in ctx.store.judgments(1, "train").items()}


def test_a_round_resumed_after_a_kill_mid_round_gives_the_same_verdicts(tmp_path):
    with FakeAPI("script") as cheap, FakeAPI("script") as strong:
        cheap.script, strong.script = NoisyJudge(0.25, 0.1, seed=1), NoisyJudge(0.05, seed=2)
        whole = open_run(run_config(tmp_path, "whole", cheap, strong, audit_share=0.3))
        log_round(whole)
        judge_round(whole, 1, 1)
        close_run(whole)
        asked = (len(cheap.requests), len(strong.requests))

        killed = open_run(run_config(tmp_path, "killed", cheap, strong, audit_share=0.3))
        log_round(killed)
        for i in (0, 2):  # two of the four shards were judged when the run was killed
            judge_shard(str(killed.store.root), 1, 1, i)
        close_run(killed)
        resumed = open_run(run_config(tmp_path, "killed", cheap, strong), resume=killed.store.root)
        assert len(json.loads(resumed.store.manifest_path.read_text())["machines"]) == 2  # opened, then resumed
        judge_round(resumed, 1, 1)
        close_run(resumed)
        assert (len(cheap.requests), len(strong.requests)) == (2 * asked[0], 2 * asked[1])  # nothing asked twice
    assert verdicts(resumed) == verdicts(whole) and len(verdicts(whole)) == 40
    tiers = {bid: cascade_of(Judgment.from_row(r))["tier"] for bid, r in verdicts(whole).items()}
    assert set(tiers.values()) == {0, 1, 2}  # every tier decided some
    assert any(cascade_of(Judgment.from_row(r))["audit"] for r in verdicts(whole).values())


@pytest.mark.parametrize("action", ["escalate", "stop"])
def test_the_guard_acts_on_a_tier_whose_agreement_with_the_last_tier_falls(tmp_path, action):
    """A cheap judge that misreads every battle (sure of itself, the same in both orders) decides
    them all; the audit shows it disagrees with the strong judge. ``escalate``: the round is judged
    again without it and it stays off; ``stop``: the run stops as the judge guard does."""
    with FakeAPI("script") as cheap, FakeAPI("script") as strong:
        cheap.script, strong.script = NoisyJudge(1.0, seed=1), NoisyJudge(0.0, seed=2)
        ctx = open_run(run_config(tmp_path, action, cheap, strong, audit_share=0.5, min_audits=5,
                                  on_low_agreement=action))
        ctx.cfg.judge.cascade.tiers[1].threshold = None
        ctx.cfg.judge.cascade.tiers[1].ties = "decide"
        log_round(ctx)
        if action == "stop":
            with pytest.raises(JudgeGuardError, match=r"cascade tier 1 \(llm:cheap:arena_hard\) agrees with the "
                               r"last tier on 0\.\d\d of \d+ audited battles < judge.cascade.min_agreement 0.7"):
                judge_round(ctx, 1, 1)
            assert not ctx.store.judgments(1, "train") and list((ctx.store.root / "quarantine").rglob("*.parquet"))
            return
        judge_round(ctx, 1, 1)
        report = judge_report(ctx, 1)
        close_run(ctx)
    off = json.loads((ctx.store.root / "iter-0001" / "stages" / "judge-cascade-r1.json").read_text())["off"]
    assert [(t["tier"], t["judge"]) for t in off] == [(1, "llm:cheap:arena_hard")] and off[0]["agreement"] < 0.7
    assert len(list((ctx.store.root / "quarantine").rglob("*.parquet"))) == 4  # the first verdicts left the log
    js = ctx.store.judgments(1, "train").values()
    assert len(js) == 40 and {cascade_of(j)["tier"] for j in js} == {0, 2}
    assert all(step["tier"] != 1 for j in js for step in cascade_of(j)["trail"])  # skipped from then on
    tiers = report["cascade"]["tiers"]
    # the verifier decides the checked battles but its ties (both wrong: 10); the strong judge the rest (30)
    assert tiers["1"]["asked"] == 0 and tiers["0"]["decided"] == 10 and tiers["2"]["decided"] == 30
    audits = sum(1 for j in js if cascade_of(j)["audit"] is not None)
    assert audits and tiers["2"]["asked"] == 30 + audits == tiers["2"]["decided"] + tiers["0"]["audited"]
    assert tiers["2"]["cost_source"] == "price" and tiers["2"]["cost_usd"] == round((30 + audits) * 0.02, 6)


def test_a_run_whose_last_tier_judges_one_order_where_sure_asks_it_once_a_battle_and_counts_half_its_price(tmp_path):
    with FakeAPI("script") as cheap, FakeAPI("script") as strong:
        cheap.script, strong.script = NoisyJudge(0.25, 0.1, seed=1), NoisyJudge(0.05, seed=2)
        cfg = run_config(tmp_path, "one-order", cheap, strong, audit_share=0.3)
        cfg.judge.cascade.tiers[2].second_order = "when_unsure"  # no threshold: one order
        ctx = open_run(cfg)
        log_round(ctx)
        judge_round(ctx, 1, 1)
        report = judge_report(ctx, 1)
        close_run(ctx)
        asked = len(strong.requests)
    tiers = report["cascade"]["tiers"]
    assert asked == tiers["2"]["asked"] >= 20  # the open questions at least, and the audits: one call each
    assert tiers["2"]["cost_source"] == "price" and tiers["2"]["cost_usd"] == round(asked * 0.02 / 2, 6)
    js = ctx.store.judgments(1, "train").values()
    assert all(j.flip is None for j in js if cascade_of(j)["tier"] == 2)


def test_the_reports_show_each_tier_in_summary_json_flywheel_elo_and_the_report_page(tmp_path):
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    with FakeAPI("script") as cheap, FakeAPI("script") as strong:
        cheap.script, strong.script = NoisyJudge(0.25, 0.1, seed=1), NoisyJudge(0.05, seed=2)
        ctx = open_run(run_config(tmp_path, "reports", cheap, strong, audit_share=0.3))
        log_round(ctx)
        judge_round(ctx, 1, 1)
        report = judge_report(ctx, 1)
        close_run(ctx)
    tiers, total = report["cascade"]["tiers"], report["cascade"]["total"]
    assert [t["judge"] for t in tiers.values()] == ["verifier", "llm:cheap:arena_hard", "llm:strong:arena_hard"]
    assert sum(t["decided"] for t in tiers.values()) == total["judged"] == 40
    assert tiers["0"]["escalated_share"] == 0.75  # the open questions (20), and the verifier's ties (10)
    assert total["cost_usd"] == round(sum(t["cost_usd"] for t in tiers.values()), 6)
    assert total["per_decisive_usd"] == round(total["cost_usd"] / total["decisive"], 6)
    for t in list(tiers.values())[:2]:
        if t["audited"]:
            assert list(t["agreement_ci"]) == list(wilson(t["agree"], t["audited"]))
    (ctx.store.root / "summary.json").write_text(json.dumps({"iterations": [{"iteration": 1, "judge": report}]}))
    out = CliRunner().invoke(app, ["elo", str(ctx.store.root), "--judge"])
    assert out.exit_code == 0, out.output
    assert "[section: cascade]" in out.stdout and "llm:cheap:arena_hard" in out.stdout and "per_decisive_usd" in out.stdout
    data = json.loads(CliRunner().invoke(app, ["elo", str(ctx.store.root), "--judge", "--format", "json"]).stdout)
    assert [r["tier"] for r in data["cascade"]] == [0, 1, 2, "all"]
    page = tmp_path / "page.html"
    out = CliRunner().invoke(app, ["report", str(ctx.store.root), "--html", str(page)])
    assert out.exit_code == 0, out.output
    html = page.read_text()
    assert "<h3>Cascade</h3>" in html and "llm:strong:arena_hard" in html and "escalated_share" in html


def test_thresholds_chosen_on_a_validation_split_reach_the_target_at_the_least_cost():
    prompts = build_suite(5, 10, 0)[0][:60]
    battles = [battle(f"v{i}", p.text, p.reference, p.reference + "1") if i % 2 else
               battle(f"v{i}", p.text, p.reference + "1", p.reference) for i, p in enumerate(prompts)]
    with FakeAPI("script") as cheap, FakeAPI("script") as strong:
        cheap.script, strong.script = NoisyJudge(0.3, seed=1), NoisyJudge(0.0, seed=2)
        tiers = [Tier(llm(cheap, "cheap", confidence=True), 0.001), Tier(llm(strong, "strong"), 0.02)]
        every = [t.judge.judge(battles) for t in tiers]  # the validation split, judged by every tier
    loose, strict = (choose_thresholds(battles, every, tiers, target) for target in (0.5, 0.9))
    assert loose.agreement >= 0.5 and strict.agreement >= 0.9
    assert loose.cost_per_battle < strict.cost_per_battle <= 0.021
    assert strict.thresholds[0] is not None  # confidence sorts the cheap judge's mistakes from its verdicts


def bad_tiers(**change) -> list[dict]:
    tiers = [{"kind": "verifier"},
             {"kind": "llm", "price": 0.001, "threshold": 0.8, "player": {"name": "cheap", "kind": "openai",
                                                                          "model": "c", "base_urls": ["http://127.0.0.1:9/v1"]}},
             {"kind": "llm", "price": 0.02, "player": {"name": "strong", "kind": "openai", "model": "s",
                                                       "base_urls": ["http://127.0.0.1:9/v1"]}}]
    for dotted, value in change.items():
        i, key = dotted.split("__")
        if value is None:
            tiers[int(i)].pop(key)
        else:
            tiers[int(i)][key] = value
    return tiers


BAD = [
    (bad_tiers()[:1], "error: invalid config: judge: kind cascade needs two or more tiers (judge.cascade.tiers has 1)"),
    (bad_tiers(**{"1__price": None}), ("error: invalid config: judge.cascade.tiers.1: price: llm tiers need one (USD "
                                       "per battle the tier judges, both orders)")),
    (bad_tiers(**{"1__threshold": 1.5}), ("error: invalid config: judge.cascade.tiers.1.threshold: Input should be "
                                          "less than or equal to 1")),
    (bad_tiers(**{"2__price": 0.0005}), ("error: invalid config: judge.cascade: tiers.2: the last tier decides what "
                                         "the others are unsure of, so it must be the strongest by price; its price "
                                         "0.0005 is not above tiers.1's 0.001")),
    (bad_tiers(**{"2__threshold": 0.9}), ("error: invalid config: judge.cascade: tiers.2.threshold: the last tier has "
                                          "no tier to pass a battle to (with second_order: when_unsure it says when to "
                                          "ask the second order)")),
    (bad_tiers(**{"1__second_order": "when_unsure"}), ("error: invalid config: judge.cascade: tiers.1.second_order: "
                                                       "when_unsure is for the last tier (an earlier tier judges both "
                                                       "orders to see its own position bias, and passes on what it is "
                                                       "unsure of)")),
    (bad_tiers(**{"0__second_order": "when_unsure"}), ("error: invalid config: judge.cascade.tiers.0: second_order: "
                                                       "a verifier tier does not judge in two orders (only llm tiers "
                                                       "do)")),
]


@pytest.mark.parametrize("tiers, line", BAD, ids=["one tier", "no price", "threshold over 1", "last not dearest",
                                                 "last tier's threshold", "an earlier tier's second order",
                                                 "verifier's second order"])
def test_a_bad_cascade_is_one_error_line_exit_2_and_no_run_directory(tmp_path, tiers, line):
    from typer.testing import CliRunner

    from flywheel.face.cli import app

    recipe, root = tmp_path / "cascade.yaml", tmp_path / "runs"
    recipe.write_text(yaml.safe_dump({"judge": {"kind": "cascade", "cascade": {"tiers": tiers}}}))
    for command in ("check", "run"):
        out = CliRunner().invoke(app, [command, str(recipe), "--set", f"run.root={root}"])
        assert out.exit_code == 2 and out.stderr.strip() == line, out.output
        assert "Traceback" not in out.output and not root.exists()


def test_a_last_tier_may_judge_one_order_when_sure_but_not_where_every_battle_is_judged_in_one_order():
    tiers = bad_tiers(**{"2__second_order": "when_unsure", "2__threshold": 0.9})
    cfg = FlywheelConfig.model_validate({"judge": {"kind": "cascade", "cascade": {"tiers": tiers}}})
    assert cfg.judge.cascade.tiers[2].second_order == "when_unsure" and cfg.judge.cascade.tiers[2].threshold == 0.9
    with pytest.raises(ValueError, match="cascade.tiers.2.second_order: when_unsure needs judge.both_orders"):
        FlywheelConfig.model_validate({"judge": {"kind": "cascade", "both_orders": False, "cascade": {"tiers": tiers}}})
