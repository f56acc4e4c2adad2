"""Arrow values as Python values that convert back to the same Arrow values.

Partition values, primary-key bounds and column statistics travel as Python values (in
data files, splits and filters) and are written back to manifests and turned into
Arrow scalars again. pyarrow gives a ``time64[ns]`` value as a ``datetime.time``, which
holds microseconds: 1 ns became 0, so two partitions became one, a file's maximum fell
below its values and pruned them, and a read filled the partition column with the
wrong time. Here such a value is a Python ``int`` of nanoseconds since midnight, which
pyarrow takes back as ``time64[ns]`` exactly. A date or timestamp beyond Python's
years 1 to 9999 has no Python value at all: statistics leave its bounds unknown
(raylake/format/stats.py), partition and key columns refuse it by name.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from raylake.errors import SchemaMismatchError


def exact_type(dtype: pa.DataType) -> pa.DataType:
    """The type whose Python values stand for ``dtype``'s exactly (the same, but for
    ``time64[ns]``, nested in structs too)."""
    if pa.types.is_time64(dtype) and dtype.unit == "ns":
        return pa.int64()
    if pa.types.is_struct(dtype):
        fields = [f.with_type(exact_type(f.type)) for f in dtype]
        if any(f.type != g.type for f, g in zip(fields, dtype)):
            return pa.struct(fields)
    return dtype


def exact_pylist(values: pa.Array | pa.ChunkedArray, column: str = "") -> list[Any]:
    """``values.to_pylist()``, exact for every type a table stores; a date or time
    beyond Python's years 1 to 9999 is a :class:`SchemaMismatchError` naming ``column``."""
    dtype = exact_type(values.type)
    try:
        return (values if dtype == values.type else values.cast(dtype)).to_pylist()
    except (OverflowError, ValueError) as exc:
        raise _out_of_range(column, values.type, exc) from exc


def exact_py(value: pa.Scalar, column: str = "") -> Any:
    """``value.as_py()``, exact for every type a table stores (refused as
    :func:`exact_pylist` refuses)."""
    dtype = exact_type(value.type)
    try:
        return (value if dtype == value.type else value.cast(dtype)).as_py()
    except (OverflowError, ValueError) as exc:
        raise _out_of_range(column, value.type, exc) from exc


def _out_of_range(column: str, dtype: pa.DataType, exc: Exception) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {column!r} of type {dtype} holds a value outside Python's dates (years 1 "
        f"to 9999: {exc}), which a partition or primary-key column cannot hold",
        column=column,
        actual=dtype,
    )
