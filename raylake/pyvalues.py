"""Arrow values as Python values that convert back to the same Arrow values.

Partition values, primary-key bounds and column statistics travel as Python values (in
data files, splits and filters) and are written back to manifests and turned into
Arrow scalars again. pyarrow gives a ``time64[ns]`` value as a ``datetime.time``, which
holds microseconds: 1 ns became 0, so two partitions became one, a file's maximum fell
below its values and pruned them, and a read filled the partition column with the
wrong time. Here such a value is a Python ``int`` of nanoseconds since midnight, which
pyarrow takes back as ``time64[ns]`` exactly.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


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


def exact_pylist(values: pa.Array | pa.ChunkedArray) -> list[Any]:
    """``values.to_pylist()``, exact for every type a table stores."""
    dtype = exact_type(values.type)
    return (values if dtype == values.type else values.cast(dtype)).to_pylist()


def exact_py(value: pa.Scalar) -> Any:
    """``value.as_py()``, exact for every type a table stores."""
    dtype = exact_type(value.type)
    return (value if dtype == value.type else value.cast(dtype)).as_py()
