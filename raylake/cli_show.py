"""Rows as ``raylake scan`` prints them: values as stored, in either format.

Python and pandas cannot show some values as they are: ``datetime.time`` holds no
nanoseconds (1 ns printed 00:00:00), ``date`` and ``datetime`` stop at year 9999 (a
later one raised OverflowError), pandas prints a float column's null as NaN, as a NaN
(pandas 3 a string column's too, as the string "NaN"), and turns the integers of a
list or struct with a null into floats (an id above 2**53 printed rounded, 1 as 1.0).
Such columns are shown as Arrow's text or as Python's own values instead.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from raylake.map_arrays import from_zero, map_from_parts
from raylake.table.pandas_types import arrow_to_pandas


def printable(result: pa.Table) -> pa.Table:
    """``result`` with each column Python cannot hold exactly as Arrow's text: one with
    a time with nanoseconds, or a date, timestamp or duration beyond what Python's hold
    (year 9999, a billion days), nested ones too."""
    for i, column in enumerate(result.columns):
        t = column.type
        if _has_nanosecond_time(t) or (_has_temporal(t) and not _converts(column)):
            result = result.set_column(i, result.field(i).name, _text(column))
    return result


def _text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` with its dates, times, timestamps and durations as text, nested ones
    too, each as a top-level one of its type is shown."""
    return pa.chunked_array([_text_array(c) for c in column.chunks], _as_text(column.type))


def _text_array(arr: pa.Array) -> pa.Array:
    """A timestamp, date or duration by numpy, whose values reach any year (Arrow's text
    stops at year 32767, as ``<value out of range: N>``); a list, map or struct rebuilt
    from its children as text (their offsets and nulls kept); anything else by Arrow's
    cast."""
    t = arr.type
    if not _has_temporal(t):
        return arr
    mask = arr.is_null()
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_duration(t):
        return pa.array(_numpy_text(arr), pa.string(), mask=mask.to_numpy(zero_copy_only=False))
    if pa.types.is_map(t):
        offsets, keys, items = from_zero(arr.offsets, arr.keys, arr.items)
        keys, items = _text_array(keys), _text_array(items)
        return map_from_parts(offsets, keys, items, mask, _as_text(t))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        offsets, values = from_zero(arr.offsets, arr.values)
        return cls.from_arrays(offsets, _text_array(values), _as_text(t), mask=mask)
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        return pa.FixedSizeListArray.from_arrays(_text_array(values), type=_as_text(t), mask=mask)
    if pa.types.is_struct(t):
        fields = list(_as_text(t))
        return pa.StructArray.from_arrays(
            [_text_array(c) for c in arr.flatten()], fields=fields, mask=mask
        )
    return arr.cast(_as_text(t))


def _numpy_text(arr: pa.Array) -> Any:
    import numpy as np

    t = arr.type
    values = arr.to_numpy(zero_copy_only=False)  # datetime64 or timedelta64 in its unit
    if pa.types.is_duration(t):
        return np.char.add(values.astype(np.int64).astype(str), f" {t.unit}")
    unit = "D" if pa.types.is_date(t) else t.unit
    zone = "UTC" if getattr(t, "tz", None) else "naive"  # an instant: UTC, with a Z
    return np.datetime_as_string(values, unit=unit, timezone=zone)  # type: ignore[call-overload]


def table_text(result: pa.Table) -> str:
    """``result`` (already :func:`printable`) as a text table, as pandas prints it, with
    every control character escaped (nested values' by ``repr()``)."""
    if result.num_rows == 0:  # pandas prints "Empty DataFrame / Columns: [...] / Index: []"
        return "  ".join(escaped(name) for name in result.column_names)
    import pandas as pd

    df = arrow_to_pandas(result)
    for name, column in zip(result.column_names, result.columns):
        t = column.type
        if pa.types.is_nested(t):
            # Python's text of each value: pandas drops the quotes of strings inside a
            # list or map, so ['a, b'] and ['a', 'b'] both printed [a, b].
            df[name] = pd.Series([_repr(v) for v in column.to_pylist()], dtype=object)
        elif _is_text(t):
            # pandas escapes only \n, \r and \t, and prints a null string (pandas 3) as
            # NaN, as it prints the string "NaN"; an ESC or NUL went to the terminal.
            df[name] = pd.Series([_escaped(v) for v in column.to_pylist()], dtype=object)
        elif pa.types.is_floating(t) and column.null_count:
            # Arrow's shortest text (nan, 1e+308); pandas would print 1e308 digit by digit.
            df[name] = pd.Series(column.cast(pa.string()).to_pylist(), dtype=object)
    df.columns = [escaped(name) for name in result.column_names]
    with pd.option_context("display.max_rows", None, "display.width", 200):
        return str(df.to_string(index=False))


def escaped(text: str) -> str:
    """``text`` with each character a terminal would act on or hide (ESC, NUL, a line
    break: not ``str.isprintable``) as Python's escape, as ``repr()`` writes it."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _escaped(value: object) -> object:
    # a dictionary column's values may be numbers: only text is escaped
    return escaped(value) if isinstance(value, str) else value


def _repr(value: object) -> str | None:
    return None if value is None else repr(value)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)


def _has_nanosecond_time(t: pa.DataType) -> bool:
    if pa.types.is_time64(t):
        return bool(t.unit == "ns")
    return any(_has_nanosecond_time(f.type) for f in _children(t))


def _has_temporal(t: pa.DataType) -> bool:
    if pa.types.is_temporal(t):
        return True
    return any(_has_temporal(f.type) for f in _children(t))


def _children(t: pa.DataType) -> list[pa.Field]:
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    if pa.types.is_nested(t):
        return [t.field(i) for i in range(t.num_fields)]
    return []


def _as_text(t: pa.DataType) -> pa.DataType:
    """``t`` with its dates, times, timestamps and durations as strings (Arrow casts each
    nested value in place)."""
    if pa.types.is_temporal(t):
        return pa.string()
    if pa.types.is_map(t):
        return pa.map_(_as_text(t.key_type), t.item_field.with_type(_as_text(t.item_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_as_text(t.value_type)), t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_as_text(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_as_text(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_as_text(f.type)) for f in _children(t)])
    return t


def _converts(column: pa.ChunkedArray) -> bool:
    try:
        column.to_pylist()
    except (OverflowError, ValueError):
        return False
    return True
