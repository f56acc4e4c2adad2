"""Handing a scan to other Arrow engines: DuckDB and polars.

Both read through the Arrow PyCapsule stream interface (``__arrow_c_stream__``), so
rows go from the Parquet reader to the engine batch by batch, never through pandas.
Neither reads every Arrow type a table stores: a column is handed over in a type the
engine reads with the same values (decimal256 of up to 38 digits as decimal128,
float16 as float32 for DuckDB, and a timestamp whose zone polars does not know, such as
the offset ``+05:30``, in UTC for polars: the same instants), or refused by name before
anything is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raylake.errors import InvalidArgumentError, MissingDependencyError, UnsupportedTypeError

if TYPE_CHECKING:
    from raylake.table.scan import TableScan

# polars' and DuckDB's decimals are 128-bit: polars panics (a Rust PanicException, not an
# error) on Arrow's decimal256, which holds up to 76 digits, and DuckDB fails each query.
_DECIMAL128_DIGITS = 38


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
    pinned = scan.pin()
    stream = _readable(pinned, "DuckDB", float16=False)
    con = duckdb.connect() if connection is None else connection
    con.register(name, pinned if stream is None else stream)
    return con


def to_polars_frame(scan: TableScan) -> Any:
    """The scan's rows as a ``polars.DataFrame``, built from the Arrow stream."""
    try:
        import polars as pl
    except ImportError as exc:
        raise MissingDependencyError("polars", "polars") from exc
    stream = _readable(scan, "polars", float16=True, zone=_polars_zone)
    return pl.DataFrame(scan if stream is None else stream)


def _polars_zone(tz: str) -> str:
    """``tz`` where polars reads it, else UTC: polars refuses an offset that is not whole
    hours (``+05:30``, India's) or a name its zone database lacks, with a ComputeError
    for every read of the column."""
    import polars as pl

    try:  # an empty frame of the zone panics in polars 2.1: converting to it raises
        pl.Series([], dtype=pl.Datetime("us", "UTC")).dt.convert_time_zone(tz)
    except Exception:
        return "UTC"
    return tz


class _Stream:
    """A scan's rows cast to ``schema``, as nothing but an Arrow stream (polars before
    1.31 takes a pyarrow RecordBatchReader for a sequence of rows); each call of
    ``__arrow_c_stream__`` reads the scan anew, as the scan's own does."""

    def __init__(self, scan: TableScan, schema: pa.Schema) -> None:
        self._scan = scan
        self._schema = schema

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        reader = pa.RecordBatchReader.from_batches(self._schema, self._batches())
        return reader.__arrow_c_stream__(requested_schema)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        for batch in self._scan.to_batches():
            yield from pa.Table.from_batches([batch]).cast(self._schema).to_batches()


def _readable(
    scan: TableScan, engine: str, float16: bool, zone: Callable[[str], str] | None = None
) -> _Stream | None:
    """A stream of ``scan`` in types ``engine`` reads, or None where it reads the scan's
    own; a column it cannot hold is refused, naming it. ``zone`` gives the time zone the
    engine reads a timestamp of a zone in (the same instants)."""
    schema = scan.to_arrow_reader().schema  # the scan's columns: nothing is planned
    zones: dict[str, str] = {}

    def known(tz: str) -> str:
        if tz not in zones:
            zones[tz] = tz if zone is None else zone(tz)
        return zones[tz]

    wanted = pa.schema(
        [f.with_type(_engine_type(f.name, f.type, engine, float16, known)) for f in schema]
    )
    return None if wanted.equals(schema) else _Stream(scan, wanted)


def _engine_type(
    column: str, dtype: pa.DataType, engine: str, float16: bool, zone: Callable[[str], str]
) -> pa.DataType:
    """``dtype`` as ``engine`` reads it, the same values (``float16``: whether it reads
    float16; ``zone``: the zone it reads a timestamp's zone as); a decimal256 of more
    digits than 128 bits hold is refused."""
    t = pa.types

    def inner(f: pa.Field) -> pa.Field:
        return f.with_type(_engine_type(column, f.type, engine, float16, zone))

    if t.is_timestamp(dtype) and dtype.tz is not None:
        return pa.timestamp(dtype.unit, zone(dtype.tz))

    if isinstance(dtype, pa.Decimal256Type):
        if dtype.precision > _DECIMAL128_DIGITS:
            raise UnsupportedTypeError(
                column,
                dtype,
                f"the 128-bit decimals of {engine}",
                "leave it out with columns=, or read it with to_arrow()",
            )
        return pa.decimal128(dtype.precision, dtype.scale)
    if t.is_float16(dtype) and not float16:
        return pa.float32()
    if t.is_list(dtype) or t.is_large_list(dtype) or t.is_fixed_size_list(dtype):
        item = inner(dtype.value_field)
        if t.is_fixed_size_list(dtype):
            return pa.list_(item, dtype.list_size)
        return pa.list_(item) if t.is_list(dtype) else pa.large_list(item)
    if t.is_map(dtype):
        return pa.map_(inner(dtype.key_field), inner(dtype.item_field))
    if t.is_struct(dtype):
        return pa.struct([inner(f) for f in dtype])
    return dtype
