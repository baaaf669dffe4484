"""Human votes (flywheel/worlds/votes.py): `flywheel data ingest` keeps a Chatbot Arena log's votes
beside its prompts, and `flywheel judge-agreement` measures a judge's agreement with them (judges/
agreement.py). The judges are LLM judges behind OpenAI-compatible endpoints on 127.0.0.1, reached
through the openai SDK; their verdicts are scripted from the answers' texts, so every figure is known
in advance. Bad input is one error line, exit 2, and nothing written."""

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

from flywheel.face.cli import app
from flywheel.maths.proportions import wilson
from tests.fakeapi import FakeAPI, fenced_blocks


def quality(prompt: str, seat: str) -> bool:
    """Whether seat's (last) answer in a judge prompt is a good one (its text starts with 'good')."""
    blocks = fenced_blocks(prompt)
    text = blocks.get(f"ANSWER {seat}")
    if text is None:  # the multi-turn template: each assistant turn in its own block
        text = re.findall(rf"^###-\w+ ASSISTANT {seat} TURN \d+\n(.*?)\n###-", prompt, re.DOTALL | re.MULTILINE)[-1]
    return text.startswith("good")


def fair(prompt: str) -> str:
    """The good answer wins; two good or two poor answers tie."""
    a, b = quality(prompt, "A"), quality(prompt, "B")
    return "[[A>B]]" if a and not b else "[[B>A]]" if b and not a else "[[A=B]]"


def lazy(prompt: str) -> str:
    """The cheap tier: fair, but it calls every writing battle a tie (which the cascade escalates)."""
    return "[[A=B]]" if "[writing]" in prompt else fair(prompt)


# (question id, category, human winner, A's answer good?, B's answer good?); q1 and q3 ask the same question
VOTES = [("q1", "coding", "model_a", True, False), ("q2", "coding", "model_b", False, True),
         ("q1", "coding", "model_a", True, False), ("q4", "coding", "model_b", False, True),
         ("q5", "coding", "model_b", True, False),  # the judge disagrees
         ("q6", "coding", "tie", True, True),  # the judge ties too
         ("q7", "coding", "tie (bothbad)", True, False),  # the judge picks a side on a human tie
         ("w1", "writing", "model_a", True, False), ("w2", "writing", "model_b", False, True),
         ("w3", "writing", "model_a", True, True),  # the judge ties on a decisive vote
         ("w4", "writing", "model_a", False, True),  # the judge disagrees
         ("FAIL", "writing", "model_a", True, False),  # the judge's calls fail: no verdict
         ("m1", None, "model_b", False, True)]  # two user turns, no category


def row(qid, category, winner, a_good, b_good) -> dict:
    question = f"[{category}] question {qid}"
    turns = [question, "and then?"] if qid.startswith("m") else [question]

    def conversation(good, side):
        out = []
        for i, t in enumerate(turns):
            last = i == len(turns) - 1
            out += [{"role": "user", "content": t},
                    {"role": "assistant", "content": f"{'good' if good or not last else 'poor'} answer {i} by {side}"}]
        return out

    out = {"question_id": qid, "model_a": f"alpha-{qid}", "model_b": "beta", "winner": winner,
           "conversation_a": conversation(a_good, "a"), "conversation_b": conversation(b_good, "b"),
           "turn": len(turns), "language": "English"}
    return out | ({"category": category} if category else {})


