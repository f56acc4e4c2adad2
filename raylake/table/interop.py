"""Handing a scan to other Arrow engines: DuckDB and polars.

Both read through the Arrow PyCapsule stream interface (``__arrow_c_stream__``), so
rows go from the Parquet reader to the engine batch by batch, never through pandas.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raylake.errors import InvalidArgumentError, MissingDependencyError, UnsupportedTypeError

if TYPE_CHECKING:
    from raylake.table.scan import TableScan


def register_duckdb(scan: TableScan, name: str, connection: Any = None) -> Any:
    """Register ``scan`` as a DuckDB view called ``name``; returns the connection.

    The scan is pinned to its snapshot first, so every query of the view reads the same
    rows; each query streams them anew (nothing is materialized at registration).
    """
    try:
        import duckdb
    except ImportError as exc:
        raise MissingDependencyError("duckdb", "duckdb") from exc
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("name", name, "a non-empty view name")
    con = duckdb.connect() if connection is None else connection
    con.register(name, scan.pin())
    return con


def to_polars_frame(scan: TableScan) -> Any:
    """The scan's rows as a ``polars.DataFrame``, built from the Arrow stream."""
    try:
        import polars as pl
    except ImportError as exc:
        raise MissingDependencyError("polars", "polars") from exc
    schema = scan.to_arrow_reader().schema
    wanted = pa.schema([f.with_type(_polars_type(f.name, f.type)) for f in schema])
    if wanted.equals(schema):
        return pl.DataFrame(scan)
    return pl.DataFrame(_Stream(pa.RecordBatchReader.from_batches(wanted, _cast(scan, wanted))))


class _Stream:
    """A reader as nothing but an Arrow stream: polars before 1.31 takes a pyarrow
    RecordBatchReader for a sequence of rows, but reads any stream exporter."""

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self._reader = reader

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._reader.__arrow_c_stream__(requested_schema)


# polars' decimals are 128-bit: it panics (a Rust PanicException, not an error) on Arrow's
# decimal256, which holds up to 76 digits.
_POLARS_DECIMAL_DIGITS = 38


def _polars_type(column: str, dtype: pa.DataType) -> pa.DataType:
    """``dtype`` as polars reads it: a decimal256 of at most 38 digits as a decimal128
    (the same values); one of more digits is refused, naming ``column``."""
    t = pa.types
    if isinstance(dtype, pa.Decimal256Type):
        if dtype.precision > _POLARS_DECIMAL_DIGITS:
            raise UnsupportedTypeError(
                column,
                dtype,
                "polars' 128-bit decimals",
                "leave it out with columns=, or read it with to_arrow()",
            )
        return pa.decimal128(dtype.precision, dtype.scale)
    if t.is_list(dtype) or t.is_large_list(dtype) or t.is_fixed_size_list(dtype):
        item = dtype.value_field.with_type(_polars_type(column, dtype.value_type))
        if t.is_fixed_size_list(dtype):
            return pa.list_(item, dtype.list_size)
        return pa.list_(item) if t.is_list(dtype) else pa.large_list(item)
    if t.is_map(dtype):
        key, value = dtype.key_field, dtype.item_field
        return pa.map_(
            key.with_type(_polars_type(column, key.type)),
            value.with_type(_polars_type(column, value.type)),
        )
    if t.is_struct(dtype):
        return pa.struct([f.with_type(_polars_type(column, f.type)) for f in dtype])
    return dtype


def _cast(scan: TableScan, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in scan.to_batches():
        yield from pa.Table.from_batches([batch]).cast(schema).to_batches()
