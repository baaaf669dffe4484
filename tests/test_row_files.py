"""The one reader of a user's row files (flywheel/ground/row_files.py): every format gives the same
rows, every row is named ``file:line`` (``file:row N`` in Parquet), and a file that cannot be read
is one error naming it."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flywheel.ground.row_files import BadRow, Row, RowFileError, read_row_file

RECORDS = [{"prompt": "one", "category": "a"}, {"prompt": "two, with a comma", "category": "b"},
           {"prompt": 'three "quoted"', "category": "c"}]


def write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def same_records_in_every_format(folder):
    """The records on lines 2-4 of every text file (a header, a blank line or ``[`` on line 1)."""
    def delimited(sep):
        quote = lambda v: '"' + v.replace('"', '""') + '"' if any(c in v for c in f'{sep}"') else v  # noqa: E731
        return "prompt" + sep + "category\n" + "".join(sep.join(quote(r[k]) for k in ("prompt", "category")) + "\n"
                                                       for r in RECORDS)
    files = [write(folder / "p.jsonl", "\n" + "".join(json.dumps(r) + "\n" for r in RECORDS)),
             write(folder / "p.ndjson", "\n" + "".join(json.dumps(r) + "\n" for r in RECORDS)),
             write(folder / "p.json", "[\n" + ",\n".join(json.dumps(r) for r in RECORDS) + "\n]\n"),
             write(folder / "p.csv", delimited(",")), write(folder / "p.tsv", delimited("\t"))]
    for name in ("p.parquet", "p.pq"):
        pq.write_table(pa.Table.from_pylist(RECORDS), folder / name)
        files.append(folder / name)
    return files


def test_every_format_gives_the_same_rows_named_the_same_way(tmp_path):
    for path in same_records_in_every_format(tmp_path):
        got = read_row_file(path)
        assert all(isinstance(r, Row) for r in got.rows), path.name
        assert [r.value for r in got.rows] == RECORDS, path.name
        places = ["row 1", "row 2", "row 3"] if path.suffix in (".parquet", ".pq") else ["2", "3", "4"]
        assert [r.where for r in got.rows] == [f"{path.name}:{p}" for p in places]
        assert got.columns == (None if got.format in ("json", "jsonl") else ("prompt", "category")), path.name


def test_a_record_over_several_lines_is_named_by_the_line_it_starts_on(tmp_path):
    js = write(tmp_path / "p.json",
               '[{"prompt": "one"},\n  {\n    "prompt":\n      "two"\n  },\n\n  {"prompt": "three"}]')
    assert [r.where for r in read_row_file(js).rows] == ["p.json:1", "p.json:2", "p.json:7"]
    csv = write(tmp_path / "p.csv", 'prompt,n\n"two\nlines",1\n\nnext,2\n')
    got = read_row_file(csv).rows
    assert [(r.where, r.value) for r in got] == [("p.csv:2", {"prompt": "two\nlines", "n": "1"}),
                                                 ("p.csv:5", {"prompt": "next", "n": "2"})]


def test_a_bad_line_or_row_in_each_text_format_is_named_by_its_location(tmp_path):
    jsonl = write(tmp_path / "b.jsonl", '{"prompt": "one"}\n{not json\n\n{"prompt": "three"}\n')
    got = read_row_file(jsonl).rows
    assert [type(r) for r in got] == [Row, BadRow, Row] and got[1].where == "b.jsonl:2"
    assert str(got[1]).startswith("b.jsonl:2: not JSON (") and got[2].where == "b.jsonl:4"
    # a broken JSON array cannot be read past the break: the break is the last row, at its line
    js = write(tmp_path / "b.json", '[\n {"prompt": "one"},\n {"prompt" "two"},\n {"prompt": "three"}\n]\n')
    got = read_row_file(js).rows
    assert [type(r) for r in got] == [Row, BadRow] and got[1].where == "b.json:3" and got[1].last
    assert "not JSON" in got[1].reason and got[1].reason.endswith("the file is read no further")
    unclosed = write(tmp_path / "c.json", '[\n {"prompt": "one"},\n {"prompt": "two"}\n')
    assert str(read_row_file(unclosed).rows[-1]).startswith("c.json:4: not JSON (the array is not closed")
    trailing = write(tmp_path / "d.json", '[{"prompt": "one"},\n]')
    assert read_row_file(trailing).rows[-1].where == "d.json:2"
    # CSV and TSV: more fields than the header is a bad row (reading goes on); a quote left open
    # would swallow the rest of the file, so it is the last row, at the line it opens on
    for name, sep in (("b.csv", ","), ("b.tsv", "\t")):
        text = f'prompt{sep}n\none{sep}1\ntwo{sep}2{sep}extra\nthree{sep}3\n"open{sep}4\nfour{sep}5\n'
        got = read_row_file(write(tmp_path / name, text)).rows
        assert [str(r) for r in got if isinstance(r, BadRow)] == [
            f"{name}:3: 3 fields, the header has 2",
            f"{name}:5: not {name[-3:].upper()} (unexpected end of data); the file is read no further"]
        assert [r.value["prompt"] for r in got if isinstance(r, Row)] == ["one", "three"]
        assert [r.last for r in got if isinstance(r, BadRow)] == [False, True]
    short = read_row_file(write(tmp_path / "s.csv", "prompt,n\nalone\n")).rows
    assert short == [Row("s.csv:2", {"prompt": "alone", "n": None})]  # fewer fields: the rest are None


@pytest.mark.parametrize("name", ["x.jsonl", "x.json", "x.csv", "x.tsv"])
def test_a_file_that_is_not_utf8_is_one_error_naming_it(tmp_path, name):
    path = write(tmp_path / name, b'[\n{"prompt": "caf\xe9"}\n]\n' if name.endswith(".json")
                 else b"prompt\nfine\ncaf\xe9\n")
    with pytest.raises(RowFileError) as e:
        read_row_file(path)
    assert str(e.value) == (f"{path}: cannot be read as {name.split('.')[1]}: not UTF-8 text (byte 0xe9 on "
                            f"line {2 if name.endswith('.json') else 3}); save it as UTF-8")


def test_a_byte_order_mark_reads_as_without(tmp_path):
    for path in same_records_in_every_format(tmp_path):
        if path.suffix in (".parquet", ".pq"):
            continue
        plain = read_row_file(path)
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
        assert read_row_file(path).rows == plain.rows and read_row_file(path).columns == plain.columns, path.name


def test_files_that_cannot_be_read_as_rows_are_one_error_naming_them(tmp_path):
    cases = [(write(tmp_path / "x.parquet", b"PAR1 not parquet"), "cannot be read as parquet"),
             (write(tmp_path / "x.json", '{"prompt": "one"}'), "must hold one JSON array of records"),
             (write(tmp_path / "empty.json", ""), "must hold one JSON array of records"),
             (write(tmp_path / "x.txt", "prompt\n"), "unknown format '.txt'"),
             (tmp_path / "missing.jsonl", "no such file")]
    for path, why in cases:
        with pytest.raises(RowFileError) as e:
            read_row_file(path)
        assert str(e.value).startswith(f"{path}: ") and why in str(e.value) and "\n" not in str(e.value)


def test_limit_reads_the_first_rows_only(tmp_path):
    for path in same_records_in_every_format(tmp_path):
        assert [r.value for r in read_row_file(path, limit=2).rows] == RECORDS[:2], path.name
        assert read_row_file(path, limit=0).rows == []


def test_the_three_callers_name_a_bad_line_the_same_way(tmp_path):
    from flywheel.face.battlelog import BattleLogError, read_battles
    from flywheel.face.dataview import read_rows
    from flywheel.worlds.prompts import ingest

    path = write(tmp_path / "mixed.jsonl", '{"prompt": "p", "model_a": "a", "model_b": "b", "winner": "tie"}\n{oops\n')
    assert [where for where, _ in ingest(path).bad] == ["mixed.jsonl:2"]
    assert [b.where for b in read_battles(path)[1]] == ["mixed.jsonl:2"]
    with pytest.raises(ValueError, match=r"^mixed\.jsonl:2: not JSON"):
        read_rows(path)
    # a break the rest cannot be read past: a prompt pool lists it; a battle log fails whole
    broken = write(tmp_path / "broken.csv", 'prompt,model_a,model_b,winner\np,a,b,tie\n"open,a,b,tie\n')
    assert ingest(broken).bad == [("broken.csv:3", "not CSV (unexpected end of data); the file is read no further")]
    with pytest.raises(BattleLogError, match=r"broken\.csv: broken\.csv:3: not CSV"):
        read_battles(broken)
