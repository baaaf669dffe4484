"""Property tests (hypothesis) on the three readers of outside input: random rows and random
bytes never raise anything but the documented error.

- battle logs (``flywheel rate``): ``BattleLogError`` for a file that is not a battle log at
  all, else every row is either a battle or a bad row with its place;
- prompt files (``flywheel data ingest``, prompt pools): ``ValueError`` naming the file, else
  every row is a prompt, a duplicate or a bad row with its place;
- logs of human votes (``flywheel judge-agreement``): ``VoteLogError`` naming the file, else every
  row is a vote (a battle to judge) or a bad row with its place;
- judge outputs: ``parse_verdict`` returns a verdict or None, never raises.
"""

import csv
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from flywheel.face.battlelog import BattleLogError, read_battles
from flywheel.maths.ratings import OUTCOME
from flywheel.worlds.prompts import ingest
from flywheel.worlds.votes import VoteLogError, read_votes
from judges.llm import parse_verdict

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(list(OUTCOME) + ["a", "b", "model_a "]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                             max_size=3), max_leaves=6)
KEYS = ["model_a", "model_b", "winner", "category", "prompt", "text", "instruction", "input", "conversations",
        "messages", "turns", "level", "reference", "question_id", "id", "cluster"]
names = st.sampled_from(["gpt", "claude", "gpt "]) | st.text(max_size=6)
battle_rows = st.fixed_dictionaries({"model_a": names | values, "model_b": names | values,
                                     "winner": st.sampled_from(list(OUTCOME)) | values},
                                    optional={"category": values, "tstamp": values})
prompt_rows = st.fixed_dictionaries({}, optional={
    "prompt": st.text(min_size=1, max_size=12) | values, "instruction": st.text(max_size=12) | values, "input": values,
    "conversations": st.lists(st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt", "user"]) | values,
                                                     "value": st.text(max_size=8) | values}), max_size=2) | values,
    "turns": st.lists(st.fixed_dictionaries({"content": values}), max_size=2) | values,
    "level": st.integers() | st.floats() | st.sampled_from(["3", " 2", "x", "1.5"]) | values, "reference": values, "category": values, "question_id": values})
turns = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]) | values,
                                        "content": st.sampled_from(["hi", "ho"]) | values}), max_size=4)
answered = st.builds(lambda a: [{"role": "user", "content": "hi"}, {"role": "assistant", "content": a}],
                     st.sampled_from(["yes", "no", " "]))
vote_rows = st.fixed_dictionaries({"model_a": names | values, "model_b": names | values,
                                   "winner": st.sampled_from(list(OUTCOME)) | values,
                                   "conversation_a": turns | values, "conversation_b": turns | values},
                                  optional={"category": values, "question_id": values})
good_votes = st.fixed_dictionaries({"model_a": st.sampled_from(["gpt", "claude"]), "model_b": st.just("llama"),
                                    "winner": st.sampled_from(list(OUTCOME)), "conversation_a": answered,
                                    "conversation_b": answered}, optional={"category": values})
rows = st.one_of(battle_rows, prompt_rows, vote_rows, good_votes, st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), values,
                                                           max_size=6), values)


# Every example's file lives under one folder that is removed when the test process ends (hypothesis
# runs each test hundreds of times, so a folder each left behind fills /tmp run after run).
_FILES = tempfile.TemporaryDirectory(prefix="flywheel-properties-")


def _file(suffix: str, data: bytes) -> Path:
    folder = Path(tempfile.mkdtemp(dir=_FILES.name))
    path = folder / f"input{suffix}"
    path.write_bytes(data)
    return path


def _as_bytes(suffix: str, items: list) -> bytes:
    if suffix == ".jsonl":
        return "".join(json.dumps(r) + "\n" for r in items).encode()
    if suffix == ".json":
        return json.dumps(items).encode()
    out = io.StringIO()  # .csv: every row's keys as columns, values as their JSON text
    cols = sorted({k for r in items if isinstance(r, dict) for k in r}) or ["x"]
    w = csv.DictWriter(out, cols)
    w.writeheader()
    for r in items:
        w.writerow({k: json.dumps(v) for k, v in r.items()} if isinstance(r, dict) else {cols[0]: json.dumps(r)})
    return out.getvalue().encode()


@SETTINGS
@given(st.sampled_from([".jsonl", ".json", ".csv", ".parquet", ".tsv"]), st.binary(max_size=300))
@example(".json", b"")  # found by hypothesis: the error did not name the file
def test_battle_log_reader_on_random_bytes(suffix, data):
    try:
        good, bad = read_battles(_file(suffix, data))
    except BattleLogError as e:
        assert "input" in str(e)  # names the file
        return
    assert all(b.winner in OUTCOME for b in good) and all(r.where and r.reason for r in bad)


