"""Read battle logs in the Chatbot Arena layout: ``model_a``, ``model_b``, ``winner``
(``model_a``, ``model_b``, ``tie``, ``tie (bothbad)``), optional ``category``; for style control,
each battle's style (``read_battles(..., style=True)``): its ``conv_metadata`` as Chatbot Arena's
logs hold it, else the answers' texts (``conversation_a``/``conversation_b``, every assistant turn
counted, or ``response_a``/``response_b``) measured with ``flywheel.ground.style.style_of``.

JSONL, JSON (a list of records), CSV, TSV and Parquet, read by ``flywheel.ground.row_files``. Every
bad row is reported with where it is (``file:line``, ``file:row N`` for Parquet); the caller
decides whether to fail or skip. A break that leaves the rest unreadable (a JSON list broken, a
CSV quote left open) fails the whole log. Reference rankings (``read_reference``) and a leaderboard's
consistency with one live here too.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flywheel.ground.row_files import BadRow, RowFileError, read_row_file
from flywheel.ground.style import FEATURES, style_of, vectors_from_metadata
from flywheel.maths.ratings import OUTCOME, Rating

COLUMNS = ("model_a", "model_b", "winner")


@dataclass(frozen=True)
class ArenaBattle:
    model_a: str
    model_b: str
    winner: str
    category: str | None = None
    style: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (A's, B's) counts in FEATURES order


StylePair = tuple[tuple[int, ...], tuple[int, ...]]
NO_STYLE = ("no style features (conv_metadata, conversation_a and conversation_b, or response_a and "
            "response_b)")


class BattleLogError(ValueError):
    """The file cannot be read as a battle log at all (format, missing columns)."""


def _check(row: Any) -> ArenaBattle | str:
    if not isinstance(row, dict):
        return "not an object"
    missing = [c for c in COLUMNS if row.get(c) in (None, "")]
    if missing:
        return f"missing {', '.join(missing)}"
    a, b, w = row["model_a"], row["model_b"], row["winner"]
    if not isinstance(a, str) or not isinstance(b, str):
        return "model_a and model_b must be strings"
    if not isinstance(w, str) or w not in OUTCOME:
        return f"winner {w!r} is not one of {', '.join(OUTCOME)}"
    if a.strip() == b.strip():
        return f"a model cannot battle itself ({a!r})"
    cat = row.get("category")
    return ArenaBattle(a, b, w, None if cat in (None, "") else str(cat))


def _json_value(value: Any) -> Any:
    """A nested value as stored: CSV keeps it as JSON text."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _answers_style(row: dict, side: str) -> tuple[int, ...] | str | None:
    """One side's style from its answer texts: every assistant turn of ``conversation_<side>``
    (summed, as Chatbot Arena counts), else ``response_<side>``; None if the row has neither."""
    turns = _json_value(row.get(f"conversation_{side}"))
    if turns not in (None, ""):
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            return f"conversation_{side} must be a list of turns ({{'role': ..., 'content': ...}})"
        said = [t.get("content") or "" for t in turns if t.get("role") == "assistant"]
        if not all(isinstance(c, str) for c in said):
            return f"conversation_{side}: an assistant turn's content is not text"
        vectors = [style_of(c).vector() for c in said]
        return tuple(int(sum(v[i] for v in vectors)) for i in range(len(FEATURES)))
    text = row.get(f"response_{side}")
    if text is None:
        return None
    return style_of(text).vector() if isinstance(text, str) else f"response_{side} is not text"


def _style(row: dict) -> StylePair | str | None:
    """The battle's (A's, B's) style counts, a reason it is bad, or None where the row has none."""
    meta = _json_value(row.get("conv_metadata"))
    if meta not in (None, ""):
        if not isinstance(meta, dict):
            return "conv_metadata must be an object"
        try:
            pair = vectors_from_metadata(meta)
        except KeyError as e:
            return f"conv_metadata lacks {e.args[0]}"
        except (TypeError, ValueError):
            return "conv_metadata: a count is not a number"
        if min(pair[0] + pair[1]) < 0:
            return "conv_metadata: a count is negative"
        return pair
    a, b = _answers_style(row, "a"), _answers_style(row, "b")
    for side in (a, b):
        if isinstance(side, str):
            return side
    if a is None or b is None:
        return None
    return a, b


