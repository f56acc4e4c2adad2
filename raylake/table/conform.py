"""Turn user input into Arrow data with exactly the table's schema, or say why not.

Accepted inputs: a pyarrow Table or RecordBatch, a RecordBatchReader, a pandas
DataFrame, anything that exports an Arrow stream (``__arrow_c_stream__``: polars, DuckDB
relations), or an iterable of any of those. Columns are matched by name (order
does not matter). A column may be cast to the table's type only within the same
kind of type (integer to wider integer, integer to float, between string,
large_string and string_view, between the binary types and binary_view, timestamp units)
and only when the cast loses nothing (a narrower float rounds, as its type means, but a
value beyond its range is refused); anything else is a :class:`SchemaMismatchError`
naming the column. A dictionary column is written as its values, in a list or struct too
(polars' Categorical, List(Categorical)).
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Iterator
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import NullConstraintError, SchemaMismatchError, UnsupportedTypeError
from raylake.format.schema import SYSTEM_PREFIX
from raylake.table.empty_offsets import with_all_offsets
from raylake.table.nested_nulls import has_required_fields, required_fields_filled
from raylake.table.pandas_types import (
    arrow_dtype_columns,
    dataframe_to_arrow,
    is_text,
    normalized,
    refuse_duplicate_names,
    strings_normalized,
    with_index_columns,
)

ArrowData: TypeAlias = pa.Table | pa.RecordBatch
# pyarrow's Parquet writer before 17 cannot write a null fixed-size list as a column or a
# struct's field ("Lists with non-zero length null components"), and one inside a list it
# writes does not read back ("Expected all lists to be of size=2").
NULL_FIXED_LISTS_WRITE = int(pa.__version__.split(".")[0]) >= 17


def iter_input(data: Any, types: pa.Schema | None = None) -> Iterator[ArrowData]:
    """Yield Arrow chunks from any accepted input, streaming where the input streams;
    a DataFrame's columns whose types pyarrow cannot infer take theirs in ``types``."""
    if isinstance(data, pa.Table | pa.RecordBatch):
        yield data
    elif isinstance(data, pa.RecordBatchReader):
        yield from data
    elif is_dataframe(data):
        yield pandas_to_arrow(data, types)
    elif _is_series(data):  # pandas 3's exports a stream of no columns; pandas 2's iterates
        raise SchemaMismatchError(
            f"cannot write a pandas Series ({data.name!r}); write a DataFrame (series.to_frame())"
        )
    elif hasattr(data, "__arrow_c_stream__"):
        yield from _arrow_stream(data)
    elif isinstance(data, Iterable) and not isinstance(data, str | bytes | dict):
        for item in data:
            if isinstance(item, pa.Table | pa.RecordBatch):
                yield item
            elif is_dataframe(item):
                yield pandas_to_arrow(item, types)
            elif hasattr(item, "__arrow_c_stream__"):
                yield from _arrow_stream(item)
            else:
                raise SchemaMismatchError(
                    f"cannot write an iterable of {type(item).__name__}; expected "
                    "pyarrow RecordBatches, Tables, pandas DataFrames or Arrow streams"
                )
    else:
        raise SchemaMismatchError(
            f"cannot write {type(data).__name__}; expected a pyarrow Table, RecordBatch, "
            "RecordBatchReader, pandas DataFrame, anything that exports an Arrow stream "
            "(__arrow_c_stream__: polars, DuckDB), or an iterable of those"
        )


def _arrow_stream(data: Any) -> Iterator[pa.RecordBatch]:
    """The batches of an Arrow PyCapsule stream (a polars DataFrame, a DuckDB relation, a
    pyarrow reader of another library), read as they come."""
    try:
        reader = pa.RecordBatchReader.from_stream(data)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise SchemaMismatchError(
            f"cannot write {type(data).__name__}: its Arrow stream is not a stream of "
            f"record batches ({exc})"
        ) from exc
    yield from reader


def _is_series(data: Any) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(data, pd.Series)


