"""``flywheel rate`` on battle logs in every supported format."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import flywheel_cli
from tests.test_ratings import classic_mle, simulate


def run(args, ok=True):
    p = flywheel_cli(*args)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def log():
    a, b, w = simulate({"gpt-4": 1150, "claude": 1100, "llama": 950, "mistral": 900}, 4000, seed=7)
    cats = ["math" if i % 3 else "code" for i in range(len(a))]
    return pd.DataFrame({"model_a": a, "model_b": b, "winner": w, "category": cats})


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv", "parquet"])
def test_every_format_matches_the_classic_method(log, tmp_path, suffix):
    path = tmp_path / f"battles.{suffix}"
    {"jsonl": lambda: log.to_json(path, orient="records", lines=True),
     "json": lambda: log.to_json(path, orient="records", indent=1),
     "csv": lambda: log.to_csv(path, index=False),
     "parquet": lambda: log.to_parquet(path)}[suffix]()
    rows = json.loads(run(["rate", str(path), "--format", "json", "--bootstrap", "50"]).stdout)
    ref = classic_mle(log.model_a, log.model_b, log.winner)
    for r in rows:
        assert {"model", "rating", "lower", "upper", "rank", "battles", "win_rate"} <= set(r)
        assert abs(r["rating"] - ref[r["model"]]) < 0.5
        assert r["lower"] <= r["rating"] <= r["upper"]
    for fmt, marker in (("table", "rating"), ("md", "| rank |"), ("csv", "rank,model,rating")):
        assert marker in run(["rate", str(path), "--format", fmt, "--bootstrap", "10"]).stdout


def test_bad_rows_fail_with_line_numbers_unless_skipped(log, tmp_path):
    path = tmp_path / "b.jsonl"
    lines = [json.dumps(r) for r in log.head(50).to_dict("records")]
    lines.insert(3, json.dumps({"model_a": "x", "model_b": "y", "winner": "draw"}))
    lines.insert(10, "{not json")
    lines.insert(20, json.dumps({"model_a": "x", "winner": "tie"}))
    path.write_text("\n".join(lines) + "\n")
    p = run(["rate", str(path)], ok=False)
    assert p.returncode == 2
    assert "b.jsonl:4: winner 'draw'" in p.stderr and "b.jsonl:11: not JSON" in p.stderr
    assert "b.jsonl:21: missing model_b" in p.stderr and "Traceback" not in p.stderr
    p = run(["rate", str(path), "--skip-bad", "--bootstrap", "5"])
    assert "skipped 3 bad row(s)" in p.stderr and "gpt-4" in p.stdout


def test_csv_and_json_bad_rows_name_their_lines(tmp_path):
    csv_path = tmp_path / "b.csv"
    csv_path.write_text("model_a,model_b,winner\na,b,model_a\na,b,maybe\nb,a,tie\n")
    assert "b.csv:3: winner 'maybe'" in run(["rate", str(csv_path)], ok=False).stderr
    js = tmp_path / "b.json"
    js.write_text('[\n {"model_a": "a", "model_b": "b", "winner": "tie"},\n {"model_a": "a", "model_b": "a", "winner": "tie"}\n]\n')
    assert "b.json:3: a model cannot battle itself" in run(["rate", str(js)], ok=False).stderr


def test_by_category_anchor_matrix_and_reference(log, tmp_path):
    path = tmp_path / "b.parquet"
    log.to_parquet(path)
    rows = json.loads(run(["rate", str(path), "--by", "category", "--format", "json", "--bootstrap", "10"]).stdout)
    assert {r["category"] for r in rows} == {"code", "math"} and len(rows) == 8
    rows = json.loads(run(["rate", str(path), "--anchor", "llama=1200", "--format", "json", "--bootstrap", "10"]).stdout)
    assert next(r for r in rows if r["model"] == "llama")["rating"] == 1200
    mat = run(["rate", str(path), "--matrix", "--format", "json"]).stdout
    win = json.loads(mat[: mat.index("\n}\n") + 2])
    assert win["models"] == ["claude", "gpt-4", "llama", "mistral"] and win["matrix"][0][0] is None
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"gpt-4": 10, "claude": 9, "llama": 5, "mistral": 1}))
    out = json.loads(run(["rate", str(path), "--reference", str(ref), "--format", "json", "--bootstrap", "20"]).stdout)
    assert out["consistency"]["spearman"] == 1.0 and len(out["leaderboard"]) == 4
    bad = run(["rate", str(path), "--anchor", "llama"], ok=False)
    assert bad.returncode == 2 and "MODEL=RATING" in bad.stderr


def test_the_benchmark_runs_and_agrees_at_small_scale():
    p = subprocess.run([sys.executable, "-m", "benchmarks.ratings", "--battles", "5000", "--models", "6",
                        "--rounds", "4", "--threads", "1", "--seeds", "0", "--repeats", "1", "--big", "8",
                        "--big-battles", "3000", "--anchor-cap", "0"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    from_mle = float(lines[-2].split(" ours within ")[1].split()[0])
    assert from_mle < 0.02 and lines[-1].startswith("ratio: ") and "min " in lines[-2]
    assert "uniform-0" in p.stdout and "skewed-0" in p.stdout
    assert "on 1 core(s)" in p.stdout and "against the anchor's fastest run: min " in lines[-2]
    assert "8 models 3,000 uniform-0" in p.stdout and "over 0 s" in p.stdout  # the large rows, the anchor stopped


def test_unreadable_battle_logs_are_one_line_not_a_traceback(tmp_path):
    (tmp_path / "log.parquet").write_bytes(b"PAR1 this is not parquet")
    (tmp_path / "log.jsonl").write_bytes(b"\xff\xfe\x00 binary")
    (tmp_path / "log.csv").write_bytes(b"\x00\x01\x02")
    for name, why in (("log.parquet", "cannot be read as parquet"), ("log.jsonl", "cannot be read as jsonl"),
                      ("log.csv", "the header needs model_a, model_b and winner")):
        p = run(["rate", str(tmp_path / name)], ok=False)
        assert p.returncode == 2 and why in p.stderr and "Traceback" not in p.stderr, (name, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1


def test_cli_conventions_version_choices_and_incompatible_flags(tmp_path):
    """In-process (typer's runner): --version, choices listed in --help and refused otherwise with
    exit 2, and options that cannot work together refused instead of one being ignored."""
    import importlib.metadata

    from typer.testing import CliRunner

    from flywheel.face.cli import app

    cli = CliRunner()
    got = cli.invoke(app, ["--version"])
    assert got.exit_code == 0 and got.output.strip() == f"flywheel {importlib.metadata.version('flywheel')}"
    wide = {"COLUMNS": "200"}  # help is wrapped to the terminal
    assert "table|json|csv|md" in cli.invoke(app, ["rate", "--help"], env=wide).output
    assert "auto|alpaca|sharegpt|arena|arena-hard|plain" in cli.invoke(app, ["data", "ingest", "--help"], env=wide).output
    assert cli.invoke(app, ["rate", str(tmp_path / "x.jsonl"), "--format", "xml"]).exit_code == 2
    assert cli.invoke(app, ["elo", str(tmp_path), "--by", "judge"]).exit_code == 2
    both = cli.invoke(app, ["elo", str(tmp_path), "--plot", str(tmp_path / "e.png"), "--history"])
    assert both.exit_code == 2 and "--plot and --history cannot be combined" in both.output
    assert not (tmp_path / "e.png").exists()


def test_a_clean_parquet_log_is_read_by_columns_and_rates_exactly_as_jsonl(log, tmp_path):
    from flywheel.face.battlelog import read_battle_columns

    pq_path, jl_path = tmp_path / "b.parquet", tmp_path / "b.jsonl"
    log.to_parquet(pq_path)
    log.to_json(jl_path, orient="records", lines=True)
    fast, bad = read_battle_columns(pq_path)
    assert bad == [] and str(fast.model_a.dtype) == "string" and len(fast) == len(log)  # the column-wise path
    log.astype("category").to_parquet(tmp_path / "cat.parquet")  # dictionary-encoded columns: the same path
    coded, _ = read_battle_columns(tmp_path / "cat.parquet")
    assert str(coded.model_a.dtype) == "string" and coded.category.tolist() == fast.category.tolist()
    for args in ([], ["--by", "category"]):
        same = [run(["rate", str(p), "--format", "json", "--bootstrap", "20", *args]).stdout
                for p in (pq_path, jl_path)]
        assert same[0] == same[1]


def test_a_long_json_list_names_the_line_of_each_bad_record(log, tmp_path):
    from flywheel.face.battlelog import BattleLogError, read_battles

    records = log.head(300).to_dict("records")
    records[250]["winner"] = "draw"
    path = tmp_path / "b.json"
    path.write_text(json.dumps(records, indent=1))
    lines = path.read_text().splitlines()
    starts = [n for n, line in enumerate(lines, 1) if line == " {"]  # where each record begins
    good, bad = read_battles(path)
    assert len(starts) == 300 and len(good) == 299
    assert [str(b) for b in bad] == [f"b.json:{starts[250]}: winner 'draw' is not one of model_a, model_b, tie, "
                                     "tie (bothbad)"]
    broken = starts[280] + 2  # the record's second field loses its colon
    lines[broken - 1] = lines[broken - 1].replace('":', '" ', 1)
    path.write_text("\n".join(lines))
    try:
        read_battles(path)
        raise AssertionError("invalid JSON was read")
    except BattleLogError as e:
        assert f"b.json:{broken}: not JSON" in str(e), str(e)


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv"])
def test_a_log_saved_with_a_byte_order_mark_reads_as_without(log, tmp_path, suffix):
    """Excel's "CSV UTF-8" and some Windows tools start a file with a UTF-8 byte order mark."""
    from flywheel.face.battlelog import read_battles

    path = tmp_path / f"b.{suffix}"
    {"jsonl": lambda: log.head(40).to_json(path, orient="records", lines=True),
     "json": lambda: log.head(40).to_json(path, orient="records", indent=1),
     "csv": lambda: log.head(40).to_csv(path, index=False)}[suffix]()
    plain = read_battles(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    good, bad = read_battles(path)
    assert not bad and len(good) == 40 and good == plain[0]
