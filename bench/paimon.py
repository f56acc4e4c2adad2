"""Paimon tables read by pypaimon 2.1 and by raylake, back to back (issue 19).

pypaimon writes the tables and times its own reads in its own environment
(bench/paimon_peer.py, run with ``--paimon-python``, by default the one
``make paimon-env`` builds); raylake reads the same tables in this process:

  - a ``--append-rows`` (4M) row append table (bucket -1): raylake's ``to_arrow`` against
    ``pyarrow.dataset`` over the same Parquet files (target >= 0.9x), and pypaimon;
  - a 4-bucket primary-key table of ``--pk-rows`` (1M) rows after 3 upsert commits of
    25% of the keys: raylake's merged read against pypaimon's (target >= 50x), and
    against raylake's own format on the same shape (target: within 2x), like with like:
    the same rows, buckets, commits, files (16 at level 0, one row group each, printed
    for both sides) and codec. pypaimon writes zstd (Paimon's default) and, as table
    ``pk_snappy``, snappy (raylake's default); each is compared with raylake's own
    table in the same codec, and the mixed pair (each writer's default) is printed too;
  - the same Paimon files decoded by pyarrow without merging: the columns the merged
    read needs (the floor of any reader of those files: pypaimon writes them with
    dictionary-encoded floats and keys, which decode slower than raylake's own files of
    the same rows) and every column;
  - torch batches of 1024 (16 features + label) from the Paimon PK table: raylake's
    LakeIterableDataset against pypaimon's own torch dataset (``TableRead.to_torch``:
    its tensor batches over all rows, one run of ~40 s, and its default Python rows
    batched by a DataLoader over the first ``--torch-row-limit`` rows), and the same
    loader on raylake's own table (zstd). pypaimon's environment needs torch
    (``make paimon-env``).

Reads are best of ``--repeat`` (pypaimon: best of 2); raylake's and pyarrow's runs are
interleaved. Both readers' rows are checked to be equal.

    python bench/paimon.py [--append-rows 4000000] [--pk-rows 1000000] [--dir bench/.data/paimon]
                           [--pk-only] [--skip-pypaimon]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from _synthetic import compare, rate, timed

import raylake

HERE = Path(__file__).resolve().parent
PEER = HERE / "paimon_peer.py"


def peer(python: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [python, str(PEER), *args], check=True, capture_output=True, text=True
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def ensure_tables(python: str, warehouse: Path, append_rows: int, pk_rows: int) -> None:
    warehouse.mkdir(parents=True, exist_ok=True)
    marker = warehouse / f"done-{append_rows}-{pk_rows}"
    if not marker.exists():
        for mode, n in (("write-append", append_rows), ("write-pk", pk_rows)):
            written = peer(python, mode, str(warehouse), str(n))
            print(f"pypaimon {mode:<13} {n:>10,} rows {written['seconds']:7.2f}s")
        marker.write_text("")
    # The same primary-key table in snappy, raylake's default codec (like with like).
    marker = warehouse / f"done-pk-snappy-{pk_rows}"
    if not marker.exists():
        written = peer(python, "write-pk", str(warehouse), str(pk_rows), "snappy")
        print(f"pypaimon write-pk snappy {pk_rows:>10,} rows {written['seconds']:7.2f}s")
        marker.write_text("")


def own_format_twin(root: Path, pk_rows: int, compression: str = "snappy") -> raylake.Table:
    """raylake's own primary-key table of the same shape: 4 buckets, 3 upserts of 25%
    (raylake writes snappy by default; Paimon zstd: ``compression`` picks the codec)."""
    sys.path.insert(0, str(HERE))
    from paimon_peer import rows  # numpy/pyarrow only: importable here too

    path = (
        root / f"own-pk-{pk_rows}"
        if compression == "snappy"
        else root / f"own-pk-{pk_rows}-{compression}"
    )
    if (path / "snapshot").exists():
        return raylake.open_table(str(path))
    data = rows(np.arange(pk_rows), 0, True)
    options = {"write.compression": compression}
    tbl = raylake.create_table(
        str(path), data.schema, primary_key=["id"], buckets=4, options=options
    )
    tbl.write(data)
    rng = np.random.default_rng(1)
    for commit in range(1, 4):
        keys = np.sort(rng.choice(pk_rows, pk_rows // 4, replace=False))
        tbl.write(rows(keys, commit, True))
    return tbl


def shape(tbl: raylake.Table) -> str:
    """Files, row groups and levels of a table's current snapshot, and its codec."""
    files = [f for split in tbl.scan().plan() for f in split.files]
    groups, codecs = 0, set()
    for f in files:
        meta = pq.ParquetFile(tbl.file_io.full_path(f.path)).metadata
        groups += meta.num_row_groups
        codecs |= {meta.row_group(0).column(j).compression for j in range(meta.num_columns)}
    levels = sorted({f.level for f in files})
    return f"{len(files)} files, {groups} row groups, levels {levels}, {'/'.join(sorted(codecs))}"


