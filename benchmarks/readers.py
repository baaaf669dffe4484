"""Reading battle logs for ``flywheel rate``: the column-wise Parquet path vs the row-by-row
reader, and the JSON-list reader's time per record as the log grows, in one run.

Logs are ``benchmarks.ratings.simulate``'s (64 models, skewed pair popularity), written once to a
temporary folder. Each time is the fastest of ``--repeats`` runs.

    python -m benchmarks.readers                     # 1,000,000-row Parquet; JSON lists of 50,000 and 200,000 records
    python -m benchmarks.readers --rows 200000 --json 20000,80000 --seeds 3

Prints, per seed: the Parquet read both ways (the row-by-row reader is what every log goes
through when a row is bad), and the JSON list's microseconds per record at each size (a reader
that is linear in the log keeps them level). Ends with ``ratio: X``: the row-by-row Parquet read
over the column-wise one, the median over seeds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.ratings import best_of, simulate
from flywheel.face.battlelog import read_battle_columns, read_battles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the Parquet log")
    ap.add_argument("--json", default="50000,200000", help="comma-separated record counts of the JSON lists")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(x) for x in args.json.split(",") if x.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    print(f"Parquet log of {args.rows:,} rows; JSON lists of {', '.join(f'{n:,}' for n in sizes)} records; "
          f"seeds {seeds}; fastest of {args.repeats} runs")
    print(f"{'seed':>4}  {'parquet columns s':>17}  {'parquet rows s':>14}  {'ratio':>6}  "
          + "  ".join(f"{f'json {n:,} us/rec':>20}" for n in sizes))
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            log = simulate(max([args.rows, *sizes]), 64, seed, True)
            pq_path = Path(tmp) / f"log{seed}.parquet"
            log.head(args.rows).to_parquet(pq_path)
            (cols, bad), col_s = best_of(args.repeats, read_battle_columns, pq_path)
            (rows, _), row_s = best_of(args.repeats, read_battles, pq_path)
            assert len(cols) == len(rows) == args.rows and not bad and cols.model_a.dtype != object  # columns read
            per_record = []
            for n in sizes:
                js = Path(tmp) / f"log{seed}-{n}.json"
                log.head(n).to_json(js, orient="records", indent=1)
                (good, bad), s = best_of(args.repeats, read_battles, js)
                assert len(good) == n and not bad
                per_record.append(1e6 * s / n)
            ratios.append(row_s / col_s)
            print(f"{seed:>4}  {col_s:17.3f}  {row_s:14.3f}  {ratios[-1]:6.1f}  "
                  + "  ".join(f"{x:20.2f}" for x in per_record))
    print(f"ratio: {statistics.median(ratios):.1f}")


if __name__ == "__main__":
    main()
