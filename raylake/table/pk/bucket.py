"""Bucket assignment: a stable, documented hash of the primary key, vectorized.

Every process, machine, Python version and engine (Spark executors call this same
function) must put a key in the same bucket, so Python's ``hash()`` is out. The
function is plain 64-bit integer arithmetic, written down precisely in
docs/primary-keys.md so that another language can reproduce it, and pinned by
golden values in tests/table/test_pk_bucket.py. All work is numpy over whole
Arrow arrays; there is no Python loop over rows.

Per column, each value becomes a uint64 ``h``:

- integers, booleans, dates, times, timestamps, durations: the value as a signed
  64-bit integer (its storage unit: days, ms, us, ...), reinterpreted as uint64
  (uint64 columns as they are), then ``fmix64``;
- strings, binaries, fixed-size binaries, decimals: the bytes (UTF-8; decimals as
  their little-endian two's-complement unscaled integer, 16 or 32 bytes) fold into
  ``p = sum((b[i] + 1) * P**(L-1-i)) mod 2**64`` with ``P = 0x100000001B3``, then
  ``h = fmix64(p ^ L)`` where ``L`` is the length in bytes.

Columns combine in key order: ``acc = 0``, then ``acc = fmix64(acc * G + h)`` with
``G = 0x9E3779B97F4A7C15``, all mod 2**64. The bucket is ``acc mod buckets``.
``fmix64`` is MurmurHash3's 64-bit finalizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from raylake.errors import SchemaError

_P = np.uint64(0x100000001B3)
_G = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
# Strings are hashed this many rows at a time, to bound the per-byte temporaries.
_CHUNK_ROWS = 1 << 18

ArrayLike: TypeAlias = "pa.Array | pa.ChunkedArray"


def fmix64(k: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer over a uint64 array (wrapping arithmetic)."""
    k = k ^ (k >> _S33)  # the one copy; the rest works in place
    np.multiply(k, _C1, out=k)
    np.bitwise_xor(k, k >> _S33, out=k)
    np.multiply(k, _C2, out=k)
    np.bitwise_xor(k, k >> _S33, out=k)
    return k


def is_hashable_key_type(dtype: pa.DataType) -> bool:
    """Whether a column of this type may be (part of) a primary key."""
    return _integer_view(dtype) is not None or _is_bytes_like(dtype)


def _integer_view(dtype: pa.DataType) -> pa.DataType | None:
    """The same-width integer type whose values order and hash like ``dtype``'s, or None."""
    t = pa.types
    if t.is_integer(dtype):
        return dtype
    if t.is_boolean(dtype):
        return pa.bool_()
    if t.is_date32(dtype) or t.is_time32(dtype):
        return pa.int32()
    if t.is_date64(dtype) or t.is_time64(dtype) or t.is_timestamp(dtype) or t.is_duration(dtype):
        return pa.int64()
    return None


def _is_bytes_like(dtype: pa.DataType) -> bool:
    t = pa.types
    return (
        t.is_string(dtype)
        or t.is_large_string(dtype)
        or t.is_binary(dtype)
        or t.is_large_binary(dtype)
        or t.is_fixed_size_binary(dtype)
        or t.is_decimal(dtype)
    )


def integer_values(array: ArrayLike) -> np.ndarray | None:
    """The values of an integer-like column as a numpy integer array (None if not integer-like).

    Used for hashing and, by the merge, for fast sorting and searching: the numpy
    order of the result is Arrow's order of the original values.
    """
    view = _integer_view(array.type)
    if view is None:
        return None
    arr = _one_chunk(array)
    if pa.types.is_boolean(view):
        return np.asarray(arr.cast(pa.uint8()).to_numpy(zero_copy_only=False))
    if view != arr.type:
        arr = arr.view(view)
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def column_hash(array: ArrayLike) -> np.ndarray:
    """The uint64 hash of every value of one key column (see the module docstring)."""
    if array.null_count:
        raise SchemaError("a primary-key column holds nulls; they cannot be hashed")
    ints = integer_values(array)
    if ints is not None:
        if ints.dtype != np.uint64:
            ints = ints.astype(np.int64, copy=False)
        return fmix64(ints.view(np.uint64))
    if not _is_bytes_like(array.type):
        raise SchemaError(f"a primary-key column of type {array.type} cannot be hashed")
    data, offsets = _bytes_and_offsets(_one_chunk(array))
    out = np.empty(len(offsets) - 1, dtype=np.uint64)
    for start in range(0, len(out), _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, len(out))
        out[start:stop] = _hash_bytes(data, offsets[start : stop + 1])
    return out


