"""One reader of JSON lines (flywheel/ground/row_files.py), with one policy: in a file the flywheel
writes, the last line, without its newline, is a write a kill cut short and is dropped; any other
line that is not JSON, and any in a user's file, is an error naming the file and the line. Appending cuts such a torn line off first, so it never ends up
inside a file."""

import json

import pytest

from flywheel.ground.atomic import DamagedFileError, append_bytes
from flywheel.ground.row_files import BadRow, Row, read_jsonl, read_row_file
from flywheel.ground.store import RunStore
from flywheel.learning.rl import RolloutLog


def test_a_torn_last_line_is_dropped_and_a_whole_last_line_kept_without_its_newline(tmp_path):
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3, "b')
    assert read_jsonl(torn) == [{"a": 1}, {"a": 2}]
    # a user's file was not cut by a kill of ours: its unfinished last line is a bad row, named
    rows = read_row_file(torn).rows
    assert [(r.where, type(r)) for r in rows] == [("torn.jsonl:1", Row), ("torn.jsonl:3", Row), ("torn.jsonl:4", BadRow)]
    whole = tmp_path / "whole.jsonl"
    whole.write_text('{"a": 1}\n{"a": 2}')  # only the newline is missing: the row is whole
    assert read_jsonl(whole) == [{"a": 1}, {"a": 2}]
    assert read_jsonl(tmp_path / "absent.jsonl") == []


def test_any_other_bad_line_names_its_file_and_line(tmp_path):
    path = tmp_path / "usage.jsonl"
    path.write_text('{"a": 1}\n{"a": 2, "b\n{"a": 3}\n')
    with pytest.raises(DamagedFileError, match=rf"^{path}:2: not JSON \("):
        read_jsonl(path)
    # a user's file: the same line is a bad row at the same place; the rows around it stand
    rows = read_row_file(path).rows
    assert [type(r) for r in rows] == [Row, BadRow, Row] and str(rows[1]).startswith("usage.jsonl:2: not JSON")
    # a bad last line that does end with its newline was written whole: it is no torn write
    path.write_text('{"a": 1}\n{"a": 2, "b\n')
    with pytest.raises(DamagedFileError, match=r"usage\.jsonl:2: "):
        read_jsonl(path)


def test_appending_after_a_kill_cuts_the_torn_line_off_first(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n{"a": 2, "b')  # a writer killed mid-row
    append_bytes(path, '{"a": 3}\n')
    assert path.read_text() == '{"a": 1}\n{"a": 3}\n' and read_jsonl(path) == [{"a": 1}, {"a": 3}]
    path.write_text('{"a": 2, "b')  # nothing but a torn row: the file counts as empty
    assert append_bytes(path, '{"a": 4}\n', only_if_empty=True)
    assert not append_bytes(path, '{"a": 5}\n', only_if_empty=True)
    assert read_jsonl(path) == [{"a": 4}]


def test_the_runs_logs_read_and_append_through_the_one_reader(tmp_path):
    """usage.jsonl and a GRPO phase's rollouts, each killed mid-row, then appended to again by the
    resumed run: the torn row is gone and every whole row reads back."""
    store = RunStore(tmp_path / "run")
    store.append_usage({"player": "p", "generated": 1})
    with open(store.root / "usage.jsonl", "a") as f:
        f.write('{"player": "p", "gener')
    store.append_usage({"player": "q", "generated": 2})
    assert [r["player"] for r in store.usage()] == ["p", "q"]
    log = RolloutLog(tmp_path / "rollouts.jsonl")
    log.append([{"step": 1, "reward": 1.0}, {"step": 2, "reward": 0.5}])
    with open(log.path, "a") as f:
        f.write(json.dumps({"step": 3, "reward": 0.0})[:9])
    assert [r["step"] for r in log.read()] == [1, 2]
    log.truncate(1)
    log.append([{"step": 2, "reward": 0.25}])
    assert log.read() == [{"step": 1, "reward": 1.0}, {"step": 2, "reward": 0.25}]
