"""The selection's plans in a run directory (``iter-000k/plan-rN.parquet``), part of the run store
(``flywheel.ground.store.RunStore``, the one owner of the layout), and the Parquet schema of a
record type, which every log shard shares."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from flywheel.ground.records import BattleSpec
from flywheel.ground.row_files import read_jsonl


def iter_name(k: int) -> str:
    return f"iter-{k:04d}"


class PlanFiles:
    """The plan of each selection round: the battles chosen, so that a resumed run plays exactly
    these. ``RunStore`` is one; it gives ``iter_dir``."""

    def iter_dir(self, k: int) -> Path:
        raise NotImplementedError

    def write_plan(self, k: int, rnd: int, specs: list[BattleSpec], shard_size: int) -> None:
        """Round ``rnd``'s chosen battles (so a resumed run plays exactly these), one Parquet row
        group per shard of ``shard_size`` battles: a shard reads its own group only."""
        path = self.iter_dir(k) / f"plan-r{rnd}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        table = pa.Table.from_pylist([s.to_row() for s in specs], schema=arrow_schema(BattleSpec))
        pq.write_table(table, tmp, row_group_size=max(1, shard_size))
        os.replace(tmp, path)

    def _plan_paths(self, k: int, rnd: int | None) -> list[Path]:
        folder = self.iter_dir(k)
        rounds = [rnd] if rnd is not None else sorted({int(p.name.split(".")[0].split("-r")[1])
                                                       for p in folder.glob("plan-r*.*") if p.suffix in (".parquet", ".jsonl")})
        found = []
        for r in rounds:  # Parquet; a run directory from before keeps its JSONL plans
            found += [p for p in (folder / f"plan-r{r}.parquet", folder / f"plan-r{r}.jsonl") if p.exists()][:1]
        return found

    @staticmethod
    def _read_plan(path: Path) -> list[BattleSpec]:
        if path.suffix == ".jsonl":
            return [BattleSpec.from_row(r) for r in read_jsonl(path)]
        return [BattleSpec.from_row(r) for r in pq.read_table(path).to_pylist()]

    def plan(self, k: int, rnd: int | None = None) -> list[BattleSpec] | None:
        """One round's planned battles, or (``rnd=None``) all rounds' in order; None if none yet."""
        paths = self._plan_paths(k, rnd)
        return [s for p in paths for s in self._read_plan(p)] if paths else None

    def plan_size(self, k: int, rnd: int) -> int:
        """How many battles round ``rnd`` planned (0 before it is planned), read from the metadata."""
        paths = self._plan_paths(k, rnd)
        if not paths:
            return 0
        if paths[0].suffix == ".jsonl":
            return len(self._read_plan(paths[0]))
        return pq.ParquetFile(paths[0]).metadata.num_rows

    def plan_shard(self, k: int, rnd: int, i: int, shard_size: int) -> list[BattleSpec]:
        """Shard ``i`` of round ``rnd``'s plan (battles ``i*shard_size`` up to the next shard),
        read from its own row group when the plan was written in shards of this size."""
        paths = self._plan_paths(k, rnd)
        if not paths:
            return []
        if paths[0].suffix == ".parquet":
            f = pq.ParquetFile(paths[0])
            sizes = [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)]
            if all(n == shard_size for n in sizes[:-1]) and i < len(sizes):
                return [BattleSpec.from_row(r) for r in f.read_row_group(i).to_pylist()]
        return self._read_plan(paths[0])[i * shard_size:(i + 1) * shard_size]

    @staticmethod
    def shard_name(k: int, rnd: int, i: int) -> str:
        """The battle and judgment shard ``i`` of round ``rnd``'s plan."""
        return f"{iter_name(k)}-train-r{rnd}-s{i:04d}"


_ARROW = {"str": pa.string(), "Winner": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}


def arrow_schema(cls: type) -> pa.Schema:
    """The parquet schema of a record type, from its field annotations. Every shard gets the same
    schema (a column that happens to be all null is still a string column), so a log's shards
    read as one table."""
    fields = []
    for f in dataclasses.fields(cls):
        base = str(f.type).replace(" ", "").split("|")
        nullable = "None" in base
        fields.append(pa.field(f.name, _ARROW[[t for t in base if t != "None"][0]], nullable=nullable))
    return pa.schema(fields)
