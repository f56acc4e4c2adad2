"""Non-nullable fields of a nullable struct: their values under a null struct.

Spark marks the fields of ``named_struct(...)`` non-nullable and the struct itself
nullable; where the struct is null (a ``CASE`` without a struct, an outer join, a null
element of ``array(named_struct(...), null)``), its Arrow batches hold a null in the
field's array too. Such a null means nothing (the struct is null), and Parquet's
definition levels store the row without it, but pyarrow's writer refuses any null in a
non-nullable field ("declared non-nullable but contains nulls"). Those nulls are given
a value of the field's array here; a null in a non-nullable field of a struct that is
not null is a :class:`NullConstraintError` naming the field.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import NullConstraintError


def has_required_fields(dtype: pa.DataType) -> bool:
    """Whether a struct at any depth of ``dtype`` (in lists and maps too) has a
    non-nullable field."""
    if pa.types.is_struct(dtype):
        return any(not f.nullable or has_required_fields(f.type) for f in dtype)
    if pa.types.is_map(dtype):  # a map's key is non-nullable, and never under a null
        return has_required_fields(dtype.key_type) or has_required_fields(dtype.item_type)
    if _is_list(dtype):
        return has_required_fields(dtype.value_type)
    return False


def required_fields_filled(column: pa.ChunkedArray, name: str) -> pa.ChunkedArray:
    """``column`` with no null in a non-nullable struct field under a null struct."""
    chunks = [_filled(chunk, name) for chunk in column.chunks]
    return pa.chunked_array(chunks, column.type)


def _is_list(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
    )


def _with_values(array: pa.Array, values: pa.Array) -> pa.Array:
    """A list, fixed-size list or map ``array`` over other ``values`` (its own validity
    and offsets, its slice kept): ``values`` is the whole child, as ``.values`` gives it."""
    own = 1 if pa.types.is_fixed_size_list(array.type) else 2  # validity (and offsets)
    return pa.Array.from_buffers(
        array.type, len(array), array.buffers()[:own], offset=array.offset, children=[values]
    )


def _filled(array: pa.Array, name: str) -> pa.Array:
    dtype = array.type
    if not has_required_fields(dtype):
        return array
    if pa.types.is_map(dtype):  # its values are the struct of its entries' keys and values
        return _with_values(array, _filled(array.values, name))
    if _is_list(dtype):
        return _with_values(array, _filled(array.values, f"{name}.element"))
    mask = array.is_null() if array.null_count else None
    children = []
    for i, field in enumerate(dtype):
        child = _filled(array.field(i), f"{name}.{field.name}")
        if not field.nullable and child.null_count:
            child = _given_values(child, array, f"{name}.{field.name}")
        children.append(child)
    return pa.StructArray.from_arrays(children, fields=list(dtype), mask=mask)


def _given_values(child: pa.Array, parent: pa.Array, name: str) -> pa.Array:
    """``child`` with each null under a null ``parent`` replaced by one of its values."""
    real = pc.sum(pc.and_(child.is_null(), parent.is_valid())).as_py() or 0
    if real:
        raise NullConstraintError(name, int(real))
    is_valid = child.is_valid().to_numpy(zero_copy_only=False)
    valid = np.flatnonzero(is_valid)
    if valid.size == 0:  # every struct is null: any value of the type does
        return _defaults(child.type, len(child))
    # each null position takes the first value; the others keep their own
    return child.take(pa.array(np.where(is_valid, np.arange(len(child)), valid[0])))


def _defaults(dtype: pa.DataType, length: int) -> pa.Array:
    """``length`` values of ``dtype``: pyarrow gives a non-nullable field of a null struct
    made from Python a value (zero, empty) of its type."""
    holder = pa.struct([pa.field("value", dtype, nullable=False)])
    return pa.array([None] * length, holder).field(0)
