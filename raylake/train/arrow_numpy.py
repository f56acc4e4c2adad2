"""Arrow types and columns as numpy: which types a loader takes, the dtype and shape
each becomes, and one column's conversion (a view of the Arrow buffer when it can be).

Types (docs/training.md): integers, floats and bools keep their type; timestamps
become int64 milliseconds since the epoch (UTC); dates, times and durations their
integer storage (date32: days, date64: ms); fixed-size lists become 2-D (or N-D)
arrays; strings and binaries become object arrays (TensorFlow), or reach a torch
transform (raylake/train/binary.py). Anything else is refused when the loader is made,
naming the column and what to do instead (``check_type``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import (
    SchemaArgumentError,
    SchemaError,
    UnknownColumnError,
    UnsupportedTypeError,
)
from raylake.expr.bind import LITERAL_ERRORS, literal_scalar

_TS_TO_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


def is_bytes(dtype: pa.DataType) -> bool:
    """A string or binary type, fixed-size binaries (hashes, UUIDs) included: what only a
    transform can turn into tensors, and TensorFlow holds as ``tf.string``."""
    return bool(
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_fixed_size_binary(dtype)
    )


def check_type(
    column: str,
    dtype: pa.DataType,
    target: str,
    strings: bool,
    feature: bool = False,
    named_strings: bool = False,
) -> None:
    """Refuse, naming the column, a type that cannot become an array of ``target``
    (``named_strings``: the loader takes strings in ``columns=``, as TensorFlow's does)."""
    if pa.types.is_fixed_size_list(dtype):
        value = dtype.value_type
        if not _is_numeric(value) and not pa.types.is_fixed_size_list(value):
            raise UnsupportedTypeError(
                column,
                dtype,
                target,
                "fixed-size lists must hold numbers or booleans; write its values as numbers, "
                f"or {_LEAVE_OUT}",
            )
        check_type(column, value, target, strings=False)
        return
    if _is_numeric(dtype) or _is_temporal(dtype):
        return
    if strings and is_bytes(dtype):
        return
    if is_bytes(dtype):
        hint = _string_hint(feature, named_strings)
    else:
        hint = next((h for is_kind, h in _HINTS if is_kind(dtype)), _LEAVE_OUT)
    raise UnsupportedTypeError(column, dtype, target, hint)


# What to do instead, by kind, for every type a table stores and no tensor holds: the
# loaders read whole top-level columns (no field of a struct, no key of a map), and a
# transform gets only binary and string columns, so the fixes are at write time.
_LEAVE_OUT = "leave it out of the columns (all are read unless columns= names some)"
_HINTS: tuple[tuple[Callable[[pa.DataType], bool], str], ...] = (
    (pa.types.is_decimal, f"cast it to float64 when writing, or {_LEAVE_OUT}"),
    (
        lambda t: pa.types.is_list(t) or pa.types.is_large_list(t),
        f"variable-length lists have no tensor shape; use a fixed-size list, or {_LEAVE_OUT}",
    ),
    (
        pa.types.is_struct,
        "the loaders read no field inside a struct; write the fields to train on as "
        f"columns of their own, or {_LEAVE_OUT}",
    ),
    (
        pa.types.is_map,
        "a map has no tensor shape; write the values to train on as columns of their own "
        f"(one per key), or {_LEAVE_OUT}",
    ),
    (
        pa.types.is_null,
        "a column of type null holds only nulls; give it a type with update_schema()'s "
        f"update_column (docs/schema-evolution.md) and write values into it, or {_LEAVE_OUT}",
    ),
)


def _string_hint(feature: bool, named_strings: bool) -> str:
    """What to do with a string or binary column a loader refused."""
    if feature and named_strings:
        return "name it in columns= (not feature_columns=), where it is a tf.string tensor"
    if feature:
        return (
            "name it in columns= (not feature_columns=) of a LakeIterableDataset with a "
            "transform=, which gets it as a list of bytes or str per batch to decode "
            '(docs/training.md, "Binary and string columns"); or tokenize or encode it '
            "into numbers first, or leave it out"
        )
    return (
        "decode it in a transform=: a LakeIterableDataset with one hands the "
        'column to it as a list of bytes or str per batch (docs/training.md, "Binary '
        'and string columns"); or tokenize or encode it first, or leave it out of the '
        "columns"
    )


def _is_numeric(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_boolean(dtype)
    )


def _is_temporal(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_timestamp(dtype)
        or pa.types.is_date(dtype)
        or pa.types.is_time(dtype)
        or pa.types.is_duration(dtype)
    )


def numpy_dtype(dtype: pa.DataType) -> np.dtype:
    """The numpy dtype a column of ``dtype`` becomes (object for strings)."""
    if pa.types.is_fixed_size_list(dtype):
        return numpy_dtype(dtype.value_type)
    if pa.types.is_timestamp(dtype) or pa.types.is_duration(dtype):
        return np.dtype(np.int64)
    if pa.types.is_date32(dtype) or pa.types.is_time32(dtype):
        return np.dtype(np.int32)
    if pa.types.is_date64(dtype) or pa.types.is_time64(dtype):
        return np.dtype(np.int64)
    if _is_numeric(dtype):
        return np.dtype(dtype.to_pandas_dtype())
    return np.dtype(object)


def inner_shape(dtype: pa.DataType) -> tuple[int, ...]:
    """The shape of one row's value: () for scalars, (n,) or (n, m, ...) for fixed-size lists."""
    shape: list[int] = []
    while pa.types.is_fixed_size_list(dtype):
        shape.append(dtype.list_size)
        dtype = dtype.value_type
    return tuple(shape)


class _UnfitFill(ValueError):
    """A fill value of another kind than its column's, or beyond the column's range; the
    message says why (Arrow's cast would have turned it into another value, or taken it)."""


# A time of day is [0, one day) in its unit (Arrow's time32 and time64 take any int).
_UNITS_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}
_MS_PER_DAY = 86_400_000