def torch_rows_per_second(tbl: raylake.Table, repeat: int) -> float:
    from raylake.train.torch_iterable import LakeIterableDataset

    features = [f"f{i}" for i in range(16)]
    loader = LakeIterableDataset(
        tbl, feature_columns=features, label_column="label", batch_size=1024, shuffle=False
    )
    seconds, n = timed(lambda: sum(len(b[1]) for b in loader), repeat)
    return n / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--append-rows", type=int, default=4_000_000)
    parser.add_argument("--pk-rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--torch-row-limit", type=int, default=102_400)
    parser.add_argument("--dir", default=str(HERE / ".data" / "paimon"))
    parser.add_argument("--paimon-python", default=str(HERE.parent / ".venv-paimon/bin/python"))
    parser.add_argument("--pk-only", action="store_true", help="only the primary-key reads")
    parser.add_argument("--skip-pypaimon", action="store_true", help="no pypaimon reads")
    args = parser.parse_args()
    root = Path(args.dir)
    warehouse = root / "warehouse"
    ensure_tables(args.paimon_python, warehouse, args.append_rows, args.pk_rows)

    if not args.pk_only:
        append_table(args, warehouse)
    pk_tables(args, root, warehouse)


def append_table(args: argparse.Namespace, warehouse: Path) -> None:
    # -- append table: raylake vs pyarrow on the same files, and pypaimon -----------------
    append = raylake.open_table(str(warehouse / "bench.db" / "append"))
    paths = [append.file_io.full_path(p) for s in append.scan().plan() for p in s.paths]
    ours, got, theirs, want = compare(
        lambda: append.to_arrow(),
        lambda: ds.dataset(paths, format="parquet").to_table(),
        args.repeat,
    )
    assert got.num_rows == want.num_rows == args.append_rows
    pyp = peer(args.paimon_python, "read", str(warehouse), "append", "2")
    print(f"\nappend table, {args.append_rows:,} rows, {len(paths)} files")
    print(f"  raylake to_arrow          {ours:7.3f}s {rate(got.num_rows, ours)}")
    print(f"  pyarrow.dataset           {theirs:7.3f}s {rate(want.num_rows, theirs)}")
    print(f"  pypaimon to_arrow         {pyp['seconds']:7.3f}s {rate(pyp['rows'], pyp['seconds'])}")
    print(f"  raylake / pyarrow speed   {theirs / ours:7.2f}x  (target >= 0.9x)")
    print(f"  raylake / pypaimon speed  {pyp['seconds'] / ours:7.2f}x")


