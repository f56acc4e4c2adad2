"""pandas to Arrow and back, the same whatever the installed pandas (2.x or 3.x).

pandas 3 converts its default string dtype to Arrow ``large_string`` and parses dates to
``datetime64[us]``, where pandas 2 gives ``string`` and ``datetime64[ns]``; a table made
from a DataFrame must not depend on which pandas made it. So where the types are
inferred (``from_pandas`` without a schema), each column maps as below
(docs/pandas.md):

=========================================================  ==============================
pandas column                                              table type
=========================================================  ==============================
any string dtype: ``object`` of str, ``"string"`` (python  ``string``
or pyarrow storage), pandas 3 ``str``, a category of them
``datetime64[s|ms|us|ns]``, with or without a time zone    ``timestamp[ns]`` (zone kept)
``timedelta64[s|ms|us|ns]``                                ``duration[ns]``
``int8`` ... ``uint64``, and the nullable ``Int8`` ...     the same width (nulls kept)
``pd.ArrowDtype(t)``                                       ``t``, as named
=========================================================  ==============================

A time outside what nanoseconds hold (years 1678 to 2261) is refused with the column
named: give a schema with ``pa.timestamp("us")`` for it. Writing a DataFrame into an
existing table casts each column to the table's type by the table's rules
(raylake/table/conform.py); string columns of any dtype are read as ``string`` first,
so a refusal names the same type whatever the pandas.

The index follows pyarrow's ``preserve_index`` convention for named indexes: each named
level becomes a column (``df.groupby("user").sum()`` keeps ``user``). An unnamed index
(the default ``RangeIndex``, or what a filter leaves of it) is row numbering and is not
stored; pyarrow would store a non-range one as ``__index_level_0__``. A MultiIndex with
both named and unnamed levels is refused, naming the unnamed ones.

Reading back (:func:`arrow_to_pandas`) gives the installed pandas' own defaults (pandas 3:
``str`` columns), except that an integer column holding nulls comes back as pandas'
nullable integer dtype (``Int64``) rather than ``float64``, which would change its type
and round values above 2**53.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from raylake.errors import (
    InvalidArgumentError,
    SchemaError,
    SchemaMismatchError,
    UnsupportedTypeError,
)

TIME_UNIT = "ns"


def pandas_to_arrow(df: Any, schema: pa.Schema | None = None) -> pa.Table:
    """``df`` as Arrow: in ``schema`` when given, else in the types of the table above."""
    df = with_index_columns(df)
    pa_table = dataframe_to_arrow(df, schema)
    if schema is not None:
        _refuse_lost_values(df, pa_table)
        return pa_table.replace_schema_metadata(None)
    return normalized(pa_table, explicit=arrow_dtype_columns(df))


# OverflowError: an object column's Python int beyond 64 bits (pyarrow's "Python int too
# large to convert to C long").
_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def dataframe_to_arrow(
    df: Any, schema: pa.Schema | None = None, types: pa.Schema | None = None
) -> pa.Table:
    """pyarrow's conversion of ``df`` (its index already made columns), a refusal named:
    a :class:`SchemaMismatchError` naming the first column that does not convert (a
    mixed ``object`` column, complex numbers) rather than pyarrow's own error. A column
    whose type pyarrow cannot infer is converted to its type in ``types`` (the table's,
    for a write), where that has it."""
    names = [str(n) for n in df.columns]  # pyarrow names a column 0 "0"
    refuse_duplicate_names(names, "the DataFrame")
    if schema is not None:
        _refuse_parsed_text(df, schema)
    try:
        pa_table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
    except _CONVERSION_ERRORS as exc:
        if schema is None and types is not None:
            try:
                return _by_column(df, types)
            except _CONVERSION_ERRORS:
                pass
        raise _conversion_error(df, schema, exc) from exc
    return pa_table if types is None else _maps_of_empty_lists(df, pa_table, types)


def _refuse_parsed_text(df: Any, schema: pa.Schema) -> None:
    """A string column converts only to a text or binary type, whatever its dtype:
    pyarrow parses an Arrow-backed one (pandas 3's ``str``, ``StringDtype("pyarrow")``)
    into a number, a bool or a time ("1" as 1), where it refuses an ``object`` one
    (pandas 2's strings) and ``Table.write`` refuses either."""
    import pandas as pd

    for name, dtype in df.dtypes.items():
        if str(name) not in schema.names:
            continue
        target = schema.field(str(name)).type
        stored = target.value_type if pa.types.is_dictionary(target) else target
        if is_text(stored) or pa.types.is_binary(stored) or pa.types.is_large_binary(stored):
            continue
        arrow_text = isinstance(dtype, pd.ArrowDtype) and is_text(dtype.pyarrow_dtype)
        text = isinstance(dtype, pd.StringDtype) or arrow_text
        if text and not df[name].isna().all():  # no text at all: nulls of any type
            raise SchemaMismatchError(
                f"DataFrame column {str(name)!r} of dtype {dtype} does not convert to "
                f"{target}: text is not parsed into other types; convert the column first "
                f"(pd.to_numeric, pd.to_datetime, .astype)",
                column=str(name),
                expected=target,
            )


def _refuse_lost_values(df: Any, pa_table: pa.Table) -> None:
    """What pyarrow's conversion to a given schema loses without a word, refused naming
    the column, as a write into a table of that type refuses it: the time of day of a
    ``datetime64`` column made dates (a zoned one becomes its UTC date, not its own), and
    a finite float made infinite by a narrower float type."""
    import pyarrow.compute as pc

    position = {str(name): i for i, name in enumerate(df.columns)}
    for i, field in enumerate(pa_table.schema):
        target = field.type
        dates = pa.types.is_date(target)
        floats = pa.types.is_floating(target) and target.bit_width < 64
        if not (dates or floats) or field.name not in position:
            continue
        column = df.iloc[:, position[field.name]]
        if column.dtype.kind not in ("M", "f"):  # datetime64 (zoned too), numpy floats
            continue
        try:
            natural = pa.Array.from_pandas(column)
        except _CONVERSION_ERRORS:
            continue
        if dates and pa.types.is_timestamp(natural.type):
            per_day = 86_400 * {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[natural.type.unit]
            ticks = natural.view(pa.int64())
            lost = pc.sum(
                pc.not_equal(pc.subtract(ticks, pc.multiply(pc.divide(ticks, per_day), per_day)), 0)
            )
            if lost.as_py():
                raise SchemaMismatchError(
                    f"DataFrame column {field.name!r} of dtype {column.dtype} does not convert "
                    f"to {target}: {lost.as_py()} value(s) are not midnight (UTC), and their "
                    "time of day would be lost; use .dt.normalize() or .dt.date first",
                    column=field.name,
                    expected=target,
                )
        if floats and pa.types.is_floating(natural.type):
            wide = natural.cast(pa.float64())
            made = pc.and_(
                pc.is_inf(pa_table.column(i).cast(pa.float64())), pc.invert(pc.is_inf(wide))
            )
            lost = pc.sum(made).as_py()
            if lost:
                raise SchemaMismatchError(
                    f"DataFrame column {field.name!r} of dtype {column.dtype} does not fit "
                    f"{target}: {lost} value(s) beyond its range would become infinite",
                    column=field.name,
                    expected=target,
                )


def _maps_of_empty_lists(df: Any, pa_table: pa.Table, types: pa.Schema) -> pa.Table:
    """A map column whose rows are all empty or missing (a slice of what ``to_pandas``
    gives) is typed by pyarrow as a list of nulls, which no cast makes a map: it is
    converted to its type in ``types`` as a column pyarrow cannot type is."""
    position = {str(name): i for i, name in enumerate(df.columns)}
    for i, field in enumerate(pa_table.schema):
        wanted = types.field(field.name).type if field.name in types.names else None
        untyped = pa.types.is_list(field.type) and pa.types.is_null(field.type.value_type)
        if wanted is not None and pa.types.is_map(wanted) and untyped:
            column = pa.Array.from_pandas(df.iloc[:, position[field.name]], type=wanted)
            pa_table = pa_table.set_column(i, field.with_type(wanted), column)
    return pa_table


def _by_column(df: Any, types: pa.Schema) -> pa.Table:
    """Each column as pyarrow infers it or, where it cannot (a map column as
    ``to_pandas`` gives it: lists of key-value pairs), as its type in ``types``."""
    arrays = []
    for i, name in enumerate(df.columns):
        column = df.iloc[:, i]
        try:
            arrays.append(pa.Array.from_pandas(column))
        except _CONVERSION_ERRORS:
            if str(name) not in types.names:
                raise
            arrays.append(pa.Array.from_pandas(column, type=types.field(str(name)).type))
    return pa.Table.from_arrays(arrays, names=[str(n) for n in df.columns])


def _conversion_error(df: Any, schema: pa.Schema | None, exc: Exception) -> Exception:
    """The column whose conversion fails on its own (the error path only: one column
    at a time); pyarrow's error where none does."""
    for name in df.columns:
        dtype = None
        if schema is not None and str(name) in schema.names:
            dtype = schema.field(str(name)).type
        try:
            pa.Array.from_pandas(df[name], type=dtype)
        except _CONVERSION_ERRORS as error:
            target = "Arrow" if dtype is None else str(dtype)
            return SchemaMismatchError(
                f"DataFrame column {str(name)!r} of dtype {df[name].dtype} does not convert "
                f"to {target}: {error}",
                column=str(name),
                expected=dtype,
            )
    return exc


def with_index_columns(df: Any) -> Any:
    """``df`` with each named index level as a column; an unnamed index dropped."""
    names = [n for n in df.index.names if n is not None]
    if not names:
        return df
    clash = [str(n) for n in names if n in df.columns]
    if clash:
        raise SchemaError(
            f"the DataFrame's index level(s) {clash} have the names of columns: rename "
            "one, or drop the index (df.reset_index(drop=True))"
        )
    unnamed = [i for i, n in enumerate(df.index.names) if n is None]
    if unnamed:
        # Beside named levels an unnamed one holds data (a groupby key), not row numbers:
        # dropping it silently would lose its values.
        raise SchemaError(
            f"the DataFrame's index level(s) {unnamed} have no name, beside named ones: "
            "name them (df.index.set_names) to keep them as columns, or drop them "
            f"(df.reset_index(level={unnamed}, drop=True))"
        )
    return df.reset_index()


def normalized(pa_table: pa.Table, explicit: frozenset[str] = frozenset()) -> pa.Table:
    """``pa_table`` in the table types above; the columns named in ``explicit`` (a
    ``pd.ArrowDtype``) keep theirs."""
    columns, fields = [], []
    for field, column in zip(pa_table.schema, pa_table.columns):
        dtype = field.type if field.name in explicit else _table_type(field.type)
        if dtype != field.type:
            column = _cast(column, dtype, field.name)
        columns.append(column)
        fields.append(pa.field(field.name, dtype, field.nullable))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def dataframe_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` in the table types above where pyarrow made it of a DataFrame (it then
    carries pandas' metadata: Ray's blocks of ``ray.data.from_pandas`` and of pandas
    batches), so that a table made from those rows has the types ``from_pandas`` gives;
    a column whose type was chosen rather than inferred keeps it (a ``pd.ArrowDtype``, or
    a time in another unit than its dtype's: ``pa.Table.from_pandas(df, schema=...)``),
    and any other schema is returned as is."""
    try:
        described = json.loads((schema.metadata or {})[b"pandas"])["columns"]
        dtypes = {str(c.get("field_name", c.get("name"))): str(c["numpy_type"]) for c in described}
    except (AttributeError, KeyError, TypeError, ValueError):
        return schema
    fields = [
        f if _chosen(f.type, dtypes.get(f.name)) else f.with_type(_table_type(f.type))
        for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def _chosen(dtype: pa.DataType, pandas_dtype: str | None) -> bool:
    """Whether a column of a DataFrame's Arrow schema has a type its pandas dtype (as
    pandas' metadata names it, e.g. ``datetime64[us]``) did not give it."""
    if pandas_dtype is None or pandas_dtype.endswith("[pyarrow]"):
        return True  # a column added since, or a pd.ArrowDtype: typed as named
    if pa.types.is_timestamp(dtype) or pa.types.is_duration(dtype):
        unit = pandas_dtype.partition("[")[2].partition(",")[0].rstrip("]")
        return pandas_dtype.startswith(("datetime64", "timedelta64")) and unit != dtype.unit
    return False


def strings_normalized(pa_table: pa.Table, keep: frozenset[str] = frozenset()) -> pa.Table:
    """``pa_table`` with its top-level string columns of any Arrow string type as
    ``string``, but those named in ``keep``: what a write of a DataFrame hands to the
    table's casts."""
    changed = False
    columns, fields = [], []
    for field, column in zip(pa_table.schema, pa_table.columns):
        if is_text(field.type) and field.type != pa.string() and field.name not in keep:
            try:
                column, field = column.cast(pa.string()), field.with_type(pa.string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # over 2 GiB in a chunk, or an old pyarrow: the table's cast decides
            else:
                changed = True
        columns.append(column)
        fields.append(field)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields)) if changed else pa_table


def _table_type(dtype: pa.DataType) -> pa.DataType:
    t = pa.types
    if is_text(dtype):
        return pa.string()
    if t.is_timestamp(dtype):
        return pa.timestamp(TIME_UNIT, dtype.tz)
    if t.is_duration(dtype):
        return pa.duration(TIME_UNIT)
    if t.is_dictionary(dtype):
        return pa.dictionary(dtype.index_type, _table_type(dtype.value_type), dtype.ordered)
    if t.is_list(dtype) or t.is_large_list(dtype):
        make = pa.list_ if t.is_list(dtype) else pa.large_list
        return make(dtype.value_field.with_type(_table_type(dtype.value_type)))
    if t.is_struct(dtype):
        return pa.struct([f.with_type(_table_type(f.type)) for f in dtype])
    return dtype


def is_text(dtype: pa.DataType) -> bool:
    """string, large_string or string_view."""
    t = pa.types
    is_view = getattr(t, "is_string_view", lambda _: False)
    return bool(t.is_string(dtype) or t.is_large_string(dtype) or is_view(dtype))


def _cast(column: pa.ChunkedArray, dtype: pa.DataType, name: str) -> pa.ChunkedArray:
    try:
        return column.cast(dtype, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(
            f"column {name!r} of type {column.type} does not fit {dtype}, the type a "
            f"DataFrame column of its kind gets ({exc}); give from_pandas a schema that "
            f"names the type to store, e.g. pa.timestamp('us')"
        ) from exc


def arrow_dtype_columns(df: Any) -> frozenset[str]:
    import pandas as pd

    return frozenset(str(n) for n, d in df.dtypes.items() if isinstance(d, pd.ArrowDtype))


def types_mapper_arg(value: Any) -> Callable[[pa.DataType], Any] | None:
    """``to_pandas``' ``types_mapper``, checked before anything is read: pyarrow's own
    refusal of a dict or a dtype came out as a bare TypeError ("'dict' object is not
    callable") after the whole read."""
    if value is not None and not callable(value):
        raise InvalidArgumentError(
            "types_mapper",
            value,
            "a function from an Arrow type to a pandas dtype (pd.ArrowDtype, or a dict's "
            ".get) or None",
        )
    return value  # type: ignore[no-any-return]


def arrow_to_pandas(
    pa_table: pa.Table, types_mapper: Callable[[pa.DataType], Any] | None = None
) -> Any:
    """``pa_table`` as a DataFrame in the installed pandas' defaults, an integer column
    with nulls as a nullable ``Int64`` (and the like); ``types_mapper`` as pyarrow's,
    asked first."""
    import pandas as pd

    nullable = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.uint8(): pd.UInt8Dtype(),
        pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(),
        pa.uint64(): pd.UInt64Dtype(),
    }
    try:
        # Integers with nulls inside structs and lists as Python ints, not float64, which
        # rounds values above 2**53 and gives a type the table's column refuses; the
        # top-level ones become nullable below.
        df = pa_table.to_pandas(types_mapper=types_mapper, integer_object_nulls=True)
    except (pa.ArrowInvalid, ValueError, OverflowError) as exc:
        raise _unconvertible(pa_table, types_mapper, exc) from exc
    for name, column in zip(pa_table.column_names, pa_table.columns):
        if column.type in nullable and column.null_count:
            mapped = types_mapper(column.type) if types_mapper is not None else None
            if mapped is None:
                df[name] = column.to_pandas(types_mapper=nullable.get).array
    return df


def _unconvertible(
    pa_table: pa.Table, types_mapper: Callable[[pa.DataType], Any] | None, exc: Exception
) -> Exception:
    """The column pandas cannot hold (the error path only: one column at a time): a date
    beyond Python's years 1 to 9999 or a time with nanoseconds has no ``datetime`` value,
    which pandas makes of dates and times; pyarrow's error where no column is alone."""
    for name, column in zip(pa_table.column_names, pa_table.columns):
        try:
            column.to_pandas(types_mapper=types_mapper)
        except (pa.ArrowInvalid, ValueError, OverflowError) as error:
            return UnsupportedTypeError(
                name,
                column.type,
                "pandas' Python dates and times",
                f"{error}; read it with to_pandas(types_mapper=pd.ArrowDtype), which keeps "
                "Arrow's values",
            )
    return exc


def refuse_duplicate_names(names: list[str], owner: str) -> None:
    """A ``SchemaMismatchError`` naming the duplicates, where a name would mean two
    columns (a write's data, a DataFrame, a merge source)."""
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise SchemaMismatchError(f"{owner} has duplicate column(s) {dup}", column=dup[0])
