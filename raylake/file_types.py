"""The types a JSON-lines file is read as for a table's columns, and the casts back.

pyarrow's JSON reader converts to most types, but reads a date or time only from a
number, never from text (``"2024-01-01"`` into a date column failed with "changed from
number to string"), and converts to no duration, float16, dictionary or fixed-size
binary at all. Those columns are read as JSON holds them (text, numbers) and then cast
to the table's types, as a CSV file's text is parsed into them (raylake/files.py). The
CSV reader parses no float16 (nor a duration before pyarrow 17): read as float64 and
int64, and cast.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def json_readable(t: pa.DataType, dates: bool) -> pa.DataType:
    """A type pyarrow's JSON reader reads, that casts to ``t``; with ``dates``, dates and
    times as text (the reader takes them only as numbers)."""
    if dates and (pa.types.is_date(t) or pa.types.is_time(t)):
        return pa.string()
    if pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_float16(t):
        return pa.float64()
    if pa.types.is_dictionary(t):
        return json_readable(t.value_type, dates)
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(json_readable(t.value_type, dates)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(json_readable(t.value_type, dates)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(json_readable(t.field(i).type, dates))
                          for i in range(t.num_fields)])  # fmt: skip
    return t


def csv_readable(t: pa.DataType) -> pa.DataType:
    """A type pyarrow's CSV reader parses, that casts to ``t``: it parses no float16,
    nor (before pyarrow 17) a duration."""
    if pa.types.is_float16(t):
        return pa.float64()
    if pa.types.is_duration(t):
        return pa.int64()
    return t


def cast_columns(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """``table`` with each column of ``schema`` read as another type cast to its own."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    for i, name in enumerate(table.column_names):
        if name in schema.names and table.column(i).type != schema.field(name).type:
            column = _cast(table.column(i), schema.field(name).type)
            table = table.set_column(i, table.field(i).with_type(column.type), column)
    return table


def _cast(column: pa.ChunkedArray, t: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_time(t) and pa.types.is_string(column.type):
        # Arrow casts no text to a time, but a day's text and time to a timestamp.
        day = pc.binary_join_element_wise("1970-01-01T", column, "")
        return day.cast(pa.timestamp("ns")).cast(t)
    return column.cast(t)
