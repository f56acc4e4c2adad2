"""Table.changes against the same diff computed from two full reads (issue 17).

A primary-key table of 1M keys (8 buckets), then one commit that updates 4% of the
keys, inserts 0.5% new ones and deletes 0.5% (5% changed). Baseline: ``to_arrow`` at
both snapshots and a pyarrow full outer join on the key that keeps the keys whose row
differs. raylake: ``Table.changes(1, 2, include_row_kind=True).to_arrow()``.
Both give the same changed keys (checked). Cases:

- ``changelog-producer=none``: changes from the buckets' files (only the keys of the
  new files are looked up in the old ones);
- ``changelog-producer=lookup``: changes from the changelog files;
- after a full compaction in between (no changelog): both states merged per bucket.

    python bench/changes.py [--keys 1000000] [--repeat 3]
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
import pyarrow.compute as pc

import raylake
from raylake.table import Table

VALUES = [f"f{i}" for i in range(6)]
SCHEMA = pa.schema([("id", pa.int64()), *((c, pa.float64()) for c in VALUES), ("tag", pa.string())])


def rows(ids: np.ndarray, version: int) -> pa.Table:
    data = {c: (ids * (i + 1) + version).astype(np.float64) for i, c in enumerate(VALUES)}
    tags = pc.cast(pa.array(ids % 1000), pa.string())
    return pa.table({"id": ids, **data, "tag": tags}, schema=SCHEMA)


def build(root: Path, n: int, producer: str, compact: bool) -> Table:
    tbl = raylake.create_table(
        str(root / f"t-{producer}-{compact}"),
        SCHEMA,
        primary_key=["id"],
        buckets=8,
        options={"changelog-producer": producer},
    )
    tbl.write(rows(np.arange(n, dtype=np.int64), 0))
    rng = np.random.default_rng(1)
    chosen = rng.choice(n, size=int(n * 0.045), replace=False).astype(np.int64)
    updated, deleted = chosen[: int(n * 0.04)], chosen[int(n * 0.04) :]
    inserted = np.arange(n, n + int(n * 0.005), dtype=np.int64)
    if compact:
        tbl.compact(full=True)  # snapshot 2: same rows, new files
    tbl.write(rows(np.concatenate([updated, inserted]), 1))
    tbl.delete(pa.table({"id": deleted}))
    return tbl


def baseline(tbl: Table, start: int, end: int) -> int:
    """Changed keys from two full reads and a join."""
    before = tbl.to_arrow(snapshot_id=start)
    after = tbl.to_arrow(snapshot_id=end)
    joined = before.join(after, "id", join_type="full outer", left_suffix="_b", right_suffix="_a")
    differs = pc.or_(pc.is_null(joined.column("f0_b")), pc.is_null(joined.column("f0_a")))
    for c in [*VALUES, "tag"]:
        ne = pc.fill_null(pc.not_equal(joined.column(f"{c}_b"), joined.column(f"{c}_a")), False)
        differs = pc.or_(differs, ne)
    return joined.filter(differs).num_rows


def with_changes(tbl: Table, start: int, end: int) -> int:
    changed = tbl.changes(start, end, include_row_kind=True).to_arrow()
    return pc.count_distinct(changed.column("id")).as_py()


def timed(
    fn: Callable[[Table, int, int], int], tbl: Table, start: int, end: int
) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = fn(tbl, start, end)
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="raylake-bench-changes-"))
    try:
        print(f"{args.keys:,} keys, 5% changed; best of {args.repeat}")
        print("| case | Table.changes | two to_arrow + join | ratio | changed keys |")
        print("| --- | --- | --- | --- | --- |")
        for producer, compact in (("none", False), ("lookup", False), ("none", True)):
            tbl = build(root, args.keys, producer, compact)
            start, end = 1, tbl.latest_snapshot().id  # type: ignore[union-attr]
            ours, theirs = 0.0, 0.0
            for _ in range(args.repeat):  # alternate, so both see the same machine state
                t, got = timed(with_changes, tbl, start, end)
                b, want = timed(baseline, tbl, start, end)
                assert got == want, (got, want)
                ours = t if not ours else min(ours, t)
                theirs = b if not theirs else min(theirs, b)
            case = f"producer={producer}" + (", compacted in between" if compact else "")
            print(
                f"| {case} | {ours * 1000:.0f} ms | {theirs * 1000:.0f} ms | "
                f"**{theirs / ours:.2f}x** | {got:,} |"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
