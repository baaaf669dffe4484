"""User prompt pools in the common layouts, with categories, dedup, and bad rows named by line."""

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flywheel.config.tree import FlywheelConfig
from flywheel.worlds.prompts import ingest
from flywheel.worlds.world import prompt_pools, world_pools
from tests.conftest import flywheel_cli


def jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_every_layout_reads_its_first_user_turn(tmp_path):
    alpaca = jsonl(tmp_path / "alpaca.jsonl", [{"instruction": "Add", "input": "2 and 3", "output": "5"},
                                               {"instruction": "Say hi", "input": "", "output": "hi"}])
    assert [p.text for p in ingest(alpaca).prompts] == ["Add\n\n2 and 3", "Say hi"]
    share = jsonl(tmp_path / "share.jsonl", [{"conversations": [{"from": "system", "value": "be nice"},
                                                                {"from": "human", "value": "Why?"},
                                                                {"from": "gpt", "value": "Because."}]},
                                             {"messages": [{"role": "user", "content": "How?"}]}])
    assert [p.text for p in ingest(share, "sharegpt").prompts] == ["Why?", "How?"]
    arena = jsonl(tmp_path / "question.jsonl", [{"question_id": "q1", "category": "coding", "cluster": "x",
                                                 "turns": [{"content": "Write a sort."}]}])
    got = ingest(arena).prompts
    assert [(p.text, p.category, p.level, p.split) for p in got] == [("Write a sort.", "coding", 1, "train")]
    plain = tmp_path / "plain.csv"
    with plain.open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["prompt", "category", "reference"])
        w.writeheader()
        w.writerows([{"prompt": "2+2=", "category": "math", "reference": "4"}, {"prompt": "Tell a joke", "category": "", "reference": ""}])
    got = ingest(plain, category="chat").prompts
    assert [(p.text, p.category, p.reference) for p in got] == [("2+2=", "math", "4"), ("Tell a joke", "chat", None)]
    pq.write_table(pa.Table.from_pylist([{"text": "Parquet prompt", "level": 2}]), tmp_path / "p.parquet")
    assert [(p.text, p.level) for p in ingest(tmp_path / "p.parquet").prompts] == [("Parquet prompt", 2)]


def test_bad_rows_are_named_by_line_and_duplicates_dropped(tmp_path):
    path = jsonl(tmp_path / "mixed.jsonl", [
        {"prompt": "one"},
        "{not json",
        {"conversations": [{"from": "gpt", "value": "no human turn"}]},
        "",
        {"prompt": "  one "},           # a duplicate of line 1 (whitespace aside)
        {"prompt": ""},
        [1, 2],
        {"prompt": "two", "level": "x"},
        {"prompt": "three"},
        {"instruction": 5},
    ])
    got = ingest(path)
    assert [p.text for p in got.prompts] == ["one", "three"] and got.duplicates == 1
    assert [w for w, _ in got.bad] == ["mixed.jsonl:2", "mixed.jsonl:3", "mixed.jsonl:6", "mixed.jsonl:7", "mixed.jsonl:8",
                                     "mixed.jsonl:10"]
    assert "not JSON" in got.bad[0][1] and "no human" in got.bad[1][1] and "empty" in got.bad[2][1]
    assert got.bad[-1][1] == "'instruction' is int, not text"
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("prompt,category\nok,a\n,b\nfine,c\n")
    assert [w for w, _ in ingest(bad_csv).bad] == ["bad.csv:3"]
    # an unquoted comma gives a row more fields than the header; a quote left open would swallow
    # the rest of the file into one prompt: both are named by line
    messy = tmp_path / "messy.csv"
    messy.write_text('prompt,category\nhello,chat\nhello, world,chat\n"multi\nline",x\n"open,chat\nmore,x\n')
    got = ingest(messy)
    assert [p.text for p in got.prompts] == ["hello", "multi\nline"]
    assert got.bad == [("messy.csv:3", "3 fields, the header has 2"),
                       ("messy.csv:6", "not CSV (unexpected end of data); the file is read no further")]
    with pytest.raises(ValueError, match="unknown layout"):
        ingest(path, "xml")


def test_pool_files_saved_with_a_byte_order_mark_read_as_without(tmp_path):
    """Excel's "CSV UTF-8" and some Windows tools start a file with a UTF-8 byte order mark."""
    bom = b"\xef\xbb\xbf"
    (tmp_path / "p.csv").write_bytes(bom + b"prompt,category\nhello,chat\n")
    (tmp_path / "p.jsonl").write_bytes(bom + b'{"prompt": "hello", "category": "chat"}\n')
    (tmp_path / "p.json").write_bytes(bom + b'[{"prompt": "hello", "category": "chat"}]')
    for name in ("p.csv", "p.jsonl", "p.json"):
        got = ingest(tmp_path / name)
        assert not got.bad and [(p.text, p.category) for p in got.prompts] == [("hello", "chat")], name