def is_dataframe(data: Any) -> bool:
    """A pandas DataFrame, or a subclass (defined anywhere: a user's, geopandas'), which
    was taken for an Arrow stream of another shape or refused; pandas is not imported
    for the question (a DataFrame means it is)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(data, pd.DataFrame)


def pandas_to_arrow(df: Any, types: pa.Schema | None = None) -> pa.Table:
    """A DataFrame to write: named index levels as columns, strings as ``string``
    (raylake/table/pandas_types.py), columns pyarrow cannot infer as in ``types`` (the
    table's). Columns the table lacks (which ``schema_mode="merge"`` adds) take the types
    ``from_pandas`` gives, so that the table does not depend on the installed pandas."""
    df = with_index_columns(df)
    typed = arrow_dtype_columns(df)  # a pd.ArrowDtype: typed as named (large_string too)
    kept = typed - frozenset(types.names if types is not None else ())
    pa_table = strings_normalized(dataframe_to_arrow(df, types=types), keep=kept)
    if types is None or all(n in types.names for n in pa_table.column_names):
        return pa_table
    return normalized(pa_table, explicit=frozenset(types.names) | typed)


def conform(data: ArrowData, schema: pa.Schema, keys: Collection[str] = ()) -> pa.Table:
    """Reorder and safely cast ``data`` to ``schema``; check non-nullable columns (a null
    in one of ``keys``, the primary key, is reported as such)."""
    _check_names(data.schema.names, schema.names)
    pa_table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    columns = [_conform_column(pa_table.column(f.name), f, f.name in keys) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def check_schema(data: pa.Schema, schema: pa.Schema) -> None:
    """Check, before any row is seen, that data of schema ``data`` can be written to a
    table of schema ``schema``: the same column names, and each type of the same kind as
    the table's (the casts :func:`conform` allows). Whether values fit (an int64 into an
    int32, nulls in a non-nullable column) is still checked on the rows.

    A column of type null stands for a type not known yet (a pandas object column):
    it passes here and is checked on the rows.
    """
    _check_names(data.names, schema.names)
    check_types(data, schema)


def check_types(data: pa.Schema, schema: pa.Schema) -> None:
    """Each column of ``data`` that ``schema`` also has is of the same kind of type (the
    casts :func:`conform` allows); the other columns are not looked at. What a caller
    knows before any row, where the names may differ (a merge's source)."""
    for field in schema:
        if field.name not in data.names:
            continue
        dtype = data.field(field.name).type
        if pa.types.is_dictionary(dtype):
            dtype = dtype.value_type
        if dtype != field.type and not _castable(dtype, field.type):
            raise SchemaMismatchError(
                f"column {field.name!r} has type {dtype}, but the table stores {_stored(field)}",
                column=field.name,
                expected=field.type,
                actual=dtype,
            )


def _check_names(names: list[str], expected: list[str]) -> None:
    missing = [n for n in expected if n not in names]
    extra = [n for n in names if n not in expected]
    shown = f"(the data has columns {names}; the table has columns {expected})"
    if missing:
        raise SchemaMismatchError(f"data is missing column(s) {missing} {shown}", column=missing[0])
    if extra:
        reserved = [n for n in extra if n.startswith(SYSTEM_PREFIX)]
        why = (
            f"; names starting {SYSTEM_PREFIX!r} are reserved for raylake's own columns"
            f" and are never table columns: rename {reserved}"
            if reserved
            else ""
        )
        raise SchemaMismatchError(
            f"data has column(s) {extra} that the table does not have {shown}{why}",
            column=extra[0],
        )
    refuse_duplicate_names(names, "data")


def _conform_column(column: pa.ChunkedArray, field: pa.Field, key: bool) -> pa.ChunkedArray:
    column = with_all_offsets(column)  # Spark's empty nested lists: before anything measures
    if pa.types.is_dictionary(column.type):
        column = _decoded(column)
    # Nulls first: a pandas integer column with a null arrives as double, and the null is
    # the problem to name, not the type.
    if not field.nullable and column.null_count:
        raise NullConstraintError(field.name, column.null_count, key=key)
    if column.type != field.type:
        # A column without a value (empty, or all null) loses nothing in any cast pyarrow has.
        if column.null_count < len(column) and not _castable(column.type, field.type):
            reason = f"has type {column.type}, but the table stores {_stored(field)}"
            if pa.types.is_floating(column.type) and pa.types.is_integer(field.type):
                reason += (
                    " (floats are not truncated into integers; pandas makes an integer "
                    "column with a missing value float64: give it the dtype 'Int64', or cast "
                    "it)"
                )
            raise _mismatch(field, column, reason)
        try:
            cast = _cast(column, field.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            # ArrowTypeError: pyarrow before 17 casts struct fields only in their order
            reason = f"of type {column.type} does not fit {field.type} without loss: {exc}"
            raise _mismatch(field, column, reason) from exc
        overflowed = made_infinite(column, cast)
        if overflowed:
            reason = (
                f"of type {column.type} does not fit {field.type}: {overflowed} value(s) "
                "beyond its range would become infinite"
            )
            raise _mismatch(field, column, reason)
        column = cast
    if pa.types.is_decimal(field.type):
        _check_precision(field, column)
    if has_required_fields(field.type):
        column = required_fields_filled(column, field.name)
    if not NULL_FIXED_LISTS_WRITE and _null_fixed_list(field.type, column.chunks):
        raise UnsupportedTypeError(
            field.name, field.type, "pyarrow's Parquet writer before version 17",
            "not with a null row (of it or a fixed-size list in it): upgrade pyarrow to 17 or "
            "later, or write the rows without nulls",
        )  # fmt: skip
    return column


def _null_fixed_list(dtype: pa.DataType, arrays: list[pa.Array]) -> bool:
    """Whether ``arrays`` hold a null fixed-size list at any depth."""
    if pa.types.is_struct(dtype):
        return any(
            _null_fixed_list(dtype.field(i).type, [a.field(i) for a in arrays])
            for i in range(dtype.num_fields)
        )
    if pa.types.is_map(dtype):
        return _null_fixed_list(dtype.key_type, [a.keys for a in arrays]) or _null_fixed_list(
            dtype.item_type, [a.items for a in arrays]
        )
    if not (pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or _is_fixed(dtype)):
        return False
    if _is_fixed(dtype) and any(a.null_count for a in arrays):
        return True
    return _null_fixed_list(dtype.value_type, [a.flatten() for a in arrays])


def _is_fixed(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_fixed_size_list(dtype))


def _check_precision(field: pa.Field, column: pa.ChunkedArray) -> None:
    """Arrow stores a decimal in a fixed width, which holds more digits than its type may
    (DuckDB hands its HUGEINT over as decimal128(38, 0), up to 39 digits): such a value
    would be written, and its file's bounds would not fit the column's type."""
    for chunk in column.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise _mismatch(field, column, f"holds a value beyond its type: {exc}") from exc


def _stored(field: pa.Field) -> str:
    if pa.types.is_null(field.type):
        # a table made from a DataFrame whose column held only None
        return "null (a column made without values: give it a type with update_column)"
    return str(field.type)


def _mismatch(field: pa.Field, column: pa.ChunkedArray, reason: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {field.name!r} {reason}",
        column=field.name,
        expected=field.type,
        actual=column.type,
    )


def made_infinite(before: pa.ChunkedArray, after: pa.ChunkedArray) -> int:
    """How many finite floats a narrowing cast made infinite (pyarrow's safe cast checks
    integers, not floats). Rounding to the narrower float is what the column's type
    means, and a pandas float64 column written into a float32 table rounds."""
    src, dst = before.type, after.type
    if not (pa.types.is_floating(src) and pa.types.is_floating(dst)):
        return 0
    if dst.bit_width >= src.bit_width:
        return 0
    # float16 has no compute kernels: its infinities are float32's
    widened = after.cast(pa.float64())
    made = pc.and_(pc.is_inf(widened), pc.invert(pc.is_inf(before.cast(pa.float64()))))
    return int(pc.sum(made).as_py() or 0)


def _cast(column: pa.ChunkedArray, dtype: pa.DataType) -> pa.ChunkedArray:
    try:
        return column.cast(dtype, safe=True)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        if _unviewed(column.type) == column.type or not _castable(column.type, dtype):
            raise
    # pyarrow casts no dictionary of views to its values (polars' Categorical in a list
    # or struct): with its views made strings first, it does.
    try:
        return column.cast(_unviewed(column.type), safe=True).cast(dtype, safe=True)
    except pa.ArrowNotImplementedError:
        pass
    # pyarrow before 17 has no cast from string_view or binary_view (polars' strings
    # and binaries, also in lists and structs): through Python.
    chunks = [pa.array(chunk.to_pylist(), dtype) for chunk in column.chunks]
    return pa.chunked_array(chunks, dtype)


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column as its values. polars' Categorical and Enum are dictionaries
    of string_view, which Arrow can neither cast nor take from: their values are made
    plain strings first."""
    values_type = column.type.value_type
    plain = {"text": pa.large_string(), "bytes": pa.large_binary()}.get(_kind(values_type))
    if plain is None or not _is_view(values_type):
        return column.cast(values_type)
    chunks = [
        pc.take(_cast(pa.chunked_array([c.dictionary]), plain), c.indices) for c in column.chunks
    ]
    return pa.chunked_array(chunks, plain)


def unviewed(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its string_view and binary_view types, nested too, as string and
    binary: the types of the new columns a stream of views brings (polars' strings),
    which a table does not store (an in-memory layout, like a dictionary)."""
    return pa.schema([f.with_type(_unviewed(f.type)) for f in schema], schema.metadata)


def _unviewed(dtype: pa.DataType) -> pa.DataType:
    t = pa.types
    if _is_view(dtype):
        return pa.string() if _kind(dtype) == "text" else pa.binary()
    if t.is_dictionary(dtype):
        return pa.dictionary(dtype.index_type, _unviewed(dtype.value_type), dtype.ordered)
    if t.is_list(dtype) or t.is_large_list(dtype) or t.is_fixed_size_list(dtype):
        item = dtype.value_field.with_type(_unviewed(dtype.value_type))
        if t.is_fixed_size_list(dtype):
            return pa.list_(item, dtype.list_size)
        return pa.list_(item) if t.is_list(dtype) else pa.large_list(item)
    if t.is_map(dtype):
        key, value = dtype.key_field, dtype.item_field
        return pa.map_(key.with_type(_unviewed(key.type)), value.with_type(_unviewed(value.type)))
    if t.is_struct(dtype):
        return pa.struct([f.with_type(_unviewed(f.type)) for f in dtype])
    return dtype


def _is_view(dtype: pa.DataType) -> bool:
    t = pa.types
    return bool(t.is_string_view(dtype) or t.is_binary_view(dtype))


def _kind(dtype: pa.DataType) -> str:
    t = pa.types
    checks = (
        ("null", t.is_null),
        ("bool", t.is_boolean),
        ("number", lambda d: t.is_integer(d) or t.is_floating(d)),
        ("decimal", t.is_decimal),
        ("text", is_text),
        ("bytes", _is_bytes),
        ("date", t.is_date),
        ("timestamp", t.is_timestamp),
        ("time", t.is_time),
        ("duration", t.is_duration),
        ("list", lambda d: t.is_list(d) or t.is_large_list(d) or t.is_fixed_size_list(d)),
    )
    for name, check in checks:
        if check(dtype):
            return name
    return str(dtype)


def _is_bytes(dtype: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_binary(dtype)
        or t.is_large_binary(dtype)
        or t.is_fixed_size_binary(dtype)
        or t.is_binary_view(dtype)
    )


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    if pa.types.is_null(src):
        return True  # an all-null column (pandas object column of None) fits any type
    if pa.types.is_dictionary(src):  # written as its values, in a list or struct too
        src = src.value_type
        if src == dst:
            return True
    if pa.types.is_floating(src) and pa.types.is_integer(dst):
        return False  # would truncate
    if pa.types.is_decimal(src) and pa.types.is_integer(dst):
        # A decimal of scale 0 is an integer (Spark reads uint64 as decimal(20, 0), and
        # writes it back so): whether its values fit is checked on the rows.
        return bool(src.scale == 0)
    if _kind(src) == "list" and _kind(dst) == "list":
        return _castable(src.value_type, dst.value_type)
    if pa.types.is_map(src) and pa.types.is_map(dst):
        # Spark reads map<string, uint64> as map<string, decimal(20, 0)> and writes it back
        pairs = ((src.key_type, dst.key_type), (src.item_type, dst.item_type))
        return all(s == d or _castable(s, d) for s, d in pairs)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        # by name, each field by the rules of a column (a string field does not parse
        # into an int field, a float field is not truncated into one)
        wanted = {f.name: f.type for f in dst}
        return {f.name for f in src} == set(wanted) and all(
            f.type == wanted[f.name] or _castable(f.type, wanted[f.name]) for f in src
        )
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        return (src.tz is None) == (dst.tz is None)
    return _kind(src) == _kind(dst)
