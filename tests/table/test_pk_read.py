"""Reading primary-key tables: bucket-aligned splits, pushdown, counts, filesystems, key types."""

from __future__ import annotations

import datetime
import pickle
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake.table.pk.read import exact_row_count, overlap_sections

SCHEMA = pa.schema(
    [
        pa.field("dt", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        ("v", pa.float32()),
    ]
)


def make(uri: str, **kwargs: Any) -> raylake.Table:
    kwargs.setdefault("primary_key", ["dt", "id"])
    kwargs.setdefault("partition_by", ["dt"])
    kwargs.setdefault("buckets", 3)
    return raylake.create_table(uri, SCHEMA, **kwargs)


def day(dt: str, ids: Any, v: float) -> pa.Table:
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table(
        {"dt": [dt] * len(ids), "id": ids, "v": np.full(len(ids), v, np.float32)}, schema=SCHEMA
    )


def test_splits_are_bucket_aligned_and_small(tmp_path: Path) -> None:
    tbl = make(str(tmp_path / "t"))
    tbl.write(pa.concat_tables([day("a", range(300), 1), day("b", range(300), 1)]))
    tbl.write(day("a", range(0, 300, 2), 2))
    splits = tbl.scan().plan()
    assert len({(s.partition, s.bucket) for s in splits}) == len(splits) == 6
    assert all(s.needs_merge for s in splits)
    assert max(len(pickle.dumps(s)) for s in splits) < 2_000
    total = sum(pa.Table.from_batches(list(tbl.read_split(s))).num_rows for s in splits)
    assert total == 600 == tbl.count()
    a_splits = tbl.scan(filter="dt = 'a'").plan()
    assert {s.partition for s in a_splits} == {("a",)}


def test_large_buckets_split_between_sections(tmp_path: Path) -> None:
    tbl = make(str(tmp_path / "t"), partition_by=[], buckets=1)
    for start in range(0, 400, 100):  # four disjoint key ranges: four sections
        tbl.write(day("a", range(start, start + 100), 1))
    splits = tbl.scan().with_split_size(1).plan()
    assert len(splits) == 4 and {s.bucket for s in splits} == {0}
    assert tbl.scan().with_split_size(1).count() == 400 == tbl.to_arrow().num_rows


def test_count_uses_metadata_when_nothing_overlaps(tmp_path: Path) -> None:
    tbl = make(str(tmp_path / "t"), partition_by=[], buckets=2)
    tbl.write(day("a", range(100), 1))
    tbl.delete({"dt": ["a"] * 3, "id": [1, 2, 3]})
    assert tbl.count() == 97
    tbl.compact(full=True)
    assert all(exact_row_count(s) is not None for s in tbl.scan().plan())
    assert tbl.count() == 97 == tbl.to_arrow().num_rows


def test_key_filters_prune_files_and_rows(tmp_path: Path) -> None:
    tbl = make(str(tmp_path / "t"), partition_by=[], buckets=1)
    for start in range(0, 400, 100):
        tbl.write(day("a", range(start, start + 100), 1))
    tbl.write(day("a", [150], 2))
    splits = tbl.scan(filter="id >= 120 and id < 130").plan()
    assert sum(len(s.files) for s in splits) == 1  # only the file of ids 100..199
    result = tbl.to_arrow(filter="id >= 120 and id < 160 and v > 1.5")
    assert result.column("id").to_pylist() == [150]


def test_sections_group_transitively_overlapping_files() -> None:
    class F:
        def __init__(self, lo: int, hi: int) -> None:
            self.min_key, self.max_key = (lo,), (hi,)

    files = [F(0, 5), F(10, 20), F(4, 9), F(30, 40), F(21, 22)]
    sections = overlap_sections(files)
    assert [[f.min_key[0] for f in s] for s in sections] == [[0, 4], [10], [21], [30]]
    assert overlap_sections([F(0, 9), F(9, 12)])[0][1].min_key == (9,)  # equal bounds overlap


def test_memory_filesystem(tmp_path: Path) -> None:
    uri = f"memory://{uuid.uuid4().hex}/t"
    tbl = make(uri, options={"changelog-producer": "lookup"})
    tbl.write(day("a", range(50), 1))
    tbl.write(day("a", range(25), 2))
    tbl.delete("id >= 45")
    tbl.compact(full=True)
    reopened = raylake.open_table(uri)
    values = {r["id"]: r["v"] for r in reopened.to_arrow().to_pylist()}
    assert values == {i: 2.0 if i < 25 else 1.0 for i in range(45)}
    assert reopened.changelog(2).num_rows == 50


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        (pa.string(), ["b", "a", "ä", "b"]),
        (pa.binary(), [b"\x00", b"", b"\x00\x01", b""]),
        (pa.date32(), [datetime.date(2024, 1, 2), datetime.date(1970, 1, 1)] * 2),
        (
            pa.timestamp("ms", tz="UTC"),
            [datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)] * 2,
        ),
        (pa.decimal128(10, 2), [Decimal("1.50"), Decimal("-2.00"), Decimal("1.50")]),
        (pa.bool_(), [True, False, True]),
        (pa.uint64(), [2**64 - 1, 0, 2**64 - 1]),
    ],
)
def test_key_types(tmp_path: Path, dtype: pa.DataType, values: list[Any]) -> None:
    schema = pa.schema([pa.field("k", dtype, nullable=False), ("n", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["k"], buckets=2)
    tbl.write(pa.table({"k": pa.array(values, dtype), "n": list(range(len(values)))}))
    tbl.write(pa.table({"k": pa.array(values[:1], dtype), "n": [100]}))
    expected = {v: i for i, v in enumerate(values)}
    expected[values[0]] = 100
    actual = {r["k"]: r["n"] for r in tbl.to_arrow().to_pylist()}
    assert actual == expected
    tbl.compact(full=True)
    assert {r["k"]: r["n"] for r in tbl.to_arrow().to_pylist()} == expected


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        (pa.timestamp("s"), [datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 2)]),
        (pa.time32("s"), [datetime.time(1), datetime.time(2)]),
        (pa.date64(), [datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)]),
    ],
)
@pytest.mark.parametrize("keyed", [True, False])
def test_columns_parquet_stores_in_another_unit(
    tmp_path: Path, dtype: pa.DataType, values: list[Any], keyed: bool
) -> None:
    # Parquet has no seconds and no date64: these come back from a file as milliseconds
    # and date32, and could not be concatenated with rows of the table's types, so the
    # first write of a lookup table and changes() from an empty bucket failed in pyarrow.
    schema = pa.schema([pa.field("i", pa.int32(), nullable=False), pa.field("t", dtype, False)])
    tbl = raylake.create_table(
        str(tmp_path / "t"),
        schema,
        primary_key=["i", "t"] if keyed else ["i"],
        buckets=2,
        options={"changelog-producer": "lookup", "compaction.auto": "false"},
    )
    tbl.write(pa.table({"i": [1, 2], "t": pa.array(values, dtype)}, schema=schema))
    assert tbl.changelog(1).num_rows == 2
    assert tbl.changes(0).to_arrow().num_rows == 2
    tbl.write(pa.table({"i": [1], "t": pa.array(values[:1], dtype)}, schema=schema))
    assert tbl.changes(1).to_arrow().num_rows == 0
    tbl.compact(full=True)
    rows = tbl.to_arrow().sort_by("i")
    assert rows.schema == schema
    assert rows.column("t").to_pylist() == values