def test_pools_join_the_train_pool_without_eval_prompts(tmp_path):
    cfg = FlywheelConfig()
    train, evals, validation = prompt_pools(cfg.world.tasks)
    pool = jsonl(tmp_path / "pool.jsonl", [{"prompt": evals[0].text}, {"prompt": train[0].text},
                                           {"prompt": validation[0].text},
                                           {"prompt": "Explain arena learning", "category": "writing"}])
    cfg = FlywheelConfig.model_validate({"world": {"prompt_pools": [{"path": str(pool)}]}})
    got_train, got_eval, got_validation = world_pools(cfg.world)
    assert got_eval == evals and got_validation == validation
    assert len(got_train) == len(train) + 1  # the eval and repeated prompts are dropped
    assert got_train[-1].text == "Explain arena learning" and got_train[-1].category == "writing"
    jsonl(pool, [{"prompt": "fine"}, "{broken"])
    with pytest.raises(ValueError, match=r"pool.jsonl:2"):
        world_pools(cfg.world)
    cfg.world.prompt_pools[0].skip_bad = True
    assert world_pools(cfg.world)[0][-1].text == "fine"


def test_leave_out_with_a_pool_names_categories_of_its_train_prompts_and_leaves_some(tmp_path):
    """`flywheel check` reads the pool for train.rl.leave_out: a pool's own category may be left
    out, a misspelt one is refused, and so is a list that leaves no category."""
    from flywheel.config.world_settings import CATEGORIES
    from flywheel.face.checks import leave_out_problems, problems

    pool = jsonl(tmp_path / "pool.jsonl", [{"prompt": "Explain arena learning", "category": "writing"}])

    def check(out: list[str]) -> list[str]:
        return leave_out_problems(FlywheelConfig.model_validate(
            {"world": {"prompt_pools": [{"path": str(pool)}]}, "train": {"rl": {"leave_out": out}}}))

    assert check(["writing", "count"]) == []
    assert check(["writng"]) == [f"train.rl.leave_out: ['writng'] are not categories of the train prompts "
                                 f"{sorted([*CATEGORIES, 'writing'])}"]
    assert "leaves out every category" in check([*CATEGORIES, "writing"])[0]
    cfg = FlywheelConfig.model_validate({"world": {"prompt_pools": [{"path": str(pool)}]},
                                         "train": {"rl": {"leave_out": ["writng"]}}})
    assert any(line.startswith("train.rl.leave_out") for line in problems(cfg))


def test_ingest_command_reports_and_writes_a_pool(tmp_path):
    a = jsonl(tmp_path / "a.jsonl", [{"instruction": "x"}, {"instruction": "y", "category": "c"}])
    b = jsonl(tmp_path / "b.jsonl", [{"prompt": "x"}, {"nope": 1}])
    cmd = ["data", "ingest", a, b, "--out", tmp_path / "pool.jsonl"]
    p = flywheel_cli(*cmd)
    assert p.returncode == 2 and "b.jsonl:2: no 'prompt'" in p.stderr and not (tmp_path / "pool.jsonl").exists()
    p = flywheel_cli(*cmd, "--skip-bad")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout.splitlines()[0])
    assert report == {"prompts": 2, "duplicates": 1, "bad_rows": 1, "categories": {"c": 1, "user": 1}, "votes": 0}
    rows = [json.loads(x) for x in (tmp_path / "pool.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == ["x", "y"]
    assert [p.text for p in ingest(tmp_path / "pool.jsonl").prompts] == ["x", "y"]  # the pool reads back


def test_empty_binary_or_truncated_prompt_files_are_one_line_and_write_nothing(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00\x01 not text")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 truncated")
    (tmp_path / "all-bad.jsonl").write_text("{broken\n")
    for name, why in (("empty.jsonl", "empty: no prompts"), ("binary.jsonl", "cannot be read as jsonl"),
                      ("broken.parquet", "cannot be read as parquet"), ("all-bad.jsonl", "no prompts in")):
        p = flywheel_cli("data", "ingest", tmp_path / name, "--skip-bad", "--out", tmp_path / "out.jsonl")
        assert p.returncode == 2 and why in p.stderr and "Traceback" not in p.stderr, (name, p.stderr)
        assert not (tmp_path / "out.jsonl").exists()