@SETTINGS
@given(st.sampled_from([".jsonl", ".json", ".csv"]), st.lists(rows, max_size=8))
@example(".jsonl", [{"model_a": "x", "model_b": "y", "winner": ["tie"]}])  # found by hypothesis: a TypeError once
def test_battle_log_reader_on_random_rows(suffix, items):
    try:
        good, bad = read_battles(_file(suffix, _as_bytes(suffix, items)))
    except BattleLogError:
        return  # not a battle log at all (a CSV header without the columns, say)
    if suffix != ".csv":  # every row is accounted for, as a battle or as a bad row with its line
        assert len(good) + len(bad) == len(items)
    for b in good:
        assert isinstance(b.model_a, str) and isinstance(b.model_b, str) and b.model_a.strip() != b.model_b.strip()
        assert b.winner in OUTCOME
    assert all(r.where.startswith("input.") for r in bad)  # file:line


text_names = st.none() | st.text(max_size=4) | st.sampled_from(["gpt", "gpt ", "\x1cgpt", " claude", "claude"])
text_rows = st.fixed_dictionaries({"model_a": text_names, "model_b": text_names,
                                   "winner": st.none() | st.sampled_from(list(OUTCOME) + ["", "tie "])},
                                  optional={"category": st.none() | st.text(max_size=3)})


@SETTINGS
@given(st.lists(text_rows, min_size=1, max_size=8))
@example([{"model_a": "gpt", "model_b": "\x1cgpt", "winner": "tie"}])  # Python's strip() rule, not arrow's
def test_parquet_read_as_columns_gives_exactly_the_row_readers_battles(items):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flywheel.face.battlelog import read_battle_columns

    path = _file(".parquet", b"")
    pq.write_table(pa.Table.from_pylist(items), path)
    good, bad = read_battles(path)
    cols, bad_too = read_battle_columns(path)
    assert bad_too == bad
    as_rows = zip(cols.model_a, cols.model_b, cols.winner, cols.category)
    assert [tuple(None if pd.isna(x) else x for x in r) for r in as_rows] == [
        (g.model_a, g.model_b, g.winner, g.category) for g in good]


@SETTINGS
@given(st.sampled_from([".jsonl", ".json", ".csv", ".parquet"]), st.binary(max_size=300),
       st.sampled_from(["auto", "alpaca", "sharegpt", "arena", "arena-hard", "plain"]))
def test_prompt_ingester_on_random_bytes(suffix, data, layout):
    path = _file(suffix, data)
    try:
        got = ingest(path, layout)
    except ValueError as e:
        assert path.name in str(e)
        return
    assert all(p.text.strip() for p in got.prompts)


@SETTINGS
@given(st.sampled_from([".jsonl", ".json", ".csv"]), st.lists(rows, min_size=1, max_size=8),
       st.sampled_from(["auto", "alpaca", "sharegpt", "arena", "arena-hard", "plain"]))
@example(".jsonl", [{"prompt": "hi", "level": float("inf")}, {"prompt": "ho", "level": 2.5}], "auto")  # OverflowError once
def test_prompt_ingester_on_random_rows(suffix, items, layout):
    path = _file(suffix, _as_bytes(suffix, items))
    try:
        got = ingest(path, layout)
    except ValueError as e:
        assert path.name in str(e)
        return
    if suffix != ".csv":
        assert len(got.prompts) + got.duplicates + len(got.bad) == len(items)
    assert all(p.text.strip() and isinstance(p.level, int) for p in got.prompts)
    assert all(where.startswith(path.name) and why for where, why in got.bad)


@SETTINGS
@given(st.sampled_from([".jsonl", ".json", ".csv"]), st.lists(rows, min_size=1, max_size=8))
@example(".json", [{"model_a": "gpt", "model_b": "llama", "winner": "tie", "conversation_a": [
    {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}], "conversation_b": json.dumps([
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "no"}])}])
def test_vote_reader_on_random_rows(suffix, items):
    path = _file(suffix, _as_bytes(suffix, items))
    try:
        votes, bad = read_votes(path)
    except VoteLogError as e:
        assert path.name in str(e)
        return
    if suffix != ".csv":
        assert len(votes) + len(bad) == len(items)
    assert all(b.where.startswith(path.name) and b.reason for b in bad)
    for v in votes:
        battle = v.battle()
        assert v.winner in OUTCOME and battle.prompt and battle.response_a and battle.response_b


verdict_bits = st.sampled_from(["[[A>B]]", "[[B>>A]]", "[[A=B]]", "[[A>A]]", "[[3, 7]]", "[[11, 2]]", "[[",
                                "]]", "[[ 9.5 , 1 ]]", "\n", "A", ">", "Verdict:", "[[B<A]]"])
texts = st.lists(st.one_of(st.text(max_size=20), verdict_bits), max_size=10).map("".join)


@SETTINGS
@given(texts, st.sampled_from(["pairwise", "scores"]), st.lists(texts, max_size=2))
def test_judge_output_parser_never_raises(text, fmt, quoted):
    v = parse_verdict(text, fmt, tuple(quoted))
    if v is not None:
        seat, strength, scores = v
        assert seat in ("A", "B", None) and strength in (0, 1, 2)
        assert (seat is None) == (strength == 0)
        if fmt == "scores":
            assert scores is not None and all(1 <= s <= 10 for s in scores)
