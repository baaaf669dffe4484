"""Row counts of the files a run writes, read from their footers: a curated dataset folder
(``iter-000k/sft``) and a Parquet log shard. The flow's dataset events and the face's listings
count rows the same way."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from flywheel.ground.atomic import DAMAGED_HINT, DamagedFileError


def is_hf_dataset(path: Path) -> bool:
    """A curated dataset folder: ``data/*.parquet`` with its card, or (run directories made
    before) ``save_to_disk``'s layout."""
    if not path.is_dir():
        return False
    legacy = (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    return legacy or ((path / "README.md").is_file() and any((path / "data").glob("*.parquet")))


def parquet_rows(path: Path) -> int:
    """Rows of one Parquet file, from its footer; a damaged file raises ``DamagedFileError`` naming it."""
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except pa.ArrowInvalid as e:
        raise DamagedFileError(f"{path}: not a readable Parquet file ({e}; {DAMAGED_HINT})") from e


def dataset_rows(path: Path) -> int:
    """Rows of a curated dataset folder (``is_hf_dataset``)."""
    files = sorted((path / "data").glob("*.parquet"))
    if files:
        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)  # read from the footers
    from datasets import load_from_disk

    return len(load_from_disk(str(path)))  # memory-mapped: nothing is read but the lengths
