"""Merge-on-read cost of a primary-key table against a plain read of an append table.

Builds a primary-key table (key ``id``, 4 buckets) from the synthetic table of
bench/scan.py (default 4M rows; ``dt`` is an ordinary column here), then makes 3
commits that each upsert a random 25% of the keys with new feature values. In
the same run it writes the same final rows to an append table and times
(reads: median of 5, the two reads interleaved so that both see the same noise):

  - the initial write and each upsert (rows/s),
  - a full merged read of the primary-key table (rows/s of output),
  - a plain read of the append table (same rows, same columns),
  - both reads again after ``compact()``,

and prints the cost ratio merged / plain (lower is better; targets: <= 1.5x
before compaction, <= 1.1x after) in wall seconds, CPU seconds of the process and user
CPU seconds (CPU less the kernel's share). Every merged read starts without cached merge
decisions (raylake.table.pk.late), as a first read in a fresh process would.

    python bench/merge.py [--rows 4000000] [--dir bench/.data/merge]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
from _synthetic import DATES, FEATURES, SCHEMA, batches_for_date, rate

import raylake
from raylake.table.pk.late import clear_decision_cache


def source_rows(rows: int) -> pa.Table:
    per_day = rows // len(DATES)
    return pa.concat_tables(
        [batch for day in range(len(DATES)) for batch in batches_for_date(day, per_day)]
    )


def upsert_batch(base: pa.Table, fraction: float, seed: int) -> pa.Table:
    """A random ``fraction`` of the keys, in random order, with new feature values."""
    rng = np.random.default_rng(seed)
    picked = rng.choice(base.num_rows, int(base.num_rows * fraction), replace=False)
    batch = base.take(pa.array(picked))
    features = rng.random((len(FEATURES), batch.num_rows), dtype=np.float32)
    for i, name in enumerate(FEATURES):
        batch = batch.set_column(batch.schema.get_field_index(name), name, pa.array(features[i]))
    return batch


def timed_write(label: str, fn: Callable[[], object], rows: int) -> None:
    t0 = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - t0
    print(f"{label:<34} {rows:>10,} rows {elapsed:7.2f}s {rate(rows, elapsed)}")


def _user() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def _read(tbl: raylake.Table) -> tuple[float, float, int, float]:
    """Wall seconds, CPU seconds of the process (all threads), rows of a full read and
    user CPU seconds (CPU less the kernel's share: page faults and file reads, which
    swing the most when other jobs share the machine)."""
    wall, cpu, user = time.perf_counter(), time.process_time(), _user()
    rows = tbl.to_arrow().num_rows
    return time.perf_counter() - wall, time.process_time() - cpu, rows, _user() - user


def compare_reads(label: str, pk: raylake.Table, plain: raylake.Table, repeat: int) -> float:
    """Median (and best) of ``repeat`` interleaved runs of each read: both see the same noise.

    CPU seconds are printed beside wall seconds: on a machine shared with other jobs a
    read's wall time depends on what else runs, its CPU time much less.
    """
    merged, plain_reads = [], []
    for _ in range(repeat):
        clear_decision_cache()
        merged.append(_read(pk))
        plain_reads.append(_read(plain))
    assert merged[0][2] == plain_reads[0][2], (merged[0][2], plain_reads[0][2])
    rows = merged[0][2]
    wall = [statistics.median(r[0] for r in side) for side in (merged, plain_reads)]
    cpu = [statistics.median(r[1] for r in side) for side in (merged, plain_reads)]
    user = [statistics.median(r[3] for r in side) for side in (merged, plain_reads)]
    best = [min(r[0] for r in side) for side in (merged, plain_reads)]
    ratio = wall[0] / wall[1]
    print(f"{label} (median of {repeat}; best wall in brackets)")
    for name, i in (("merged read (primary-key table)", 0), ("plain read (append table)", 1)):
        print(
            f"  {name:<32} {wall[i]:7.3f}s {rate(rows, wall[i])}  ({best[i]:.3f}s)"
            f"  CPU {cpu[i]:.3f}s (user {user[i]:.3f}s)"
        )
    print(
        f"  cost ratio merged / plain        {ratio:7.2f}x  ({best[0] / best[1]:.2f}x)"
        f"  CPU {cpu[0] / cpu[1]:.2f}x (user {user[0] / user[1]:.2f}x)"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "merge"))
    parser.add_argument("--upserts", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5, help="median of N reads")
    args = parser.parse_args()
    root = Path(args.dir)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)

    base = source_rows(args.rows)
    pk = raylake.create_table(str(root / "pk"), SCHEMA, primary_key=["id"], buckets=4)
    timed_write("initial write (primary-key table)", lambda: pk.write(base), base.num_rows)
    final = base
    for i in range(args.upserts):
        batch = upsert_batch(base, 0.25, seed=100 + i)
        timed_write(f"upsert {i + 1} (25% of keys)", partial(pk.write, batch), batch.num_rows)
        final = _apply(final, batch)

    plain = raylake.create_table(str(root / "plain"), SCHEMA)
    plain.write(final)
    print()
    before = compare_reads("before compaction", pk, plain, args.repeat)
    t0 = time.perf_counter()
    pk.compact()
    print(f"\ncompact() {time.perf_counter() - t0:.2f}s")
    after = compare_reads("after compaction", pk, plain, args.repeat)
    print(
        f"\nsummary: merged/plain {before:.2f}x before compaction (target <= 1.5x), "
        f"{after:.2f}x after (target <= 1.1x)"
    )


def _apply(state: pa.Table, batch: pa.Table) -> pa.Table:
    """The expected state after an upsert, for the append table (ids are 0..n-1)."""
    ids = state.column("id").to_numpy()
    position = np.empty(len(ids), dtype=np.int64)
    position[ids] = np.arange(len(ids))
    keep = np.ones(len(ids), dtype=bool)
    keep[position[batch.column("id").to_numpy()]] = False
    return pa.concat_tables([state.filter(pa.array(keep)), batch])


if __name__ == "__main__":
    main()
