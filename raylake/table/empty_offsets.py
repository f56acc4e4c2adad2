"""Nested arrays of no values whose offsets buffer is empty, given their one offset.

Spark's Java Arrow writer sends a list, map or string that holds no value at all (every
row's ``array()`` empty, or every row null) with an offsets buffer of 0 bytes, where the
format asks for length + 1 offsets. Arrow's validation allows that of an array of
length 0, but pyarrow's ``nbytes`` (26.0.1) reads the missing offset when such an array
is nested in another list or map: a Spark write of an ``array<map<string, bigint>>``
column empty in every row of a partition crashed its Python worker (a segfault) where
the writer measured its buffer. Each such array gets a buffer of one zero offset here,
before anything measures it; an array with all its offsets is returned as it is.
"""

from __future__ import annotations

import pyarrow as pa

_OFFSET_LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_map)
_LARGE = (pa.types.is_large_list, pa.types.is_large_string, pa.types.is_large_binary)
_BYTES = (pa.types.is_string, pa.types.is_binary, *_LARGE[1:])


def _is(tests: tuple[object, ...], dtype: pa.DataType) -> bool:
    return any(test(dtype) for test in tests)  # type: ignore[operator]


def _is_list(dtype: pa.DataType) -> bool:
    """A list or map (the list of its entries): an array over one child, ``.values``."""
    return _is(_OFFSET_LISTS, dtype) or pa.types.is_fixed_size_list(dtype)


def _offset_width(dtype: pa.DataType) -> int:
    if not _is((*_OFFSET_LISTS, *_BYTES), dtype):
        return 0
    return 8 if _is(_LARGE, dtype) else 4


def _child_type(dtype: pa.DataType) -> pa.DataType:
    if pa.types.is_map(dtype):
        return pa.struct([dtype.key_field, dtype.item_field])
    return dtype.value_type


def _nests_offsets(dtype: pa.DataType) -> bool:
    """Whether a field below the top of ``dtype`` has offsets (a list, map or string)."""
    if pa.types.is_struct(dtype):
        children = [f.type for f in dtype]
    elif _is_list(dtype):
        children = [_child_type(dtype)]
    else:
        return False
    return any(_offset_width(child) or _nests_offsets(child) for child in children)


def with_all_offsets(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` with an offsets buffer of length + 1 entries at every nested level."""
    if not _nests_offsets(column.type):
        return column
    old = column.chunks  # each access makes new wrappers: compared with these
    chunks = [_full(chunk) for chunk in old]
    if all(new is was for new, was in zip(chunks, old)):
        return column
    return pa.chunked_array(chunks, column.type)


def _full(array: pa.Array) -> pa.Array:
    dtype = array.type
    if pa.types.is_struct(dtype):
        fields = [array.field(i) for i in range(dtype.num_fields)]
        children = [_full(child) for child in fields]
        if all(new is old for new, old in zip(children, fields)):
            return array
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(dtype), mask=mask)
    width = _offset_width(dtype)
    # Its own buffers: validity, then offsets (lists, maps, strings), then data (strings).
    own = array.buffers()[: 1 if not width else 2 if _is_list(dtype) else 3]
    needed = width * (array.offset + len(array) + 1)
    short = width and (own[1] is None or own[1].size < needed)
    if short:  # only an array of no rows may lack them, so its offsets are all zero
        own = [own[0], pa.py_buffer(bytes(needed)), *own[2:]]
    old = array.values if _is_list(dtype) else None  # the whole child, as offsets index it
    values = None if old is None else _full(old)
    if not short and values is old:
        return array
    if values is None:
        return pa.Array.from_buffers(dtype, len(array), own, offset=array.offset)
    return pa.Array.from_buffers(dtype, len(array), own, offset=array.offset, children=[values])