def fill_scalar(dtype: pa.DataType, fill: Any) -> pa.Scalar:
    """``fill`` as a value of ``dtype`` (of its innermost values, for a fixed-size list):
    what the nulls of a column of ``dtype`` are filled with. ``_UnfitFill``
    saying why, or Arrow's error (an OverflowError, for an int beyond 64 bits), where it
    cannot be one.

    Arrow casts across kinds that a fill value must not cross: NaN or 0.5 would fill a
    bool column with True, False a float column with 0.0, a number a string column with
    its digits, "1" an int column. Text fills only strings and binaries, which take text
    only (and dates and times, which take one written as text); a bool fills only bool
    columns, which take True, False, 0 or 1."""
    while pa.types.is_fixed_size_list(dtype):
        dtype = dtype.value_type
    _check_kind(dtype, fill)
    if _is_temporal(dtype) and _is_int(fill):
        return _storage_fill(dtype, int(fill))
    if _is_temporal(dtype) and isinstance(fill, str):
        # Read as a filter reads the same literal: Arrow's cast reads no time of day
        # ("12:00:00" into a time32 column was refused), and no text without an offset
        # into a timestamp column with a time zone.
        try:
            return literal_scalar(fill, dtype)
        except LITERAL_ERRORS as e:
            raise _UnfitFill(f"{fill!r} is not a value of a {dtype} column: {e}") from None
    filled = pa.scalar(fill).cast(dtype)
    if pa.types.is_floating(dtype) and _made_infinite(fill, filled):
        # Arrow's safe cast checks integers, not floats: 1e300 filled a float32 with inf
        raise _UnfitFill(f"{fill!r} is beyond the range of {dtype}")
    return filled


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_kind(dtype: pa.DataType, fill: Any) -> None:
    text = isinstance(fill, (str, bytes))
    dated = isinstance(fill, str) and _is_temporal(dtype)  # "2024-01-01" is a date's value
    if text != is_bytes(dtype) and not dated:
        raise _UnfitFill(f"{fill!r} is not a value of a {dtype} column")
    flag = isinstance(fill, (bool, np.bool_))
    if pa.types.is_boolean(dtype) and not (flag or (_is_int(fill) and fill in (0, 1))):
        raise _UnfitFill(f"{fill!r} is not a bool: a bool column takes True, False, 0 or 1")
    if flag and not pa.types.is_boolean(dtype):
        raise _UnfitFill(f"{fill!r} is a bool, which fills bool columns only")