def key_hash(columns: Sequence[ArrayLike]) -> np.ndarray:
    """The combined uint64 hash of the key columns, in key order."""
    if not columns:
        raise SchemaError("a key needs at least one column")
    acc = np.zeros(len(columns[0]), dtype=np.uint64)
    for column in columns:
        acc = fmix64(acc * _G + column_hash(column))
    return acc


def bucket_ids(columns: Sequence[ArrayLike], buckets: int) -> np.ndarray:
    """The bucket (0 .. buckets-1, int32) of every row, from its key columns in key order."""
    if buckets < 1:
        raise SchemaError(f"buckets must be >= 1, got {buckets}")
    if buckets == 1:
        return np.zeros(len(columns[0]) if columns else 0, dtype=np.int32)
    return (key_hash(columns) % np.uint64(buckets)).astype(np.int32)


def _one_chunk(array: ArrayLike) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    return array


def _bytes_and_offsets(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The value bytes and the int64 start offsets (n + 1 of them) of a bytes-like array."""
    dtype = arr.type
    if pa.types.is_decimal(dtype) or pa.types.is_fixed_size_binary(dtype):
        width = dtype.byte_width
        raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
        data = raw[arr.offset * width : (arr.offset + len(arr)) * width]
        return data, np.arange(len(arr) + 1, dtype=np.int64) * width
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        arr = arr.view(pa.large_binary() if pa.types.is_large_string(dtype) else pa.binary())
        dtype = arr.type
    offset_type = np.int64 if pa.types.is_large_binary(dtype) else np.int32
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[arr.offset : arr.offset + len(arr) + 1]
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.empty(0, np.uint8)
    )
    offsets = offsets.astype(np.int64)
    return data[offsets[0] : offsets[-1]], offsets - offsets[0]


def _hash_bytes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``fmix64(sum((b[i]+1) * P**(L-1-i)) ^ L)`` for each byte string, vectorized."""
    starts, ends = offsets[:-1], offsets[1:]
    lengths = (ends - starts).astype(np.uint64)
    lo, hi = int(starts[0]) if len(starts) else 0, int(ends[-1]) if len(ends) else 0
    chunk = data[lo:hi].astype(np.uint64) + np.uint64(1)
    poly = np.zeros(len(starts), dtype=np.uint64)
    if len(chunk):
        max_len = int(lengths.max())
        powers = np.ones(max_len, dtype=np.uint64)  # P**0 .. P**(max_len-1), wrapping
        powers[1:] = np.cumprod(np.full(max_len - 1, _P, dtype=np.uint64))
        # Each byte's exponent: the number of bytes after it in its own string.
        owner = np.repeat(np.arange(len(starts)), lengths.astype(np.int64))
        exponent = (ends[owner] - lo - 1) - np.arange(len(chunk))
        terms = chunk * powers[exponent]
        nonempty = lengths > 0
        sums = np.add.reduceat(terms, (starts[nonempty] - lo).astype(np.int64))
        poly[nonempty] = sums
    return fmix64(poly ^ lengths)


def bucket_column(pa_table: pa.Table, key: Sequence[str], buckets: int) -> pa.Array:
    """:func:`bucket_ids` of a table's key columns, as an int32 Arrow array."""
    return pa.array(bucket_ids([pa_table.column(k) for k in key], buckets), pa.int32())


__all__ = [
    "bucket_column",
    "bucket_ids",
    "column_hash",
    "fmix64",
    "integer_values",
    "is_hashable_key_type",
    "key_hash",
]
