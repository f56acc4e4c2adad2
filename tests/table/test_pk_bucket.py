"""The bucket hash: the documented function, reimplemented here row by row as the oracle."""

from __future__ import annotations

import datetime
import decimal
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples

from raylake.errors import SchemaError
from raylake.table.pk.bucket import bucket_ids, column_hash, key_hash

M = 2**64
P = 0x100000001B3
G = 0x9E3779B97F4A7C15


def fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) % M
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) % M
    return k ^ (k >> 33)


def reference_value_hash(value: Any, dtype: pa.DataType) -> int:
    """docs/primary-keys.md, one value at a time."""
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return reference_bytes_hash(value.encode())
    if pa.types.is_binary(dtype) or pa.types.is_fixed_size_binary(dtype):
        return reference_bytes_hash(value)
    if pa.types.is_decimal(dtype):
        unscaled = int(value.scaleb(dtype.scale))
        return reference_bytes_hash(unscaled.to_bytes(dtype.byte_width, "little", signed=True))
    as_int = pa.array([value], dtype)
    if pa.types.is_boolean(dtype):
        number = int(value)
    elif pa.types.is_integer(dtype):
        number = value
    else:
        width = pa.int32() if dtype.bit_width == 32 else pa.int64()
        number = as_int.view(width)[0].as_py()
    return fmix64(number % M)


def reference_bytes_hash(data: bytes) -> int:
    poly = 0
    for b in data:
        poly = (poly * P + b + 1) % M
    return fmix64(poly ^ len(data))


def reference_bucket(values: Sequence[Any], types: Sequence[pa.DataType], buckets: int) -> int:
    acc = 0
    for value, dtype in zip(values, types):
        acc = fmix64((acc * G + reference_value_hash(value, dtype)) % M)
    return acc % buckets


def test_golden_values_never_change() -> None:
    """Changing these breaks every existing table: keys would move to other buckets."""
    ints = pa.array([0, 1, -1, 42, 2**62], pa.int64())
    strings = pa.array(["", "a", "user-17", "héllo"], pa.string())
    assert bucket_ids([ints], 8).tolist() == [0, 2, 5, 3, 4]
    assert bucket_ids([strings], 8).tolist() == [0, 6, 7, 7]
    assert bucket_ids([ints.slice(0, 4), strings], 16).tolist() == [0, 4, 11, 0]
    assert int(key_hash([pa.array([1], pa.int64())])[0]) == 0x7D6E4AC38B2B1BE2


def test_same_bucket_in_a_fresh_process_with_another_hash_seed() -> None:
    code = (
        "import pyarrow as pa; from raylake.table.pk.bucket import bucket_ids;"
        "print(bucket_ids([pa.array(['a', 'bb', 'ccc']), pa.array([1, 2, 3])], 7).tolist())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    here = bucket_ids([pa.array(["a", "bb", "ccc"]), pa.array([1, 2, 3])], 7).tolist()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(here)


def test_integer_widths_and_chunking_do_not_matter() -> None:
    values = [5, -3, 100_000]
    expected = column_hash(pa.array(values, pa.int64()))
    assert (column_hash(pa.array(values, pa.int32())) == expected).all()
    chunked = pa.chunked_array([pa.array(values[:1]), pa.array(values[1:])])
    assert (column_hash(chunked) == expected).all()
    sliced = pa.array(["x", "yy", "zzz", "w"]).slice(1, 2)
    assert (column_hash(sliced) == column_hash(pa.array(["yy", "zzz"]))).all()


def test_buckets_spread_evenly() -> None:
    counts = np.bincount(bucket_ids([pa.array(np.arange(100_000))], 8), minlength=8)
    assert counts.min() > 11_500 and counts.max() < 13_500


def test_unhashable_input_is_rejected() -> None:
    with pytest.raises(SchemaError, match="nulls"):
        column_hash(pa.array([1, None]))
    with pytest.raises(SchemaError, match="double"):
        column_hash(pa.array([1.5]))


CASES: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.int8(), st.integers(-128, 127)),
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.uint16(), st.integers(0, 2**16 - 1)),
    (pa.bool_(), st.booleans()),
    (pa.string(), st.text(max_size=40)),
    (pa.large_string(), st.text(max_size=10)),
    (pa.binary(), st.binary(max_size=40)),
    (pa.binary(3), st.binary(min_size=3, max_size=3)),
    (pa.date32(), st.dates()),
    (pa.timestamp("us"), st.datetimes(min_value=datetime.datetime(1900, 1, 1))),
    (pa.time64("us"), st.times()),
    (
        pa.duration("ms"),
        st.timedeltas(
            min_value=datetime.timedelta(days=-999), max_value=datetime.timedelta(days=999)
        ).map(lambda d: datetime.timedelta(milliseconds=d // datetime.timedelta(milliseconds=1))),
    ),
    (
        pa.decimal128(12, 3),
        st.decimals(min_value=-(10**8), max_value=10**8, places=3).map(decimal.Decimal),
    ),
]


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), buckets=st.integers(1, 50))
def test_vectorized_hash_equals_the_documented_function(data: st.DataObject, buckets: int) -> None:
    chosen = data.draw(st.lists(st.sampled_from(CASES), min_size=1, max_size=3))
    rows = data.draw(st.lists(st.tuples(*[strategy for _, strategy in chosen]), max_size=12))
    types = [dtype for dtype, _ in chosen]
    columns = [pa.array([r[i] for r in rows], dtype) for i, dtype in enumerate(types)]
    expected = [reference_bucket(r, types, buckets) for r in rows]
    assert bucket_ids(columns, buckets).tolist() == expected