def _storage_fill(dtype: pa.DataType, fill: int) -> pa.Scalar:
    """An int as a date, time, timestamp or duration column's integer storage, as its
    tensors hold it (date32: days), where it is a value of the column: a time of day
    within the day, a date64 a whole day (Arrow's spec for date64) of ms. Arrow casts an
    int64 to date64 and time64 but not to date32 or time32."""
    storage = pa.int32() if dtype.bit_width == 32 else pa.int64()
    bounds = np.iinfo(storage.to_pandas_dtype())
    if not bounds.min <= fill <= bounds.max:
        raise _UnfitFill(f"{fill} is beyond the range of {dtype}, stored as {storage}")
    if pa.types.is_time(dtype) and not 0 <= fill < _UNITS_PER_DAY[dtype.unit]:
        last = _UNITS_PER_DAY[dtype.unit] - 1
        raise _UnfitFill(
            f"{fill} is not a time of day: a {dtype} column holds 0 to {last} "
            f"{dtype.unit} since midnight"
        )
    if pa.types.is_date64(dtype) and fill % _MS_PER_DAY:
        raise _UnfitFill(
            f"{fill} is not a date: a date64 column holds whole days of {_MS_PER_DAY} ms"
        )
    return pa.scalar(fill, storage).cast(dtype)


def _made_infinite(fill: Any, filled: pa.Scalar) -> bool:
    value = filled.as_py()
    if value is None or math.isfinite(value):
        return False
    return isinstance(fill, (int, float, np.number)) and math.isfinite(fill)


def check_fill_null(
    fill_null: Any, table: pa.Schema, read: pa.Schema, unfilled: Collection[str] = ()
) -> Any:
    """``fill_null`` (one value for every column, or a dict of values by column; a dict
    comes back as a copy), checked when the loader is made against the columns ``read``
    of ``table``: a value that a column it may fill cannot hold is refused, naming the
    column, rather than failing at the first nulls of an epoch, in a DataLoader worker
    maybe (docs/training.md, "Batches"). One value is for every column that may hold
    nulls, but the ``unfilled`` ones (binary columns for a transform keep None)."""
    if fill_null is None:
        return None
    if not isinstance(fill_null, Mapping):
        # One value for every column fills those it fits (nan fills the float features,
        # not an int label that never holds nulls); a null met in a column it does not
        # fit raises, naming both (``to_numpy``). A value that fits none is a mistake.
        fillable = [f for f in read if f.name not in unfilled and _may_hold_nulls(f)]
        if fillable and not any(_fits(f, fill_null) for f in fillable):
            _check_fill(fillable[0], fill_null, "it fits none of the columns read")
        return fill_null
    fills = dict(fill_null)
    for name, value in fills.items():
        if name not in read.names:
            _refuse_unread(name, fills, table, read)
        if value is not None:
            _check_fill(read.field(name), value)
    return fills


def _may_hold_nulls(field: pa.Field) -> bool:
    """Nulls are possible: a column not declared ``not null`` (a primary key is), or a
    fixed-size list, whose values may be null all the same."""
    return bool(field.nullable or pa.types.is_fixed_size_list(field.type))


_CAST_ERRORS = (pa.ArrowException, OverflowError, TypeError, ValueError)


