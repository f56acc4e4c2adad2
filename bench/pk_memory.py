"""Peak memory of reading a primary-key table against an append table of the same rows.

Builds, for each ``--rows`` value, a primary-key table (key ``id``, ``--buckets``
buckets; one write of every row, then one commit upserting a random 25% of the
keys with new feature values) and an append table holding the same final rows.
Columns: int64 ``id``, 16 float32 features, int32 ``label``. Then, each in a fresh
process (so that peaks do not mix), it runs

  - one LakeIterableDataset epoch (in-process, batches of 1024, features stacked),
  - one ``to_batches()`` pass over all columns,

and prints each process's peak RSS, its RSS after imports, the primary-key / append
ratio of the peaks (target <= 1.3x for the loader), and rows/s. Compare the figures
of different ``--rows`` to see whether the peak stays flat as the buckets grow.

    python bench/pk_memory.py [--rows 20000000 100000000] [--buckets 8] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

FEATURES = [f"f{i}" for i in range(16)]
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        *[(name, pa.float32()) for name in FEATURES],
        ("label", pa.int32()),
    ]
)
CHUNK = 1 << 20


def rows_of(ids: np.ndarray, version: np.ndarray | int) -> pa.Table:
    """Deterministic rows for ids at a version (0: the first write, 1: the upsert)."""
    mixed = ids.astype(np.uint64) * np.uint64(2654435761) + np.uint64(97) * np.uint64(version)
    columns: dict[str, object] = {"id": ids}
    for j, name in enumerate(FEATURES):
        columns[name] = ((mixed + np.uint64(j)) % np.uint64(1_000_003)).astype(np.float32)
    columns["label"] = (mixed % np.uint64(2)).astype(np.int32)
    return pa.table(columns, schema=SCHEMA)


def upserted(rows: int) -> np.ndarray:
    mask = np.zeros(rows, dtype=bool)
    mask[np.random.default_rng(0).choice(rows, rows // 4, replace=False)] = True
    return mask


def base_chunks(rows: int) -> Iterator[pa.Table]:
    for start in range(0, rows, CHUNK):
        yield rows_of(np.arange(start, min(start + CHUNK, rows)), 0)


def upsert_chunks(rows: int, mask: np.ndarray) -> Iterator[pa.Table]:
    ids = np.flatnonzero(mask)
    np.random.default_rng(1).shuffle(ids)
    for start in range(0, len(ids), CHUNK):
        yield rows_of(ids[start : start + CHUNK], 1)


def final_chunks(rows: int, mask: np.ndarray) -> Iterator[pa.Table]:
    for start in range(0, rows, CHUNK):
        ids = np.arange(start, min(start + CHUNK, rows))
        yield rows_of(ids, mask[ids].astype(np.int64))


def build(root: Path, rows: int, buckets: int) -> None:
    import raylake

    if root.exists():
        shutil.rmtree(root)
    t0 = time.perf_counter()
    mask = upserted(rows)
    pk = raylake.create_table(str(root / "pk"), SCHEMA, primary_key=["id"], buckets=buckets)
    pk.write(base_chunks(rows))
    pk.write(upsert_chunks(rows, mask))
    plain = raylake.create_table(str(root / "append"), SCHEMA)
    plain.write(final_chunks(rows, mask))
    print(f"built {rows:,} rows in {time.perf_counter() - t0:.1f}s", flush=True)


def peak_mb() -> float:
    """This process's peak RSS. Not ``ru_maxrss``: Linux carries the peak of the
    forking parent (the builder, with its tables in memory) across ``exec``."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(uri: str, how: str) -> None:
    """One pass in this (fresh) process; prints a JSON line."""
    import torch  # noqa: F401  (imported before the baseline RSS is taken)

    import raylake
    from raylake.train.torch import LakeIterableDataset

    tbl = raylake.open_table(uri)
    after_imports = peak_mb()
    t0 = time.perf_counter()
    n = 0
    if how == "loader":
        ds = LakeIterableDataset(
            tbl, feature_columns=FEATURES, label_column="label", batch_size=1024
        )
        for _, y in ds:
            n += len(y)
    else:
        for batch in tbl.to_batches():
            n += batch.num_rows
    seconds = time.perf_counter() - t0
    print(json.dumps({"rows": n, "peak": peak_mb(), "imports": after_imports, "s": seconds}))


def run(uri: str, how: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", uri, how],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000_000])
    parser.add_argument("--buckets", type=int, default=8)
    parser.add_argument("--dir", default=str(Path(__file__).parent / ".data" / "pk_memory"))
    parser.add_argument("--keep", action="store_true", help="keep the tables")
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(*args.measure)
        return
    print(f"{'rows':>12} {'read':<8} {'table':<8} {'peak MB':>9} {'imports':>8} {'rows/s':>10}")
    for rows in args.rows:
        root = Path(args.dir) / str(rows)
        build(root, rows, args.buckets)
        for how in ("loader", "batches"):
            peaks = {}
            for kind in ("pk", "append"):
                r = run(str(root / kind), how)
                assert r["rows"] == rows, (r, rows)
                peaks[kind] = r["peak"]
                rate = f"{rows / r['s'] / 1e6:.2f}M"
                print(
                    f"{rows:>12,} {how:<8} {kind:<8} {r['peak']:>9.0f} {r['imports']:>8.0f} "
                    f"{rate:>10}",
                    flush=True,
                )
            print(f"{'':>12} {how:<8} peak ratio pk/append {peaks['pk'] / peaks['append']:.2f}x")
        if not args.keep:
            shutil.rmtree(root)


if __name__ == "__main__":
    main()
