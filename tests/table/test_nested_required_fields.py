"""Structs with non-nullable fields, as Spark makes them (``named_struct``), and maps of
types Spark widens, written back; maps and fixed-size lists of such structs too (table/nested_nulls.py, table/conform.py).

Spark's Arrow batches hold a null in a non-nullable field under each null struct;
pyarrow's Parquet writer refused them ("declared non-nullable but contains nulls"), so
a DataFrame with a null struct could not be written at all.
"""

from __future__ import annotations

import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake
from raylake.errors import NullConstraintError, SchemaMismatchError

POINT = pa.struct([pa.field("a", pa.int64(), nullable=False), ("b", pa.string())])
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", POINT)])


def struct_as_spark_sends_it(
    values: list[int | None], nulls: list[bool], names: list[str | None]
) -> pa.StructArray:
    """A struct whose field ``a`` holds a null wherever the struct is null."""
    children = [pa.array(values, pa.int64()), pa.array(names, pa.string())]
    return pa.StructArray.from_arrays(children, fields=list(POINT), mask=pa.array(nulls))


def make(tmp_path: Path, primary_key: bool) -> raylake.Table:
    keys = {"primary_key": ["id"], "buckets": 1} if primary_key else {}
    return raylake.create_table(str(tmp_path / "t"), SCHEMA, **keys)


@pytest.mark.parametrize("primary_key", [False, True])
def test_a_null_struct_with_a_null_in_its_required_field_is_written(
    tmp_path: Path, primary_key: bool
) -> None:
    tbl = make(tmp_path, primary_key)
    s = struct_as_spark_sends_it([1, None, 3], [False, True, False], ["x", None, None])
    data = pa.table({"id": [0, 1, 2], "s": s}, schema=SCHEMA)
    tbl.write(data)
    assert tbl.to_arrow().sort_by("id").to_pylist() == data.to_pylist()


def test_a_list_of_structs_with_null_elements_is_written(tmp_path: Path) -> None:
    """Spark's ``array(named_struct('a', 1), null)``."""
    dtype = pa.list_(POINT)
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("ls", dtype)]))
    elements = struct_as_spark_sends_it([1, None, None, 4], [False, True, True, False], [None] * 4)
    ls = pa.ListArray.from_arrays(pa.array([0, 2, 2, 3, 4]), elements, type=dtype)
    ls = pa.concat_arrays([ls, pa.nulls(1, dtype)])
    data = pa.table({"id": [0, 1, 2, 3, 4], "ls": ls})
    tbl.write(data)
    assert tbl.to_arrow().sort_by("id").to_pylist() == data.to_pylist()


def test_a_map_of_structs_with_null_values_is_written(tmp_path: Path) -> None:
    """Spark's ``map('k', CASE WHEN ... THEN named_struct('a', 1) END)``; sliced too."""
    dtype = pa.map_(pa.string(), POINT)
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("m", dtype)]))
    items = struct_as_spark_sends_it([1, None, 3], [False, True, False], [None] * 3)
    m = pa.MapArray.from_arrays(pa.array([0, 0, 2, 3]), pa.array(["x", "y", "z"]), items)
    m = pa.concat_arrays([m, pa.nulls(1, dtype)])
    data = pa.table({"id": [0, 1, 2, 3], "m": m}).slice(1)
    tbl.write(data)
    assert tbl.to_arrow().sort_by("id").to_pylist() == data.to_pylist()


def test_a_fixed_size_list_of_structs_with_null_elements_is_written(tmp_path: Path) -> None:
    dtype = pa.list_(POINT, 2)
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("f", dtype)]))
    elements = struct_as_spark_sends_it([1, None, None, 4], [False, True, True, False], [None] * 4)
    f = pa.FixedSizeListArray.from_arrays(elements, 2)
    data = pa.table({"id": [0, 1], "f": f})  # (a null list itself needs pyarrow 17)
    tbl.write(data)
    assert tbl.to_arrow().sort_by("id").to_pylist() == data.to_pylist()


