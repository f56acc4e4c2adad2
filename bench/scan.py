"""Scan throughput of raylake's Table.to_arrow against pyarrow.dataset over the same files.

Writes the synthetic table (default 4M rows, 4 daily partitions, one commit per
day), then times, best of 5 runs alternating the two readers, in the same run:
  - a full scan,
  - a 4-column projection,
  - a selective filter (one day and an id range), warm (metadata kept from earlier
    queries: raylake's caches, one pyarrow dataset object reused) and cold,
through ``Table.to_arrow`` and through ``pyarrow.dataset`` over the same data
files, and prints rows/s and the ratio (raylake / pyarrow, >1 means faster).

Schema evolution (``--evolution-rows``, default 2M; 0 skips it): the same rows in 64
files (16 commits a day) written under 5 schema versions (a rename, a widening, an
added column, a dropped column between them), against a table of the same rows all
written under the final schema; full scan, projection, filter and planning, median
of interleaved runs, ratio evolved / one schema (issue 18: <= 1.1x).

On the S3 server (``--s3-rows``, default 1M; 0 skips it): the same table with 16
commits a day (64 files) written to a real S3-compatible HTTP server on 127.0.0.1
(moto, raylake/testing/s3server.py) that delays every request by 20 ms, like a
store in another zone; both readers go through the same s3fs filesystem.

    python bench/scan.py [--rows 4000000] [--s3-rows 1000000] [--evolution-rows 2000000]
                         [--dir bench/.data]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from _evolution import run_evolution_cases
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
    parser.add_argument("--s3-rows", type=int, default=1_000_000)
    parser.add_argument("--s3-latency-ms", type=float, default=20.0)
    parser.add_argument("--evolution-rows", type=int, default=2_000_000)
    parser.add_argument("--only-evolution", action="store_true")
    args = parser.parse_args()
    if args.evolution_rows:
        run_evolution_cases(Path(args.dir), args.evolution_rows)
    if args.only_evolution:
        return
    for commits_per_day in args.commits_per_day:
        print(f"\n### {commits_per_day} commit(s) per day")
        tbl = build_table(Path(args.dir), args.rows, commits_per_day)
        run_cases(tbl, args.rows)
    if args.s3_rows:
        run_s3_cases(args.s3_rows, args.s3_latency_ms / 1000)


def run_s3_cases(total_rows: int, latency_s: float) -> None:
    from raylake.testing.s3server import LocalS3Server

    with LocalS3Server() as server:
        uri = f"s3://{server.create_bucket()}/scan"
        options = server.storage_options
        tbl = build_table(uri, total_rows, commits_per_day=16, storage_options=options)
        fs = pafs.PyFileSystem(pafs.FSSpecHandler(tbl.file_io.fs))
        files = [f.split("://", 1)[-1] for f in data_files(tbl)]
        server.latency_s = latency_s
        print(
            f"\n### S3 server, {latency_s * 1000:.0f} ms per request: {len(files)} data files, "
            f"{total_rows:,} rows"
        )
        _, _, text_filter, arrow_filter = _selective(total_rows)
        dataset = ds.dataset(files, format="parquet", filesystem=fs)
        runs = [
            (
                "selective filter, warm",
                partial(tbl.to_arrow, filter=text_filter),
                partial(dataset.to_table, filter=arrow_filter),
            ),
            (
                "selective filter, cold",
                partial(_cold_raylake, uri, text_filter, options),
                partial(_cold_pyarrow, files, arrow_filter, fs),
            ),
        ]
        _print_runs(runs, total_rows, repeat=3)


def _selective(total_rows: int) -> tuple[str, None, str, pc.Expression]:
    per_day = total_rows // len(DATES)
    lo, hi = per_day + per_day // 2, per_day + per_day // 2 + per_day // 50
    return (
        "selective filter",
        None,
        f"dt = '{DATES[1]}' and id >= {lo} and id < {hi}",
        (pc.field("dt") == DATES[1]) & (pc.field("id") >= lo) & (pc.field("id") < hi),
    )


def run_cases(tbl: raylake.Table, total_rows: int) -> None:
    files = data_files(tbl)
    dataset = ds.dataset(files, format="parquet")
    cases = [
        ("full scan", None, None, None),
        ("4-column projection", ["id", "f0", "f1", "label"], None, None),
        _selective(total_rows),
    ]
    print(f"{len(files)} data files")
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
    _print_runs(runs, total_rows)


def _print_runs(
    runs: list[tuple[str, Callable[[], pa.Table], Callable[[], pa.Table]]],
    total_rows: int,
    repeat: int = 5,
) -> None:
    print(f"{'case':<28} {'raylake':>18} {'pyarrow.dataset':>18} {'ratio':>7}  rows")
    for name, lake_fn, pa_fn in runs:
        t_lake, out_lake, t_pa, out_pa = compare(lake_fn, pa_fn, repeat=repeat)
        assert out_lake.num_rows == out_pa.num_rows, (out_lake.num_rows, out_pa.num_rows)
        rows = out_lake.num_rows
        # Rows/s of the table size for every case, so that filter speed-ups show as rates.
        print(
            f"{name:<28} {rate(total_rows, t_lake):>18} {rate(total_rows, t_pa):>18} "
            f"{t_pa / t_lake:>6.2f}x  {rows:,}"
        )


def _cold_raylake(uri: str, text_filter: str, options: dict[str, Any] | None = None) -> pa.Table:
    clear_caches()
    return raylake.open_table(uri, storage_options=options).to_arrow(filter=text_filter)


def _cold_pyarrow(
    files: list[str], arrow_filter: pc.Expression, fs: pafs.FileSystem | None = None
) -> pa.Table:
    return ds.dataset(files, format="parquet", filesystem=fs).to_table(filter=arrow_filter)


if __name__ == "__main__":
    main()
