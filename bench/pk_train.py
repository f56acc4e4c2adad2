"""A loader epoch over a primary-key table against the same rows in an append table.

bench/train.py's ``--pk-only`` case (2M rows; the primary-key table of bench/merge.py:
4 buckets, then 3 commits each upserting 25% of the keys; in-process
LakeIterableDataset, 16 float32 features + the int32 label, batches of 1024), with
the two epochs interleaved and the median of ``--repeat`` reported in wall seconds
and in CPU seconds of the process (all threads): on a machine shared with other jobs
an epoch's wall time depends on what else runs, its CPU time much less. Also the
time to make the dataset (planning and exact counts; for the primary-key table the
counting read decides each section, and the epoch reuses those decisions).

    python bench/pk_train.py [--rows 2000000] [--dir bench/.data/pk_train] [--repeat 5] [--reuse]

``--reuse`` reads the tables an earlier run left in ``--dir`` (same ``--rows``) instead
of writing them again: two versions of the code can then be run alternately on the
same files.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from _synthetic import build_table, rate
from train import build_pk_table, lake_torch

from raylake import open_table


def _user() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def _epoch(run: Callable[[], int]) -> tuple[float, float, int, float]:
    """Wall, CPU (all threads) and user CPU seconds (less the kernel's share) of an epoch."""
    wall, cpu, user = time.perf_counter(), time.process_time(), _user()
    rows = run()
    return time.perf_counter() - wall, time.process_time() - cpu, rows, _user() - user


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "pk_train"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="read the tables already in --dir")
    args = parser.parse_args()
    root = Path(args.dir)
    if args.reuse and (root / "pk").exists() and (root / "append").exists():
        append, pk = open_table(str(root / "append")), open_table(str(root / "pk"))
        # (The primary-key table's rows are checked by its epochs: counting it here
        # would decide its parts before the dataset is made.)
        assert append.count() == args.rows, "tables of another --rows"
    else:
        append = build_table(root / "append", args.rows)
        pk = build_pk_table(root / "pk", args.rows)

    import raylake.train.torch  # noqa: F401  (imports torch outside the timings)

    made = {}
    runs = {}
    for name, tbl in (("primary-key", pk), ("append", append)):
        t0 = time.perf_counter()
        runs[name] = lake_torch(tbl, shuffle=False)
        made[name] = time.perf_counter() - t0
    results: dict[str, list[tuple[float, float, int, float]]] = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm: imports, page cache
    for _ in range(args.repeat):
        for name, run in runs.items():
            results[name].append(_epoch(run))
    print(f"\nepochs, median of {args.repeat} (interleaved)")
    wall, cpu, user = {}, {}, {}
    for name, found in results.items():
        assert all(rows == args.rows for _, _, rows, _ in found), found
        wall[name] = statistics.median(w for w, _, _, _ in found)
        cpu[name] = statistics.median(c for _, c, _, _ in found)
        user[name] = statistics.median(u for _, _, _, u in found)
        print(
            f"  {name + ' table':<20} {wall[name]:7.3f}s {rate(args.rows, wall[name])}"
            f"  CPU {cpu[name]:.3f}s (user {user[name]:.3f}s)"
            f"  (dataset made in {made[name]:.2f}s)"
        )
    print(
        f"summary: primary-key epoch at {wall['append'] / wall['primary-key']:.2f}x the append"
        f" table's rate (CPU {cpu['append'] / cpu['primary-key']:.2f}x,"
        f" user {user['append'] / user['primary-key']:.2f}x; target >= 0.7x)"
    )


if __name__ == "__main__":
    main()