def write_log(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def api(server, name) -> dict:
    return {"name": name, "kind": "openai", "model": f"{name}-1", "base_urls": [server.url], "max_retries": 0,
            "backoff_s": 0.01, "max_new_tokens": 32, "max_concurrency": 8}


def recipe(tmp_path, judge: dict) -> str:
    path = tmp_path / "judge.yaml"
    path.write_text(yaml.safe_dump({"judge": judge, "run": {"cache_dir": str(tmp_path / "cache")}}))
    return str(path)


def agreement(*args) -> tuple[dict, str]:
    out = CliRunner().invoke(app, ["judge-agreement", *args, "--format", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout), out.stderr


def figures(report: dict) -> dict:
    """group -> (votes, invalid, decisive, agree, judge_ties, ties, tie_agreement)."""
    keys = ("votes", "invalid", "decisive", "agree", "judge_ties", "ties", "tie_agreement")
    out = {"all": tuple(report["overall"][k] for k in keys)}
    out |= {r["category"]: tuple(r[k] for k in keys) for r in report["by_category"]}
    return out | {f"tier {r['tier']}": tuple(r[k] for k in keys) for r in report["by_tier"]}


WANT = {"all": (13, 1, 10, 7, 1, 2, 0.5), "coding": (7, 0, 5, 4, 0, 2, 0.5), "writing": (5, 1, 4, 2, 1, 0, None),
        "(none)": (1, 0, 1, 1, 0, 0, None)}


def test_an_llm_judge_agrees_with_the_human_votes_as_scripted_overall_and_per_category(tmp_path):
    log = write_log(tmp_path / "arena.jsonl", [row(*v) for v in VOTES])
    with FakeAPI("script") as server:
        server.script, server.fail_when = fair, lambda text: "question FAIL" in text
        report, err = agreement(log, "--config", recipe(tmp_path, {"kind": "llm", "player": api(server, "judge")}))
        asked = len(server.requests)
    assert figures(report) == WANT
    overall = report["overall"]
    assert overall["agreement"] == 0.7 and (overall["low"], overall["high"]) == tuple(round(x, 4) for x in wilson(7, 10))
    assert overall["tie_share"] == round(2 / 12, 4) and report["by_category"][1]["agreement"] == 0.8  # coding
    assert report["judge"] == "llm:judge:arena_hard" and report["by_tier"] == [] and report["votes"] == 13
    assert asked == 2 * 13  # both orders of every vote, once
    assert "warning: 1 of 13 votes got no verdict (first: judge call failed" in err
    assert (tmp_path / "cache" / "judgments.sqlite").is_file()  # run.cache_dir: judged once, kept


def test_a_cascade_reports_each_tier_on_the_votes_it_decided(tmp_path):
    log = write_log(tmp_path / "arena.jsonl", [row(*v) for v in VOTES])
    with FakeAPI("script") as cheap, FakeAPI("script") as strong:
        cheap.script, strong.script = lazy, fair
        cheap.fail_when = strong.fail_when = lambda text: "question FAIL" in text
        tiers = [{"kind": "llm", "price": 0.001, "player": api(cheap, "cheap")},
                 {"kind": "llm", "price": 0.01, "player": api(strong, "strong")}]
        judge = {"kind": "cascade", "cascade": {"tiers": tiers, "audit_share": 0.0}}
        report, _ = agreement(log, "--config", recipe(tmp_path, judge))
        out = CliRunner().invoke(app, ["judge-agreement", log, "--config", recipe(tmp_path, judge)])
    assert {k: v for k, v in figures(report).items() if not k.startswith("tier")} == WANT
    # the cheap tier decides the coding and uncategorised votes but the tie (q6); the strong one the rest
    assert figures(report)["tier 0"] == (7, 0, 6, 5, 0, 1, 0.0)
    assert figures(report)["tier 1"] == (6, 1, 4, 2, 1, 1, 1.0)
    assert [r["judge"] for r in report["by_tier"]] == ["llm:cheap:arena_hard", "llm:strong:arena_hard"]
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == "cascade:llm:cheap:arena_hard>llm:strong:arena_hard against 13 human votes of " + log
    assert any(line.startswith("tier 1 llm:strong:arena_hard ") and " 0.500 " in line for line in lines)
    assert any(line.startswith("category coding ") and " 0.800 " in line for line in lines)


def test_a_seeded_sample_judges_only_its_votes_and_the_same_seed_the_same_ones(tmp_path):
    log = write_log(tmp_path / "arena.jsonl", [row(*v) for v in VOTES if v[0] != "FAIL"])
    with FakeAPI("script") as server:
        server.script = fair
        config = recipe(tmp_path, {"kind": "llm", "player": api(server, "judge"), "cache": False})
        first, _ = agreement(log, "--config", config, "--limit", "5", "--seed", "3")
        assert len(server.requests) == 2 * 5
        again, _ = agreement(log, "--config", config, "--limit", "5", "--seed", "3")
        other, _ = agreement(log, "--config", config, "--limit", "5", "--seed", "4")
        whole, _ = agreement(log, "--config", config, "--limit", "50")
    assert first == again and (first["votes"], first["log_votes"], first["sample_seed"]) == (5, 12, 3)
    assert sum(r["votes"] for r in first["by_category"]) == 5 and first["by_category"] != other["by_category"]
    assert (whole["votes"], whole["sample_seed"], whole["overall"]["agree"]) == (12, None, 7)


def test_ingest_keeps_every_vote_beside_the_prompts_and_judge_agreement_reads_them(tmp_path):
    log = write_log(tmp_path / "arena.jsonl", [row(*v) for v in VOTES])
    pool = tmp_path / "pool.jsonl"
    out = CliRunner().invoke(app, ["data", "ingest", log, "--out", str(pool)])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.splitlines()[0])["prompts"] == 12 and "wrote 13 human votes" in out.stdout
    kept = [json.loads(x) for x in (tmp_path / "pool.votes.jsonl").read_text().splitlines()]
    assert len(kept) == 13  # q1 asked twice: one prompt, two votes
    assert [(k["question_id"], k["winner"], k.get("category")) for k in kept] == [(v[0], v[2], v[1]) for v in VOTES]
    assert kept[-1]["conversation_b"] == row(*VOTES[-1])["conversation_b"] and kept[0]["source"] == "arena.jsonl:1"
    assert json.loads(pool.read_text().splitlines()[0])["prompt"] == "[coding] question q1"
    with FakeAPI("script") as server:
        server.script, server.fail_when = fair, lambda text: "question FAIL" in text
        report, _ = agreement(str(tmp_path / "pool.votes.jsonl"), "--config",
                              recipe(tmp_path, {"kind": "llm", "player": api(server, "judge")}))
    assert figures(report) == WANT


def test_a_bad_vote_in_a_log_ingested_is_named_by_line_and_nothing_is_written(tmp_path):
    log = write_log(tmp_path / "arena.jsonl", [row(*VOTES[0]), row(*VOTES[1]) | {"winner": "A"}])
    out = CliRunner().invoke(app, ["data", "ingest", log, "--out", str(tmp_path / "pool.jsonl")])
    assert out.exit_code == 2 and "arena.jsonl:2: winner 'A' is not one of" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arena.jsonl"]


GOOD_JUDGE = {"kind": "llm", "player": {"name": "judge", "kind": "openai", "model": "j",
                                        "base_urls": ["http://127.0.0.1:9/v1"]}}
BAD = [
    ("no winner", [{k: v for k, v in row(*v).items() if k != "winner"} for v in VOTES[:3]], GOOD_JUDGE,
     (r"error: \S+arena\.jsonl: no row has a winner field: no human votes to agree with \(needs model_a, model_b, "
      r"winner, conversation_a and conversation_b \(Chatbot Arena's layout\)\)")),
    ("bad winner", [row(*VOTES[0]), row(*VOTES[1]), row(*VOTES[2]) | {"winner": "A"}], GOOD_JUDGE,
     (r"error: arena\.jsonl:3: winner 'A' is not one of model_a, model_b, tie, tie \(bothbad\) \(--skip-bad skips "
      r"bad rows; nothing was judged\)")),
    ("not JSON", [row(*VOTES[0]), "{broken"], GOOD_JUDGE, r"error: arena\.jsonl:2: not JSON .*"),
    ("other questions", [row(*VOTES[0]) | {"conversation_b": row(*VOTES[1])["conversation_b"]}], GOOD_JUDGE,
     r"error: arena\.jsonl:1: conversation_a and conversation_b ask different user turns \(--skip-bad .*\)"),
    ("no answer", [row(*VOTES[0]) | {"conversation_a": [{"role": "user", "content": "hi"}]}], GOOD_JUDGE,
     r"error: arena\.jsonl:1: conversation_a ends with a user turn: no answer to judge .*"),
    ("llm without player", [row(*VOTES[0])], {"kind": "llm"},
     r"error: invalid config: judge: kind llm needs a judge player \(judge\.player\)"),
    ("verifier", [row(*VOTES[0])], {"kind": "verifier"},
     r"error: judge\.kind verifier: it checks answers against a reference, and human votes have none; configure .*"),
    ("bad url", [row(*VOTES[0])], {"kind": "llm", "player": GOOD_JUDGE["player"] | {"base_urls": ["nowhere"]}},
     r"error: judge\.player \(judge\): base_urls\.0 'nowhere' is not an http\(s\) URL with a host .*"),
    ("cascade of one", [row(*VOTES[0])], {"kind": "cascade", "cascade": {"tiers": [{"kind": "llm", "price": 0.1,
                                                                                     "player": GOOD_JUDGE["player"]}]}},
     r"error: invalid config: judge: kind cascade needs two or more tiers \(judge\.cascade\.tiers has 1\)"),
]


@pytest.mark.parametrize("rows, judge, line", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_error_line_exit_2_and_nothing_written(tmp_path, rows, judge, line):
    log = write_log(tmp_path / "arena.jsonl", rows)
    config = recipe(tmp_path, judge)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = CliRunner().invoke(app, ["judge-agreement", log, "--config", config])
    assert out.exit_code == 2 and re.fullmatch(line, out.stderr.strip()), out.output
    assert "Traceback" not in out.output and out.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no cache, no output file


def test_skip_bad_judges_the_good_votes_and_says_how_many_it_skipped(tmp_path):
    log = write_log(tmp_path / "arena.jsonl", [row(*v) for v in VOTES[:2]] + ['{"winner": "model_a"}'])
    with FakeAPI("script") as server:
        server.script = fair
        report, err = agreement(log, "--skip-bad", "--config",
                                recipe(tmp_path, {"kind": "llm", "player": api(server, "judge")}))
    assert "skipped 1 bad row(s) of 3" in err and report["overall"]["agree"] == 2 == report["votes"]