def read_battles(path: str | Path, style: bool = False) -> tuple[list[ArenaBattle], list[BadRow]]:
    """All good battles and all bad rows of a battle log; the format follows the extension.
    ``style``: each battle also needs its style features (a row without them is bad; a log
    without any is an error)."""
    path = Path(path)
    if not path.is_file():
        raise BattleLogError(f"{path}: no such file")
    try:
        got = read_row_file(path)
    except RowFileError as e:
        raise BattleLogError(str(e)) from None
    if got.columns is not None and not set(COLUMNS) <= set(got.columns):
        if got.format == "parquet":
            raise BattleLogError(f"{path}: needs columns model_a, model_b and winner (has {list(got.columns)})")
        raise BattleLogError(f"{path}: the header needs model_a, model_b and winner (has {sorted(got.columns)})")
    good: list[ArenaBattle] = []
    bad: list[BadRow] = []
    unstyled = 0  # good rows but for their style
    for row in got.rows:
        if isinstance(row, BadRow):
            if row.last:  # rating the rows before the break would hide the rest of the log
                raise BattleLogError(f"{path}: {row}")
            bad.append(row)
            continue
        checked = _check(row.value)
        if isinstance(checked, str):
            bad.append(BadRow(row.where, checked))
            continue
        if style:
            pair = _style(row.value)
            if not isinstance(pair, tuple):
                unstyled += pair is None
                bad.append(BadRow(row.where, pair or NO_STYLE))
                continue
            checked = ArenaBattle(checked.model_a, checked.model_b, checked.winner, checked.category, pair)
        good.append(checked)
    if style and unstyled and not good:
        raise BattleLogError(f"{path}: style control needs each battle's style features: conv_metadata (Chatbot "
                             "Arena's), or the answers' texts (conversation_a and conversation_b, or response_a and "
                             "response_b); this log has none")
    return good, bad


@dataclass(frozen=True)
class BattleColumns:
    """A battle log's good rows as columns: pandas Series (arrow-backed strings where the file
    was read by the fast path), what ``flywheel.maths.leaderboard.rate`` reads fastest."""

    model_a: Any
    model_b: Any
    winner: Any
    category: Any  # str or None per row
    style_a: np.ndarray | None = None  # int64[N, F]: A's answer's style counts (FEATURES order), if read
    style_b: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.winner)

    def by_category(self) -> dict[str, BattleColumns]:
        """One ``BattleColumns`` per category (rows without one under ``(none)``), sorted by name."""
        cats = self.category.fillna("(none)")
        out = {}
        for name in sorted(set(cats.unique())):
            keep = (cats == name).to_numpy()
            out[name] = BattleColumns(*(c[keep].reset_index(drop=True) for c in
                                        (self.model_a, self.model_b, self.winner, self.category)),
                                      *(None if s is None else s[keep] for s in (self.style_a, self.style_b)))
        return out


def read_battle_columns(path: str | Path, style: bool = False) -> tuple[BattleColumns, list[BadRow]]:
    """``read_battles`` as columns. A Parquet log whose every row is good is checked column-wise
    (seconds faster on a million rows); any doubt (a bad row, another type) falls back to the
    row-by-row reader, so the battles and the bad rows are exactly ``read_battles``'s. ``style``:
    the style columns too (read row by row)."""
    import pandas as pd

    path = Path(path)
    parquet = path.suffix.lower() in (".parquet", ".pq") and path.is_file()
    fast = _parquet_columns(path) if parquet and not style else None
    if fast is not None:
        return fast, []
    good, bad = read_battles(path, style)
    frame = pd.DataFrame([(b.model_a, b.model_b, b.winner, b.category) for b in good],
                         columns=["model_a", "model_b", "winner", "category"], dtype=object)
    sides = (None, None)
    if style:
        sides = tuple(np.array([b.style[i] for b in good], dtype=np.int64).reshape(len(good), len(FEATURES))
                      for i in (0, 1))
    return BattleColumns(frame["model_a"], frame["model_b"], frame["winner"], frame["category"], *sides), bad


