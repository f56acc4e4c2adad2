"""Planning time for tables of 10,000 and 100,000 data files, warm and cold.

Planning reads manifests only, never a data file, so the table's metadata is built
directly: synthetic DataFile entries (the 24-column schema of bench/_synthetic.py,
4 daily partitions, per-file min/max for every column) committed through the real
committer in commits of a few thousand files, as a busy ingest table accumulates
them. No data file exists; none is opened. For each size it times, best of 5:

  - ``scan().plan()`` of the whole table, warm (manifests cached in the process),
  - a selective filter (one day and an id range: ~0.1% of the files), warm,
  - both cold (``clear_caches()`` first, as in a new process),
  - the baseline: decoding the same manifests whole with ``pyarrow.parquet``, the
    floor for any planner that reads all statistics (ratio > 1: raylake is faster).

Target: <= 1 s for 100,000 files warm.

    python bench/plan.py [--files 10000 100000] [--dir bench/.data/plan]
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
from _synthetic import DATES, SCHEMA

import raylake
from raylake.format.manifest import DataFile
from raylake.table import CommitMessage, clear_caches

ROWS_PER_FILE = 1000
FILES_PER_COMMIT = 5000


def synthetic_file(i: int, day: int) -> DataFile:
    lo = i * ROWS_PER_FILE
    stats: dict[str, dict[str, object]] = {
        "id": {"min": lo, "max": lo + ROWS_PER_FILE - 1, "null_count": 0},
        "user_id": {"min": 0, "max": 99_999, "null_count": 0},
        "dt": {"min": DATES[day], "max": DATES[day], "null_count": 0},
        "label": {"min": 0, "max": 1, "null_count": 0},
        "tag": {"min": "amber", "max": "violet", "null_count": 0},
    }
    for name in SCHEMA.names:
        if name.startswith("f"):
            stats[name] = {"min": 0.0, "max": 1.0, "null_count": 0}
    return DataFile(
        path=f"data/dt={DATES[day]}/bucket-0/synthetic-{i:08d}.parquet",
        file_size=80_000,
        row_count=ROWS_PER_FILE,
        partition=(DATES[day],),
        row_group_rows=(ROWS_PER_FILE,),
        row_group_sizes=(100_000,),
        column_sizes=tuple([4_000] * len(SCHEMA)),
        stats=stats,
    )


def build(root: Path, files: int) -> raylake.Table:
    if root.exists():
        shutil.rmtree(root)
    tbl = raylake.create_table(str(root), SCHEMA, partition_by=["dt"])
    per_day = files // len(DATES)
    t0 = time.perf_counter()
    for start in range(0, files, FILES_PER_COMMIT):
        batch = [
            synthetic_file(i, min(i // per_day, len(DATES) - 1))
            for i in range(start, min(start + FILES_PER_COMMIT, files))
        ]
        tbl.commit([CommitMessage(new_files=tuple(batch))])
    snap = tbl.latest_snapshot()
    assert snap is not None
    print(
        f"built {files:,} files in {time.perf_counter() - t0:.1f}s: {snap.id} commits, "
        f"{len(snap.base_manifests)} base manifests"
    )
    return tbl


def best(fn: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def decode_all(tbl: raylake.Table) -> None:
    snap = tbl.latest_snapshot()
    assert snap is not None
    for meta in snap.base_manifests:
        pq.read_table(tbl.file_io.full_path(meta.path))


def run(tbl: raylake.Table, files: int) -> None:
    per_day = files // len(DATES)
    lo = (per_day + per_day // 2) * ROWS_PER_FILE
    selective = f"dt = '{DATES[1]}' and id >= {lo} and id < {lo + ROWS_PER_FILE * files // 1000}"

    def plan(flt: str | None, cold: bool) -> Callable[[], object]:
        def go() -> object:
            if cold:
                clear_caches()
                return raylake.open_table(tbl.uri).scan(filter=flt).plan()
            return tbl.scan(filter=flt).plan()

        return go

    full_splits = len(tbl.scan().plan())
    few = sum(len(s.files) for s in tbl.scan(filter=selective).plan())
    baseline = best(lambda: decode_all(tbl))
    print(f"{'case':<34} {'time':>9}  vs decoding all manifests with pyarrow ({baseline:.3f}s)")
    for name, flt, cold in [
        (f"full plan, warm ({full_splits} splits)", None, False),
        (f"selective plan, warm ({few} files)", selective, False),
        ("full plan, cold", None, True),
        ("selective plan, cold", selective, True),
    ]:
        seconds = best(plan(flt, cold))
        print(f"{name:<34} {seconds:>8.3f}s  {baseline / seconds:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "plan"))
    args = parser.parse_args()
    for files in args.files:
        print(f"\n### {files:,} data files")
        tbl = build(Path(args.dir) / f"files-{files}", files)
        run(tbl, files)


if __name__ == "__main__":
    main()