def pk_tables(args: argparse.Namespace, root: Path, warehouse: Path) -> None:
    # -- primary-key table: raylake vs pypaimon, and vs raylake's own format --------------
    # Like with like: the same rows, buckets and commits, 16 level-0 files of one row
    # group each on both sides, and the same codec (docs/benchmarks.md, issue 19).
    pk = raylake.open_table(str(warehouse / "bench.db" / "pk"))
    pk_snappy = raylake.open_table(str(warehouse / "bench.db" / "pk_snappy"))
    own = own_format_twin(root, args.pk_rows)
    own_zstd = own_format_twin(root, args.pk_rows, "zstd")
    print(f"\nprimary-key table, 4 buckets, {args.pk_rows:,} keys after 3 upserts of 25%")
    for name, tbl in (("Paimon", pk), ("own", own_zstd)):
        print(f"  {name + ' files':<26}{shape(tbl)}")
    ours, got, mine, own_rows = compare(
        lambda: pk.to_arrow(), lambda: own_zstd.to_arrow(), args.repeat
    )
    assert got.num_rows == own_rows.num_rows == args.pk_rows
    assert got.sort_by("id").equals(own_rows.sort_by("id").cast(got.schema)), "formats disagree"
    print(f"  raylake (Paimon, zstd)    {ours:7.3f}s {rate(got.num_rows, ours)}")
    print(f"  raylake (own, zstd)       {mine:7.3f}s {rate(own_rows.num_rows, mine)}")
    print(f"  Paimon / own, both zstd   {ours / mine:7.2f}x  (target <= 2x)")
    zstd_read = ours
    ours, got_snappy, mine, _ = compare(
        lambda: pk_snappy.to_arrow(), lambda: own.to_arrow(), args.repeat
    )
    assert got_snappy.sort_by("id").equals(got.sort_by("id"))
    print(f"  raylake (Paimon, snappy)  {ours:7.3f}s {rate(got.num_rows, ours)}")
    print(f"  raylake (own, snappy)     {mine:7.3f}s {rate(own_rows.num_rows, mine)}")
    print(f"  Paimon / own, both snappy {ours / mine:7.2f}x  (target <= 2x)")
    print(f"  Paimon zstd / own snappy  {zstd_read / mine:7.2f}x  (each writer's default codec)")
    # The floor: pyarrow decoding, without merging, every stored row of the columns the
    # merged read needs (the values and _VALUE_KIND; not the _KEY_id copy, not
    # _SEQUENCE_NUMBER), and of every stored column.
    pk_paths = [pk.file_io.full_path(p) for s in pk.scan().plan() for p in s.paths]
    needed = [*pk.schema.names, "_VALUE_KIND"]
    ours, _, floor, decoded = compare(
        lambda: pk.to_arrow(),
        lambda: ds.dataset(pk_paths, format="parquet").to_table(columns=needed),
        args.repeat,
    )
    every, _ = timed(lambda: ds.dataset(pk_paths, format="parquet").to_table(), args.repeat)
    print(
        f"  pyarrow decode, no merge  {floor:7.3f}s {rate(decoded.num_rows, floor)} (stored rows)"
    )
    print(f"  merged read / decode      {ours / floor:7.2f}x")
    print(f"  decode of every column    {every:7.3f}s (with _KEY_id, _SEQUENCE_NUMBER)")
    if not args.skip_pypaimon:
        out = root / "pypaimon-pk.parquet"
        pyp = peer(args.paimon_python, "read", str(warehouse), "pk", "2", str(out))
        assert got.sort_by("id").equals(pq.read_table(out).cast(got.schema)), "readers disagree"
        print(
            f"  pypaimon                  {pyp['seconds']:7.3f}s {rate(pyp['rows'], pyp['seconds'])}"
        )
        print(f"  raylake / pypaimon speed  {pyp['seconds'] / zstd_read:7.1f}x  (target >= 50x)")
    if args.pk_only:
        return

    # -- torch batches ------------------------------------------------------------------
    t0 = time.perf_counter()
    paimon_rate = torch_rows_per_second(pk, 3)
    own_rate = torch_rows_per_second(own_zstd, 3)
    print(f"\ntorch batches of 1024 (16 features + label), {time.perf_counter() - t0:.0f}s")
    print(f"  Paimon table              {paimon_rate / 1e6:7.2f}M rows/s")
    print(f"  raylake's own table, zstd {own_rate / 1e6:7.2f}M rows/s")
    print(f"  Paimon / own              {paimon_rate / own_rate:7.2f}x")
    theirs = peer(args.paimon_python, "torch", str(warehouse), "pk", "1", str(args.torch_row_limit))
    their_rate = theirs["rows"] / theirs["seconds"]
    row_rate = theirs["row_format_rows"] / theirs["row_format_seconds"]
    print(f"  pypaimon to_torch tensors {their_rate / 1e6:7.2f}M rows/s ({theirs['rows']:,} rows)")
    print(
        f"  pypaimon to_torch rows    {row_rate / 1e6:7.2f}M rows/s "
        f"(DataLoader, first {theirs['row_format_rows']:,} rows)"
    )
    print(f"  raylake / pypaimon tensors{paimon_rate / their_rate:7.1f}x")
    print(f"  raylake / pypaimon rows   {paimon_rate / row_rate:7.1f}x")


if __name__ == "__main__":
    main()