def test_a_null_in_a_required_field_of_a_map_value_that_is_there_is_refused(
    tmp_path: Path,
) -> None:
    dtype = pa.map_(pa.string(), POINT)
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("m", dtype)]))
    items = struct_as_spark_sends_it([1, None], [False, False], ["x", "y"])
    m = pa.MapArray.from_arrays(pa.array([0, 2]), pa.array(["x", "y"]), items)
    with pytest.raises(NullConstraintError, match=r"column 'm\.value\.a' is not nullable"):
        tbl.write(pa.table({"m": m}))
    assert tbl.latest_snapshot() is None


def test_structs_that_are_all_null_are_written(tmp_path: Path) -> None:
    """No value of the field to give the null rows: one of its type's own is made."""
    tbl = make(tmp_path, False)
    s = struct_as_spark_sends_it([None, None], [True, True], [None, None])
    tbl.write(pa.table({"id": [0, 1], "s": s}, schema=SCHEMA))
    assert tbl.to_arrow().column("s").to_pylist() == [None, None]


def test_a_null_in_a_required_field_of_a_struct_that_is_there_is_refused(tmp_path: Path) -> None:
    tbl = make(tmp_path, False)
    s = struct_as_spark_sends_it([None, None], [False, True], ["x", None])
    with pytest.raises(NullConstraintError, match=r"column 's\.a' is not nullable .* 1 null"):
        tbl.write(pa.table({"id": [0, 1], "s": s}, schema=SCHEMA))
    assert tbl.latest_snapshot() is None


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.one_of(st.none(), st.integers(-5, 5))), min_size=1, max_size=8
    ),
    st.integers(0, 3),
)
def test_structs_read_back_as_written(rows: list[tuple[bool, int | None]], offset: int) -> None:
    """Any pattern of null structs, nulls in the field only under them, and a slice."""
    nulls = [null for null, _ in rows]
    values = [v if null else (0 if v is None else v) for null, v in rows]
    s = struct_as_spark_sends_it(values, nulls, [None] * len(rows)).slice(min(offset, len(rows)))
    data = pa.table({"id": list(range(len(s))), "s": s}, schema=SCHEMA)
    with tempfile.TemporaryDirectory() as tmp:
        tbl = make(Path(tmp), False)
        tbl.write(data)
        assert tbl.to_arrow().sort_by("id").to_pylist() == data.to_pylist()


@pytest.mark.parametrize(
    ("stored", "given", "values"),
    [
        (pa.uint64(), pa.decimal128(20, 0), [Decimal(2**64 - 1)]),
        (pa.uint8(), pa.int16(), [255]),
        (pa.string(), pa.large_string(), ["x"]),
    ],
)
def test_a_map_widened_by_spark_goes_back_into_its_table(
    tmp_path: Path, stored: pa.DataType, given: pa.DataType, values: list[Any]
) -> None:
    """Spark reads map<string, uint64> as map<string, decimal(20, 0)>; writing it back
    was refused as another type, where a list or struct of the same casts back."""
    dtype = pa.map_(pa.string(), stored)
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("m", dtype)]))
    widened = pa.array([[("k", v) for v in values], None], pa.map_(pa.string(), given))
    tbl.write(pa.table({"m": widened}))
    assert tbl.to_arrow().column("m").type == dtype
    assert tbl.to_arrow().column("m").to_pylist() == widened.cast(dtype).to_pylist()


def test_a_map_value_beyond_the_stored_type_is_refused(tmp_path: Path) -> None:
    dtype = pa.map_(pa.string(), pa.uint8())
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("m", dtype)]))
    wide = pa.array([[("k", 256)]], pa.map_(pa.string(), pa.int16()))
    with pytest.raises(SchemaMismatchError, match="column 'm'"):
        tbl.write(pa.table({"m": wide}))
    with pytest.raises(SchemaMismatchError, match="column 'm'"):
        tbl.write(pa.table({"m": pa.array([[("k", "x")]], pa.map_(pa.string(), pa.string()))}))
    assert tbl.latest_snapshot() is None
