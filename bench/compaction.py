"""Reads of an append table of many small appends, before and after ``Table.compact()``.

A stream or a job that appends often leaves one small file per commit. The table here
gets ``--appends`` commits of ``--rows`` rows (8 float64 columns and a string); then
the same reads run on it as it is and after ``compact()`` (the copy and the original
hold the same rows: checked), alternating, best of ``--repeat``:

- ``to_arrow()`` on local files (wall seconds);
- on an S3 server on 127.0.0.1 (moto), ``to_arrow()`` with every request delayed by
  ``--latency-ms``, and the number of requests a scan makes;
- ``compact()`` itself on S3 at that latency, over a table of ``--partitions``
  partitions of 10 small files each: the runs rewritten one at a time (the code before)
  against ``RUN_THREADS`` at once, on two tables written alike.

    python bench/compaction.py [--appends 200] [--rows 2000] [--repeat 3] [--partitions 16]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from ab import best_of

import raylake
from raylake.table import Table, append_compaction
from raylake.testing.s3server import LocalS3Server

COLUMNS = [f"f{i}" for i in range(8)]


def batch(i: int, rows: int) -> pa.Table:
    ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
    data = {c: (ids * (k + 1)).astype(np.float64) for k, c in enumerate(COLUMNS)}
    return pa.table({"id": ids, **data, "tag": pa.array([f"t{i % 7}"] * rows)})


def build(uri: str, appends: int, rows: int, storage_options: dict | None = None) -> Table:
    tbl = raylake.from_pandas(batch(0, rows).to_pandas(), uri, storage_options=storage_options)
    for i in range(1, appends):
        tbl.write(batch(i, rows))
    return tbl


def build_partitioned(uri: str, partitions: int, rows: int, options: dict) -> Table:
    """``partitions`` partitions of 10 files each: 10 commits, each a file per partition."""
    first = batch(0, rows * partitions)
    day = pa.array([f"p{i % partitions:02d}" for i in range(first.num_rows)])
    tbl = raylake.create_table(
        uri, first.append_column("part", day).schema, partition_by=["part"],
        storage_options=options,
    )  # fmt: skip
    for i in range(10):
        part = batch(i, rows * partitions)
        tbl.write(part.append_column("part", day))
    return tbl


def compact_speed(server: LocalS3Server, bucket: str, args: argparse.Namespace) -> None:
    options = server.storage_options
    server.latency_s = 0
    tables = [build_partitioned(f"s3://{bucket}/parts-{n}", args.partitions, args.rows // 10,
                                options) for n in ("serial", "threads")]  # fmt: skip
    server.latency_s = args.latency_ms / 1000
    default = append_compaction.RUN_THREADS
    took = []
    for tbl, threads in zip(tables, (1, default)):
        append_compaction.RUN_THREADS = threads
        t0 = time.perf_counter()
        assert tbl.compact() is not None
        took.append(time.perf_counter() - t0)
    append_compaction.RUN_THREADS = default
    assert tables[0].to_arrow().equals(tables[1].to_arrow())
    print(f"{f'compact(), {args.partitions} partitions x 10 files, S3':<44} "
          f"{took[0]:10.2f} s {took[1]:10.2f} s {took[0] / took[1]:7.2f}x  "
          f"(1 run at once / {default})")  # fmt: skip


def best(fn: Callable[[], object], repeat: int) -> float:
    """The best wall seconds of ``repeat`` runs after a warm-up (bench/ab.py's)."""
    return best_of(fn, repeat)[1]


def compare(name: str, small: Table, compacted: Table, repeat: int) -> tuple[float, float]:
    assert small.to_arrow().equals(compacted.to_arrow())
    t_small = best(small.to_arrow, repeat)
    t_compact = best(compacted.to_arrow, repeat)
    print(
        f"{name:<44} {t_small * 1e3:9.1f} ms {t_compact * 1e3:9.1f} ms {t_small / t_compact:7.2f}x"
    )
    return t_small, t_compact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--partitions", type=int, default=16)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="raylake-compaction-"))
    try:
        small = build(str(root / "small"), args.appends, args.rows)
        shutil.copytree(root / "small", root / "compacted")
        compacted = raylake.open_table(str(root / "compacted"))
        t0 = time.perf_counter()
        compacted.compact()
        took = time.perf_counter() - t0
        files = [len([f for s in t.scan().plan() for f in s.files]) for t in (small, compacted)]
        print(f"{args.appends} appends of {args.rows} rows; compact() took {took:.2f}s")
        print(f"{'read (best of ' + str(args.repeat) + ')':<44} {'small files':>12} "
              f"{'compacted':>12} {'ratio':>8}")  # fmt: skip
        print(f"{'data files':<44} {files[0]:12d} {files[1]:12d}")
        compare("to_arrow(), local files", small, compacted, args.repeat)
        with LocalS3Server() as server:
            bucket = server.create_bucket("bench")
            options = server.storage_options
            remote = {}
            for name in ("small", "compacted"):
                uri = f"s3://{bucket}/{name}"
                remote[name] = build(uri, args.appends, args.rows, options)
            remote["compacted"].compact()
            counts = []
            for name in ("small", "compacted"):
                tbl = raylake.open_table(f"s3://{bucket}/{name}", storage_options=options)
                tbl.to_arrow()  # caches filled: the requests a scan makes again
                before = server.requests
                tbl.to_arrow()
                counts.append(server.requests - before)
            print(f"{'S3 requests of a repeated to_arrow()':<44} {counts[0]:12d} {counts[1]:12d}")
            server.latency_s = args.latency_ms / 1000
            compare(
                f"to_arrow(), S3 at {args.latency_ms:g} ms a request",
                raylake.open_table(f"s3://{bucket}/small", storage_options=options),
                raylake.open_table(f"s3://{bucket}/compacted", storage_options=options),
                args.repeat,
            )
            compact_speed(server, bucket, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