def test_nested_columns_parquet_stores_in_another_unit(tmp_path: Path) -> None:
    day = datetime.date(2024, 1, 1)
    schema = pa.schema(
        [
            pa.field("i", pa.int32(), nullable=False),
            ("l", pa.list_(pa.timestamp("s"))),
            ("s", pa.struct([("d", pa.date64())])),
        ]
    )
    tbl = raylake.create_table(
        str(tmp_path / "t"), schema, primary_key=["i"], options={"changelog-producer": "lookup"}
    )
    rows = [{"i": 1, "l": [datetime.datetime(2024, 1, 1)], "s": {"d": day}}]
    tbl.write(pa.Table.from_pylist(rows, schema=schema))
    assert tbl.changes(0).to_arrow().to_pylist() == rows
    assert tbl.to_arrow().schema == schema


@pytest.mark.parametrize(
    "name",
    [
        "__raylake_after__",
        "__raylake_bucket__",
        "__raylake_row__",
        "__raylake_order__",
        "__raylake_entry__",
    ],
)
def test_a_column_may_have_the_name_of_a_helper_column(tmp_path: Path, name: str) -> None:
    # Writes, deletes, lookups and changes add helper columns to the table's; they were
    # named like these, which a table may have, and pyarrow refused the duplicate name.
    schema = pa.schema(
        [pa.field("i", pa.int32(), nullable=False), pa.field(name, pa.int64(), nullable=False)]
    )
    tbl = raylake.create_table(
        str(tmp_path / "t"),
        schema,
        primary_key=["i", name],
        partition_by=[name],
        buckets=2,
        options={"changelog-producer": "lookup"},
    )
    tbl.write(pa.table({"i": [1, 2], name: [1, 2]}, schema=schema))
    tbl.write(pa.table({"i": [1, 3], name: [1, 3]}, schema=schema))
    tbl.delete({"i": [2], name: [2]})
    assert tbl.changelog(3).to_pylist() == [{"i": 2, name: 2, "_rl_kind": "-D"}]
    changes = tbl.changes(0).to_arrow().sort_by("i").to_pylist()
    assert changes == [{"i": 1, name: 1}, {"i": 3, name: 3}]
    replaced = pa.table({"i": [4], name: [1]}, schema=schema)
    tbl.write(replaced, mode="overwrite", overwrite_filter=raylake.col(name) == 1)
    assert tbl.to_arrow().sort_by("i").to_pylist() == [{"i": 3, name: 3}, {"i": 4, name: 1}]


