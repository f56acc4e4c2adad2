"""Nested lists, maps and strings of no values with an offsets buffer of 0 bytes, as
Spark's Java Arrow writer sends them, are written (pyarrow's nbytes read past them: a
segfault where the writer measured the data)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import raylake
from raylake.table.empty_offsets import with_all_offsets

NO_BYTES = pa.foreign_buffer(0, 0)  # what a Spark batch holds for an empty vector's offsets
MAP = pa.map_(pa.string(), pa.int64())


def _empty_map() -> pa.Array:
    entries = pa.StructArray.from_arrays(
        [pa.array([], pa.string()), pa.array([], pa.int64())],
        fields=[MAP.key_field, MAP.item_field],
    )
    return pa.Array.from_buffers(MAP, 0, [None, NO_BYTES], children=[entries])


def _nulls_over(child: pa.Array, rows: int) -> pa.Array:
    """A list array of ``rows`` nulls over ``child`` (of no values)."""
    offsets = pa.py_buffer(bytes(4 * (rows + 1)))
    return pa.Array.from_buffers(
        pa.list_(child.type), rows, [pa.py_buffer(bytes(1)), offsets], children=[child]
    )


def _empty_lists_over(child: pa.Array, rows: int) -> pa.Array:
    offsets = pa.py_buffer(bytes(4 * (rows + 1)))
    return pa.Array.from_buffers(pa.list_(child.type), rows, [None, offsets], children=[child])


def test_every_level_gets_its_offsets_and_the_values_stay() -> None:
    text = pa.Array.from_buffers(pa.string(), 0, [None, NO_BYTES, pa.py_buffer(b"")])
    in_struct = pa.StructArray.from_arrays([_empty_lists_over(text, 0)], names=["l"])
    columns = {
        "null lists of an empty map": _nulls_over(_empty_map(), 2),
        "empty lists of empty strings, in a struct": _empty_lists_over(in_struct, 1),
    }
    for array in columns.values():
        fixed = with_all_offsets(pa.chunked_array([array]))
        assert fixed.nbytes >= 0  # read past the buffer before
        assert fixed.to_pylist() == array.to_pylist()
        fixed.validate(full=True)
    written = pa.chunked_array([pa.array([[{"k": 1}], None], pa.list_(MAP))])
    assert with_all_offsets(written) is written  # arrays with their offsets are kept
    flat = pa.chunked_array([pa.array(["a"])])
    assert with_all_offsets(flat) is flat


def test_such_columns_are_written_to_append_and_primary_key_tables(tmp_path: Path) -> None:
    data = pa.table({"id": [1, 2], "tags": _nulls_over(_empty_map(), 2)})
    for name, keys in (("append", []), ("pk", ["id"])):
        schema = pa.schema([pa.field("id", pa.int64(), nullable=not keys), ("tags", pa.list_(MAP))])
        tbl = raylake.create_table(str(tmp_path / name), schema, primary_key=keys)
        tbl.write(data)
        assert tbl.to_arrow().sort_by("id").to_pylist() == [
            {"id": 1, "tags": None},
            {"id": 2, "tags": None},
        ]
