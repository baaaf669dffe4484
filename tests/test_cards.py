"""Hub cards through huggingface_hub's card classes (flywheel/ground/cards.py), offline: the header
reads back as the Hub reads it, and the root card of a pushed run names a config per dataset with
rows."""

from huggingface_hub import DatasetCard, ModelCard

from flywheel.face.hub import root_card
from flywheel.ground.cards import hub_card, parquet_config
from flywheel.ground.records import SFTExample
from flywheel.ground.store import RunStore
from flywheel.learning.curation import SFT_COLUMNS, save_dataset


def test_a_cards_header_reads_back_through_the_hubs_card_classes():
    text = "# student@2\n\n- config: {\"train\": {\"lr\": 1e-05}}\n"
    card = hub_card("model", text, library_name="peft", base_model="/models/a dir: x/student@1",
                    tags=["trl", "sft-dpo"], license=None)
    got = ModelCard(card)
    assert got.data.library_name == "peft" and got.data.base_model == "/models/a dir: x/student@1"
    assert got.data.tags == ["trl", "sft-dpo"] and got.data.license is None and "license" not in card
    assert card.startswith("---\n") and card.endswith("---\n\n" + text)
    config = parquet_config("sft-iter1", "iter-0001/sft/data/*.parquet")
    data = DatasetCard(hub_card("dataset", "# rows\n", configs=[config])).data
    assert data.configs == [{"config_name": "sft-iter1", "data_files": [{"split": "train",
                                                                         "path": "iter-0001/sft/data/*.parquet"}]}]


def test_the_root_card_of_a_run_names_a_config_for_each_dataset_with_rows(tmp_path):
    store = RunStore(tmp_path / "run")
    rows = [SFTExample("1+1=", "2", "p1", "add", "calc", "b1", 1, "student")]
    save_dataset(rows, SFT_COLUMNS, store.dataset_dir(1, "sft"), "# card\n")
    save_dataset([], SFT_COLUMNS, store.dataset_dir(1, "dpo"), "# card\n")
    card = DatasetCard(root_card(store.root, store.datasets()))
    assert [c["config_name"] for c in card.data.configs] == ["sft-iter1"]
    assert card.data.license == "other" and "arena-learning" in card.data.tags
    assert "| 1 | dpo | 0 | `iter-0001/dpo` |" in card.text and "| 1 | sft | 1 | `iter-0001/sft` |" in card.text
    none = DatasetCard(root_card(store.root, [(1, "dpo", store.dataset_dir(1, "dpo"))]))
    assert "configs" not in none.data.to_dict()  # no dataset with rows: no config