def test_from_pandas_with_a_primary_key(tmp_path: Path) -> None:
    df = pd.DataFrame({"id": [1, 2, 1], "v": [0.5, 1.5, 2.5]})
    tbl = raylake.from_pandas(df, str(tmp_path / "t"), primary_key=["id"], buckets=2)
    assert tbl.to_pandas().sort_values("id")["v"].tolist() == [2.5, 1.5]


@pytest.mark.parametrize("dtype", [pa.int64(), pa.uint64(), pa.int8()])
def test_keys_at_the_ends_of_their_type(tmp_path: Path, dtype: pa.DataType) -> None:
    info = np.iinfo(dtype.to_pandas_dtype())
    keys = [int(info.min), int(info.min) + 1, 0, int(info.max) - 1, int(info.max)]
    schema = pa.schema([pa.field("k", dtype, nullable=False), ("n", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["k"])
    tbl.write(pa.table({"k": pa.array(keys, dtype), "n": [1] * 5}))
    tbl.write(pa.table({"k": pa.array([keys[-1], keys[0]], dtype), "n": [2, 2]}))
    tbl.write(pa.table({"k": pa.array([keys[2]], dtype), "n": [3]}))
    expected = {keys[0]: 2, keys[1]: 1, keys[2]: 3, keys[3]: 1, keys[4]: 2}
    assert {r["k"]: r["n"] for r in tbl.to_arrow().to_pylist()} == expected


def test_delete_takes_python_keys_of_a_uint64_column_above_int64(tmp_path: Path) -> None:
    # Python ints are inferred as int64, which 2**63 and above overflow: the keys to
    # delete take the key column's type instead, where pyarrow's OverflowError came out.
    schema = pa.schema([pa.field("k", pa.uint64(), nullable=False), ("v", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["k"], buckets=2)
    keys = [2**64 - 1, 2**63, 2**63 - 1, 5]
    tbl.write(pa.table({"k": pa.array(keys, pa.uint64()), "v": [1, 2, 3, 4]}))
    tbl.delete({"k": [2**64 - 1], "v": [2**70]})  # other columns are ignored
    tbl.delete([{"k": 2**63}])
    assert sorted(tbl.to_arrow().column("k").to_pylist()) == [5, 2**63 - 1]
    with pytest.raises(raylake.InvalidArgumentError, match=r"keys that fit the key columns.*'k'"):
        tbl.delete({"k": [2**64]})
    assert tbl.count() == 2


@pytest.mark.parametrize("key_type", [pa.int8(), pa.int16(), pa.int32(), pa.uint64()])
def test_newest_first_read_keeps_keys_across_the_whole_range_of_narrow_types(
    tmp_path: Path, key_type: pa.DataType
) -> None:
    # Keys spanning more than half of a narrow type's range once wrapped around in the
    # bitmap of seen keys and hid an older file's live row.
    info = {pa.int8(): (-100, -27, 100), pa.int16(): (-20000, -5535, 20000)}
    low, middle, high = info.get(key_type, (-(2**31) + 1, -7, 2**31 - 1))
    if key_type == pa.uint64():
        low, middle, high = 2**63 + 1, 2**63 + 5, 2**63 + 9
    schema = pa.schema([("k", key_type), ("v", pa.string())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["k"], buckets=1)
    tbl.write(pa.table({"k": pa.array([low, middle, high], key_type), "v": ["old"] * 3}))
    tbl.write(pa.table({"k": pa.array([low, high], key_type), "v": ["new"] * 2}))
    rows = tbl.to_arrow().sort_by("k").to_pylist()
    assert rows == [
        {"k": low, "v": "new"},
        {"k": middle, "v": "old"},
        {"k": high, "v": "new"},
    ]
    assert tbl.count() == 3


def test_float_not_equal_keeps_nan_rows_of_single_file_buckets(tmp_path: Path) -> None:
    # pyarrow prunes row groups by NaN-blind statistics: a row group of 3.0 and NaN
    # "holds only 3.0"; `x != 3` must still return the NaN row, as Arrow compares.
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["k"], buckets=1)
    tbl.write(pa.table({"k": [1, 2], "x": [3.0, float("nan")]}))
    assert tbl.count(filter="x != 3") == 1
    assert tbl.to_arrow(columns=["k"], filter="x != 3").to_pylist() == [{"k": 2}]
    batches = list(tbl.to_batches(columns=["k"], filter="x not in (3.0, 4.0)"))
    assert pa.Table.from_batches(batches).to_pylist() == [{"k": 2}]