def _parquet_columns(path: Path) -> BattleColumns | None:
    """The log's columns if every row passes ``_check`` (tested column-wise), else None."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError):
        return None  # the row-by-row reader says why
    if not set(COLUMNS) <= set(table.column_names) or table.num_rows == 0:
        return None
    text = lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)  # noqa: E731
    for i, field in enumerate(table.schema):  # pandas categoricals are stored dictionary-encoded
        if pa.types.is_dictionary(field.type) and text(field.type.value_type):
            table = table.set_column(i, field.name, table.column(i).cast(field.type.value_type))
    category = table.column("category") if "category" in table.column_names else None
    if not all(text(table.column(c).type) for c in COLUMNS) or (
            category is not None and not (text(category.type) or pa.types.is_null(category.type))):
        return None
    a, b, w = (table.column(c) for c in COLUMNS)
    if any(c.null_count for c in (a, b, w)) or any(pc.any(pc.equal(c, "")).as_py() for c in (a, b, w)):
        return None  # a missing value: bad rows
    if not pc.all(pc.is_in(w, value_set=pa.array(list(OUTCOME)))).as_py():
        return None
    pairs = pa.table({"a": a, "b": b}).group_by(["a", "b"]).aggregate([])  # distinct pairs: _check's rule
    if any(x.strip() == y.strip() for x, y in zip(pairs.column("a").to_pylist(), pairs.column("b").to_pylist())):
        return None
    if category is None or pa.types.is_null(category.type):
        category = pa.nulls(table.num_rows, pa.string())
    else:  # "" is no category, as in _check
        category = pc.if_else(pc.equal(category, ""), pa.scalar(None, category.type), category)
    arrow_str = pd.StringDtype("pyarrow")  # pandas' arrow-backed strings: no copy into Python objects
    series = [c.to_pandas(types_mapper={pa.string(): arrow_str, pa.large_string(): arrow_str}.get)
              for c in (a, b, w, category)]
    return BattleColumns(*series)


def read_reference(path: str | Path) -> dict[str, float]:
    """A reference ranking: JSON (``{model: score}`` or a list of ``{model, rating|score}``) or a
    CSV with ``model`` and ``rating`` (or ``score``) columns. Higher is better."""
    path = Path(path)
    if not path.is_file():
        raise BattleLogError(f"{path}: no such file")
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        if isinstance(data, dict):
            return {str(k): float(v) for k, v in data.items()}
        records = data
    else:
        with path.open(newline="", encoding="utf-8-sig") as f:
            records = list(csv.DictReader(f))
    out = {}
    for n, r in enumerate(records, 1):
        key = "rating" if "rating" in r else "score" if "score" in r else None
        if "model" not in r or key is None:
            raise BattleLogError(f"{path}: record {n} needs 'model' and 'rating' (or 'score')")
        out[str(r["model"])] = float(r[key])
    return out


# -- consistency with a reference ranking -----------------------------------------------------
def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    for v in np.unique(x):  # average ranks for ties
        ranks[x == v] = ranks[x == v].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    rx, ry = _ranks(np.asarray(x, float)), _ranks(np.asarray(y, float))
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def consistency(ratings: list[Rating], reference: dict[str, float]) -> dict:
    """Arena-Hard-style agreement with a reference ranking (higher reference score = better).

    - ``spearman``: rank correlation over the models both rank;
    - ``separability``: share of model pairs whose CIs do not overlap;
    - ``agreement``: among those separable pairs, the share ordered as the reference orders them.
    """
    common = [r for r in ratings if r.model in reference]
    if len(common) < 2:
        raise ValueError("the reference shares fewer than 2 models with these ratings")
    pairs = [(p, q) for i, p in enumerate(common) for q in common[i + 1 :]]
    separable = [(p, q) for p, q in pairs if p.lower > q.upper or q.lower > p.upper]
    agree = [(p, q) for p, q in separable
             if (p.rating - q.rating) * (reference[p.model] - reference[q.model]) > 0]
    return {
        "models": len(common),
        "spearman": round(spearman([r.rating for r in common], [reference[r.model] for r in common]), 4),
        "separability": round(len(separable) / len(pairs), 4),
        "agreement": round(len(agree) / len(separable), 4) if separable else None,
        "missing_from_reference": sorted(r.model for r in ratings if r.model not in reference),
    }
