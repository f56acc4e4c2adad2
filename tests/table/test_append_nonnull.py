"""Append files store columns without nulls as non-null (table/writer.py).

A column stored non-null has no definition levels to decode: about half the decoding
CPU of a nullable float column without nulls. The files of one table then differ in
which columns they mark non-null (a null in one write, none in the next, files written
before this, a column added later): every read, filter, split, change scan, time
travel, a rewrite and the loaders' pieces give back the table's own fields and the
rows that were written.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from stored_reads import split_and_piece_reads

import raylake

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("x", pa.float32()),
        ("n", pa.int64()),
        ("s", pa.string()),
        ("v", pa.list_(pa.int32())),  # nested: always stored as declared
    ]
)


def stored_nullable(tbl: raylake.Table, at: int | None = None) -> list[dict[str, bool]]:
    """Per data file of the snapshot (ordered by its smallest id), which columns it
    stores nullable."""
    root = Path(tbl.uri.removeprefix("file://"))
    found = []
    for split in tbl.scan().at(at).plan():
        for f in split.files:
            parquet = pq.ParquetFile(root / f.path)
            schema = parquet.schema_arrow
            first = parquet.read(columns=["id"]).column(0)[0].as_py()
            found.append((first, {c: schema.field(c).nullable for c in schema.names}))
    return [n for _, n in sorted(found, key=lambda x: x[0])]


def rows(start: int, count: int, x: Any, n: Any, s: Any) -> pa.Table:
    ids = np.arange(start, start + count)
    v = pa.array([[int(i)] for i in ids], pa.list_(pa.int32()))
    return pa.table({"id": ids, "x": x, "n": n, "s": s, "v": v}, schema=SCHEMA)


def bag(pa_table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(
        tuple(tuple(v) if isinstance(v, list) else v for v in r.values())
        for r in pa_table.to_pylist()
    )


def three_writes(tbl: raylake.Table) -> list[pa.Table]:
    """1: no nulls; 2: a null in x after its first row group (the file rolls there);
    3: nulls in every nullable column from the start."""
    rng = np.random.default_rng(5)
    first = rows(0, 300, rng.random(300, dtype=np.float32), np.arange(300), ["a"] * 300)
    x = pa.array([None if i == 150 else float(i) for i in range(200)], pa.float32())
    second = rows(1000, 200, x, np.arange(200), ["b"] * 200)
    third = rows(
        2000,
        100,
        pa.array([None if i % 3 else 0.5 for i in range(100)], pa.float32()),
        pa.array([None if i % 2 else i for i in range(100)], pa.int64()),
        pa.array([None if i % 5 else "c" for i in range(100)], pa.string()),
    )
    for w in (first, second, third):
        tbl.write(w)
    return [first, second, third]


def test_files_that_mark_other_columns_non_null_read_as_written(tmp_path: Path) -> None:
    options = {"write.row-group-rows": "64"}
    tbl = raylake.create_table(str(tmp_path / uuid.uuid4().hex), SCHEMA, options=options)
    writes = three_writes(tbl)
    nullable = stored_nullable(tbl)
    everything_stored_non_null = {"id": False, "x": False, "n": False, "s": False, "v": True}
    assert nullable[0] == everything_stored_non_null
    assert {**everything_stored_non_null, "x": True} in nullable  # rolled at the null
    assert nullable[-1] == {"id": False, "x": True, "n": True, "s": True, "v": True}
    expected = bag(pa.concat_tables(writes))

    whole = tbl.to_arrow()
    assert whole.schema == SCHEMA
    assert bag(whole) == expected
    assert bag(pa.Table.from_batches(list(tbl.to_batches()), schema=SCHEMA)) == expected
    for read in split_and_piece_reads(tbl, SCHEMA):
        assert bag(read) == expected

    everything = pa.concat_tables(writes).to_pylist()
    assert bag(tbl.to_arrow(filter="x > 0.25")) == bag(
        pa.Table.from_pylist(
            [r for r in everything if r["x"] is not None and r["x"] > 0.25], SCHEMA
        )
    )
    nulls = tbl.to_arrow(filter="n IS NULL")
    assert nulls.num_rows == 50 and nulls.schema == SCHEMA
    assert tbl.to_arrow(columns=["x", "s"]).schema == pa.schema(
        [SCHEMA.field("x"), SCHEMA.field("s")]
    )
    assert bag(tbl.to_arrow(snapshot_id=1)) == bag(writes[0])
    changes = tbl.changes(1).to_arrow()
    assert changes.schema == SCHEMA
    assert bag(changes) == bag(pa.concat_tables(writes[1:]))
    assert tbl.to_pandas()["x"].isna().sum() == 1 + 66

    tbl.write(tbl.to_arrow(), mode="overwrite")  # rewritten from what was read
    assert tbl.to_arrow().schema == SCHEMA
    assert bag(tbl.to_arrow()) == expected


def test_a_column_added_later_reads_as_null_in_files_stored_non_null(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / uuid.uuid4().hex), SCHEMA)
    first = rows(0, 10, np.ones(10, np.float32), np.arange(10), ["a"] * 10)
    tbl.write(first)
    with tbl.update_schema() as update:
        update.add_column("y", pa.float64())
    later = rows(10, 10, np.ones(10, np.float32), np.arange(10), ["b"] * 10)
    tbl.write(later.append_column("y", pa.array(np.arange(10, dtype=np.float64))))
    out = tbl.to_arrow()
    assert out.schema == tbl.schema == SCHEMA.append(pa.field("y", pa.float64()))
    assert out.sort_by("id").column("y").null_count == 10
    assert stored_nullable(tbl)[1]["y"] is False


def test_nulls_moving_between_columns_close_a_file_once_per_column(tmp_path: Path) -> None:
    """Row groups of one write with a null now in x, now in n: each column's first null
    closes a file, and the next files store it nullable, so the write makes 3 files,
    not one per row group."""
    options = {"write.row-group-rows": "10"}
    tbl = raylake.create_table(str(tmp_path / uuid.uuid4().hex), SCHEMA, options=options)
    groups = 8
    x = [None if i % 10 == 0 and (i // 10) % 2 == 1 else 1.0 for i in range(10 * groups)]
    n = [None if i % 10 == 0 and (i // 10) % 2 == 0 and i else i for i in range(10 * groups)]
    written = rows(0, 10 * groups, pa.array(x, pa.float32()), pa.array(n, pa.int64()), ["a"] * 80)
    tbl.write(written)
    nullable = stored_nullable(tbl)
    assert [(f["x"], f["n"]) for f in nullable] == [(False, False), (True, False), (True, True)]
    assert tbl.to_arrow().schema == SCHEMA
    assert bag(tbl.to_arrow()) == bag(written)
