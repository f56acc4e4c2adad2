"""Map arrays made from their parts, null rows included, on every pyarrow raylake takes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def map_from_parts(
    offsets: pa.Array,
    keys: pa.Array,
    items: pa.Array,
    null_rows: pa.Array,
    map_type: pa.DataType | None = None,
) -> pa.MapArray:
    """``MapArray.from_arrays`` with the rows ``null_rows`` marks null.

    Its ``mask`` came in pyarrow 17; before it (pyarrow 16 is the lowest raylake takes),
    a null row is a null offset, which Arrow reads as an empty row starting at the next
    offset: right for the null rows these maps have, which hold no entries.
    """
    try:
        return pa.MapArray.from_arrays(offsets, keys, items, type=map_type, mask=null_rows)
    except TypeError:  # "from_arrays() got an unexpected keyword argument 'mask'"
        pass
    nulls = np.append(null_rows.to_numpy(zero_copy_only=False), False)  # the end offset
    values = offsets.cast(pa.int32()).to_numpy(zero_copy_only=False)
    masked = pa.array(values, pa.int32(), mask=nulls)
    return pa.MapArray.from_arrays(masked, keys, items, type=map_type)


def from_zero(offsets: pa.Array, *children: pa.Array) -> list[pa.Array]:
    """A list or map slice's offsets from 0 (of their own type) and its part of the
    children: Arrow rebuilds a map with nulls only from offsets that start at 0, and
    only this part of the children is the slice's."""
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return [rebased, *(c.slice(start, end - start) for c in children)]
