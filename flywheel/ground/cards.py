"""The Hub cards (``README.md``) a run saves beside its datasets and models: the YAML header (the
metadata the Hub reads: license, tags, a dataset's configs, a model's base model) written by
``huggingface_hub``'s card classes, offline, then the card's text."""

from __future__ import annotations

from typing import Any, Literal


def hub_card(kind: Literal["dataset", "model"], text: str, **metadata: Any) -> str:
    """A dataset's or a model's card: ``metadata`` (fields of ``DatasetCardData`` or
    ``ModelCardData``; None leaves a field out) as its YAML header, then ``text`` (Markdown)."""
    from huggingface_hub import DatasetCard, DatasetCardData, ModelCard, ModelCardData

    card, data = (DatasetCard, DatasetCardData) if kind == "dataset" else (ModelCard, ModelCardData)
    return str(card(f"---\n{data(**metadata).to_yaml()}\n---\n\n{text}"))


def parquet_config(name: str, files: str) -> dict[str, Any]:
    """One entry of a dataset card's ``configs``: the config ``name`` whose train split is the
    Parquet ``files`` (a glob relative to the card)."""
    return {"config_name": name, "data_files": [{"split": "train", "path": files}]}
