from flywheel.config.tree import CurateConfig
from flywheel.ground.records import Battle, Judgment
from flywheel.learning.curation import curate
from judges.verifier import VerifierJudge

# Arena Learning's rule alone: what beat the target (the default also self-distils)
ARENA_ONLY = CurateConfig(include_target_wins=False, include_target_ties=False)


def battle(bid, a, b, ra, rb, ref="42", prompt="40+2=", error=None):
    return Battle(bid, 1, "train", "p" + bid, prompt, "add", 1, ref, a, b, ra, rb, error)


def test_verifier_exact_match_and_ties():
    j = VerifierJudge().judge([
        battle("1", "x", "y", "42", "41"),
        battle("2", "x", "y", "4", " 42 "),
        battle("3", "x", "y", "42", "42"),
        battle("4", "x", "y", "1", "2"),
        battle("5", "x", "y", "42", "42", ref=None),
    ])
    assert [x.winner for x in j] == ["model_a", "model_b", "tie", "tie (bothbad)", None]
    assert j[4].error and not j[4].valid


def test_sft_from_target_losses_dpo_from_decisive_and_no_eval_leak():
    battles = [
        battle("1", "student@0", "calc", "41", "42"),               # target lost -> SFT + DPO
        battle("2", "calc", "student@0", "43", "42", prompt="39+3="),  # target won -> DPO only
        battle("3", "student@0", "calc", "42", "42", prompt="41+1="),  # tie -> nothing
        battle("4", "student@0", "calc", "0", "42", prompt="7*6="),    # eval prompt -> dropped
        battle("5", "student@0", "calc", "0", "42", prompt="6*7=", error="calc: timeout"),
    ]
    judgments = {j.battle_id: j for j in VerifierJudge().judge([b for b in battles if b.ok])}
    cur = curate(battles, judgments, ["student"], {"7*6="}, ARENA_ONLY)
    assert [(e.prompt, e.completion, e.source_model, e.target) for e in cur.sft] == [("40+2=", "42", "calc", "student")]
    assert [(d.prompt, d.chosen, d.rejected) for d in cur.dpo] == [("40+2=", "42", "41"), ("39+3=", "42", "43")]
    assert cur.dropped["contaminated"] == 1 and cur.dropped["failed"] == 1 and cur.dropped["undecided"] == 1
    with_wins = curate(battles, judgments, ["student"], {"7*6="}, ARENA_ONLY.model_copy(update={"include_target_wins": True}))
    assert {e.prompt for e in with_wins.sft} == {"40+2=", "39+3="}


def test_self_distillation_keeps_the_targets_good_ties_and_never_bad_ones():
    battles = [
        battle("1", "student@2", "calc", "42", "42", prompt="41+1="),   # both right: a good tie
        battle("2", "calc", "student@2", "1", "2", prompt="40+1="),     # both wrong: tie (bothbad)
        battle("3", "student@2", "calc", "42", "42", prompt="7*6="),    # eval prompt: never
        battle("4", "calc", "student@2", "42", "42", prompt="41+1="),   # same prompt again: deduplicated
        battle("5", "calc", "scribe", "42", "42", prompt="39+3="),      # no target in it
    ]
    judgments = {j.battle_id: j for j in VerifierJudge().judge(battles)}
    assert [judgments[b].winner for b in "12"] == ["tie", "tie (bothbad)"]
    assert not curate(battles, judgments, ["student"], {"7*6="}, ARENA_ONLY).sft
    cur = curate(battles, judgments, ["student"], {"7*6="}, CurateConfig())  # the default: ties kept
    assert [(e.prompt, e.completion, e.source_model, e.target) for e in cur.sft] == [("41+1=", "42", "student@2", "student")]
    assert not cur.dpo  # a tie is no preference


def test_invalid_judgments_are_not_counted():
    battles = [battle("1", "student@0", "calc", "41", "42")]
    cur = curate(battles, {"1": Judgment("1", "llm", None, error="unparseable")}, ["student"], set(), CurateConfig())
    assert not cur.sft and not cur.dpo and cur.dropped["invalid"] == 1


def test_datasets_open_with_load_dataset_pandas_and_duckdb_and_old_ones_still_read(tmp_path, monkeypatch):
    import duckdb
    import pandas as pd
    import yaml
    from datasets import Dataset, load_dataset

    from flywheel.ground.records import SFTExample
    from flywheel.learning.curation import SFT_COLUMNS, dataset_card, load_dataset_dir, save_dataset

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # load_dataset's cache: not in the dataset
    rows = [SFTExample("1+1=", "2", "p1", "add", "calc", "b1", 1, "student"),
            SFTExample("3+1=", "4", "p2", "add", "calc", "b2", 1, "student")]
    card = dataset_card("sft", 1, rows, "verifier", CurateConfig(), {})
    assert save_dataset(rows, SFT_COLUMNS, tmp_path / "full", card) == 2
    assert save_dataset([], SFT_COLUMNS, tmp_path / "empty", "# card\n") == 0
    full = tmp_path / "full"
    got = load_dataset("parquet", data_dir=str(full / "data"), split="train")
    assert got.column_names == SFT_COLUMNS and got["completion"] == ["2", "4"]
    assert pd.read_parquet(full / "data")["prompt_id"].tolist() == ["p1", "p2"]
    assert duckdb.sql(f"SELECT count(*) FROM '{full}/data/*.parquet' WHERE category = 'add'").fetchall() == [(2,)]
    front = yaml.safe_load((full / "README.md").read_text().split("---")[1])  # a Hub card: YAML front matter
    assert {"trl", "sft"} <= set(front["tags"]) and front["configs"][0]["data_files"][0]["path"] == "data/train-*.parquet"
    assert front["task_categories"] == ["text-generation"] and front["license"]
    assert load_dataset_dir(full)["completion"] == ["2", "4"]
    empty = load_dataset_dir(tmp_path / "empty")  # no rows: the schema is still there
    assert len(empty) == 0 and empty.column_names == SFT_COLUMNS
    assert pd.read_parquet(tmp_path / "empty" / "data").columns.tolist() == SFT_COLUMNS
    # a run directory written before (save_to_disk) still reads
    Dataset.from_dict({"prompt": ["x"], "completion": ["y"]}).save_to_disk(str(tmp_path / "old"))
    assert load_dataset_dir(tmp_path / "old")["completion"] == ["y"]


def test_log_shards_read_as_one_table_whatever_their_nulls(tmp_path):
    import pandas as pd
    import pyarrow.parquet as pq

    from flywheel.ground.store import RunStore

    store = RunStore(tmp_path)
    store.append_battles([battle("1", "a", "b", "1", "2")])  # error column all null
    store.append_battles([battle("2", "a", "b", "1", "", error="b: timeout")])
    store.append_judgments([Judgment("1", "v", "model_a")], 1, "train")
    store.append_judgments([Judgment("2", "v", None, error="unparseable")], 1, "train")
    assert pq.read_table(tmp_path / "battles").num_rows == 2
    assert pq.read_table(tmp_path / "judgments").column("error").to_pylist() == [None, "unparseable"]
    assert len(pd.read_parquet(tmp_path / "battles")) == 2