def _fits(field: pa.Field, value: Any) -> bool:
    try:
        fill_scalar(field.type, value)
    except _CAST_ERRORS:
        return False
    return True


def _check_fill(field: pa.Field, value: Any, hint: str = "") -> None:
    try:
        fill_scalar(field.type, value)
    except _CAST_ERRORS as e:
        # Our own refusals say why; Arrow's cast errors stay chained, as they are terse.
        notes = [n for n in (hint, str(e) if isinstance(e, _UnfitFill) else "") if n]
        why = f" ({'; '.join(notes)})" if notes else ""
        what = f"a value that column {field.name!r} ({field.type}) can hold{why}"
        raise SchemaArgumentError("fill_null", value, what) from e


def _column_fill(name: str, dtype: pa.DataType, fill: Any) -> pa.Scalar:
    """The value a column's nulls take; where one value for every column does not fit
    this one, the refusal names the column (a dict's values were checked up front)."""
    try:
        return fill_scalar(dtype, fill)
    except _CAST_ERRORS as e:
        raise SchemaError(
            f"column {name!r} ({dtype}) has null values, and fill_null={fill!r} is not a "
            f"value of its type ({e}); give fill_null a dict with a value for {name!r}, "
            "or filter the nulls out"
        ) from e


def _refuse_unread(name: str, fills: dict[str, Any], table: pa.Schema, read: pa.Schema) -> None:
    """Refuse a dict's column that is not read: not the table's at all (a typo), or one
    the loader was not asked to read (its fill would be ignored)."""
    if name not in table.names:
        raise UnknownColumnError(name, table.names)
    raise SchemaArgumentError(
        "fill_null",
        fills,
        f"a dict of columns the loader reads, {read.names} ({name!r} is a column of the "
        "table, but not read: select it or leave it out)",
    )


def to_numpy(name: str, column: pa.ChunkedArray | pa.Array, fill: Any = None) -> np.ndarray:
    """One column as a numpy array (a view of the Arrow buffer when it can be)."""
    if isinstance(column, pa.ChunkedArray):  # one chunk: no copy (combining copies)
        arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    else:
        arr = column
    if arr.null_count:
        if fill is None:
            raise SchemaError(
                f"column {name!r} has {arr.null_count} null value(s), which a tensor cannot "
                f"hold; pass fill_null={{{name!r}: <value>}} (or a value for every column), "
                "or filter them out"
            )
        if not pa.types.is_fixed_size_list(arr.type):
            arr = pc.fill_null(arr, _column_fill(name, arr.type, fill))
    dtype = arr.type
    if pa.types.is_fixed_size_list(dtype):
        return _fixed_size_list(name, arr, fill)
    if pa.types.is_timestamp(dtype):
        mul, div = _TS_TO_MS[dtype.unit]
        ints = arr.view(pa.int64()).to_numpy(zero_copy_only=False)
        return ints * mul if mul != 1 else (ints // div if div != 1 else ints)
    if pa.types.is_date(dtype) or pa.types.is_time(dtype) or pa.types.is_duration(dtype):
        storage = pa.int32() if dtype.bit_width == 32 else pa.int64()
        return arr.view(storage).to_numpy(zero_copy_only=False)
    return arr.to_numpy(zero_copy_only=False)


def _fixed_size_list(name: str, arr: pa.FixedSizeListArray, fill: Any) -> np.ndarray:
    n, width = len(arr), arr.type.list_size
    values = arr.values.slice(arr.offset * width, n * width)
    flat = to_numpy(name, values, fill)
    out = flat.reshape((n, width, *flat.shape[1:]))
    if arr.null_count:  # whole lists that are null: every element takes the fill value
        mask = arr.is_null().to_numpy(zero_copy_only=False)
        out = out.copy()
        # The value checked and converted as the list's values are (NaN is no bool).
        out[mask] = to_numpy(name, pa.array([_column_fill(name, arr.type, fill)]))[0]
    return out
