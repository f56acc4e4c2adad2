"""The synthetic feature table shared by the benchmarks.

Columns: int64 ``id`` (sequential), int64 ``user_id``, string ``dt`` with 4
dates, 16 float32 features ``f0``..``f15``, int32 ``label``, and a short string
``tag``. Generation is vectorized and seeded, so every run writes the same data.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

import raylake
from raylake.format.manifest import live_files, read_entries

DATES = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
FEATURES = [f"f{i}" for i in range(16)]
T = TypeVar("T")

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("user_id", pa.int64()),
        ("dt", pa.string()),
        *[(name, pa.float32()) for name in FEATURES],
        ("label", pa.int32()),
        ("tag", pa.string()),
    ]
)


def make_batch(start: int, rows: int, dt: str, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    tags = np.array(["red", "green", "blue", "amber", "violet"], dtype=object)
    columns: dict[str, Any] = {
        "id": np.arange(start, start + rows, dtype=np.int64),
        "user_id": rng.integers(0, 100_000, rows, dtype=np.int64),
        "dt": pa.array(np.full(rows, dt, dtype=object), pa.string()),
    }
    features = rng.random((len(FEATURES), rows), dtype=np.float32)
    for i, name in enumerate(FEATURES):
        columns[name] = features[i]
    columns["label"] = rng.integers(0, 2, rows, dtype=np.int32)
    columns["tag"] = pa.array(tags[rng.integers(0, len(tags), rows)], pa.string())
    return pa.table(columns, schema=SCHEMA)


def batches_for_date(day_index: int, rows_per_day: int, chunk: int = 262_144) -> Iterator[pa.Table]:
    """One date's rows in chunks (ids are contiguous per date)."""
    start = day_index * rows_per_day
    for offset in range(0, rows_per_day, chunk):
        n = min(chunk, rows_per_day - offset)
        yield make_batch(start + offset, n, DATES[day_index], seed=start + offset)


def timed(fn: Callable[[], T], repeat: int = 3) -> tuple[float, T]:
    """Best wall time of ``repeat`` runs (the first run also warms the page cache)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    assert result is not None
    return best, result


def compare(
    candidate: Callable[[], T], baseline: Callable[[], T], repeat: int = 5
) -> tuple[float, T, float, T]:
    """Best wall times of two functions run alternately, so both see the same machine state.

    Running one side's repeats first and then the other's biases the result: the first
    side pays for page faults of fresh memory and whatever else the machine is doing.
    """
    best_c = best_b = float("inf")
    out_c = out_b = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out_c = candidate()
        best_c = min(best_c, time.perf_counter() - t0)
        t0 = time.perf_counter()
        out_b = baseline()
        best_b = min(best_b, time.perf_counter() - t0)
    assert out_c is not None and out_b is not None
    return best_c, out_c, best_b, out_b


def rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds / 1e6:7.2f}M rows/s"


def build_table(
    root: Path | str,
    rows: int,
    commits_per_day: int = 1,
    storage_options: dict[str, Any] | None = None,
) -> raylake.Table:
    """A fresh partitioned append table of ``rows`` synthetic rows, written day by day.

    ``root`` is a local directory (replaced) or the URI of a new table on a store.
    """
    if isinstance(root, Path) and root.exists():
        shutil.rmtree(root)
    tbl = raylake.create_table(
        str(root), SCHEMA, partition_by=["dt"], storage_options=storage_options
    )
    per_day = rows // len(DATES)
    chunk = per_day // commits_per_day
    t0 = time.perf_counter()
    for day in range(len(DATES)):
        batches = list(batches_for_date(day, per_day, chunk=chunk))
        for batch in batches:
            tbl.write(batch)
    elapsed = time.perf_counter() - t0
    commits = len(DATES) * commits_per_day
    print(f"wrote {rows:,} rows in {elapsed:.2f}s ({rate(rows, elapsed)}), {commits} commits")
    return tbl


def data_files(tbl: raylake.Table) -> list[str]:
    """Full paths of the live data files of the latest snapshot (the baselines read these)."""
    snap = tbl.latest_snapshot()
    assert snap is not None
    live = live_files(read_entries(tbl.file_io, snap.base_manifests, tbl.table_schema))
    return [tbl.file_io.full_path(p) for p in live.column("path").to_pylist()]
