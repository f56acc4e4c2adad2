"""Scan throughput of raylake's Table.to_arrow against pyarrow.dataset over the same files.

Writes the synthetic table (default 4M rows, 4 daily partitions, one commit per
day), then times, best of 5 runs alternating the two readers, in the same run:
  - a full scan,
  - a 4-column projection,
  - a selective filter (one day and an id range), warm (metadata kept from earlier
    queries: raylake's caches, one pyarrow dataset object reused) and cold,
through ``Table.to_arrow`` and through ``pyarrow.dataset`` over the same data
files, and prints rows/s and the ratio (raylake / pyarrow, >1 means faster).

    python bench/scan.py [--rows 4000000] [--dir bench/.data]
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from _synthetic import DATES, build_table, compare, data_files, rate

import raylake
from raylake.table import clear_caches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "scan"))
    parser.add_argument(
        "--commits-per-day",
        type=int,
        nargs="+",
        default=[1, 16],
        help="layouts to measure: 1 = one big file per day; 16 = an hourly-ingest table",
    )
    args = parser.parse_args()
    for commits_per_day in args.commits_per_day:
        print(f"\n### {commits_per_day} commit(s) per day")
        tbl = build_table(Path(args.dir), args.rows, commits_per_day)
        run_cases(tbl, args.rows)


def run_cases(tbl: raylake.Table, total_rows: int) -> None:
    files = data_files(tbl)
    dataset = ds.dataset(files, format="parquet")
    per_day = total_rows // len(DATES)
    lo, hi = per_day + per_day // 2, per_day + per_day // 2 + per_day // 50
    cases = [
        ("full scan", None, None, None),
        ("4-column projection", ["id", "f0", "f1", "label"], None, None),
        (
            "selective filter",
            None,
            f"dt = '{DATES[1]}' and id >= {lo} and id < {hi}",
            (pc.field("dt") == DATES[1]) & (pc.field("id") >= lo) & (pc.field("id") < hi),
        ),
    ]
    print(f"{len(files)} data files")
    print(f"{'case':<28} {'raylake':>18} {'pyarrow.dataset':>18} {'ratio':>7}  rows")
    runs = [
        (
            name,
            partial(tbl.to_arrow, columns=c, filter=t),
            partial(dataset.to_table, columns=c, filter=a),
        )
        for name, c, t, a in cases
    ]
    # Cold: no metadata kept from an earlier query, as in a fresh process or a new
    # pyarrow dataset per query: raylake reads its manifests, pyarrow every file footer.
    _, _, text_filter, arrow_filter = cases[-1]
    runs.append(
        (
            "selective filter, cold",
            partial(_cold_raylake, tbl.uri, text_filter),
            partial(_cold_pyarrow, files, arrow_filter),
        )
    )
    for name, lake_fn, pa_fn in runs:
        t_lake, out_lake, t_pa, out_pa = compare(lake_fn, pa_fn)
        assert out_lake.num_rows == out_pa.num_rows, (out_lake.num_rows, out_pa.num_rows)
        rows = out_lake.num_rows
        # Rows/s of the table size for every case, so that filter speed-ups show as rates.
        print(
            f"{name:<28} {rate(total_rows, t_lake):>18} {rate(total_rows, t_pa):>18} "
            f"{t_pa / t_lake:>6.2f}x  {rows:,}"
        )


def _cold_raylake(uri: str, text_filter: str) -> pa.Table:
    clear_caches()
    return raylake.open_table(uri).to_arrow(filter=text_filter)


def _cold_pyarrow(files: list[str], arrow_filter: pc.Expression) -> pa.Table:
    return ds.dataset(files, format="parquet").to_table(filter=arrow_filter)


if __name__ == "__main__":
    main()
