"""Paimon's BinaryRow, as manifests store partitions, keys and min/max statistics.

Serialized as a 4-byte big-endian arity, then the row: a null bit set (one header byte
for the row kind, then a bit per field, rounded up to 8-byte words), an 8-byte fixed
slot per field (little-endian), and a variable part. Strings, binaries, non-compact
decimals (precision > 18) and timestamps (precision > 3) live in the variable part:
their slot holds ``offset << 32 | length`` (offset from the row start), or, for at most
7 bytes, the bytes themselves with ``0x80 | length`` in the slot's last byte.

Decoding is per manifest entry (metadata), never per data row.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pandas as pd

from raylake.errors import CorruptMetadataError
from raylake.paimon.types import PaimonType

_EPOCH = datetime(1970, 1, 1)
_EPOCH_DATE = date(1970, 1, 1)
_FORMATS = {
    "BOOLEAN": "<?",
    "TINYINT": "<b",
    "SMALLINT": "<h",
    "INT": "<i",
    "INTEGER": "<i",
    "BIGINT": "<q",
    "FLOAT": "<f",
    "DOUBLE": "<d",
}


def null_bits_size(arity: int) -> int:
    return ((arity + 63 + 8) // 64) * 8


def decode_row(data: bytes, types: Sequence[PaimonType], where: str = "") -> tuple[Any, ...]:
    """The values of a serialized BinaryRow (arity prefix included), one per type.

    An empty buffer (statistics a writer did not keep) decodes to all None.
    """
    if not types:
        return ()
    if len(data) < 4:
        return (None,) * len(types)
    arity = struct.unpack_from(">i", data, 0)[0]
    if arity != len(types):
        raise CorruptMetadataError(
            where or "<manifest>", f"a BinaryRow of {arity} fields where {len(types)} were expected"
        )
    row = memoryview(data)[4:]
    fixed = null_bits_size(arity)
    return tuple(
        None if _is_null(row, i) else _value(row, fixed + 8 * i, t) for i, t in enumerate(types)
    )


def _is_null(row: memoryview, i: int) -> bool:
    bit = i + 8  # the first byte holds the row kind
    return bool(row[bit >> 3] & (1 << (bit & 7)))


def _value(row: memoryview, slot: int, t: PaimonType) -> Any:
    fmt = _FORMATS.get(t.root)
    if fmt is not None:
        return struct.unpack_from(fmt, row, slot)[0]
    if t.root == "DATE":
        return _EPOCH_DATE + timedelta(days=struct.unpack_from("<i", row, slot)[0])
    if t.root == "TIME":
        ms = struct.unpack_from("<i", row, slot)[0]
        return (datetime.min + timedelta(milliseconds=ms)).time()
    if t.root in ("STRING", "VARCHAR", "CHAR"):
        return bytes(_variable(row, slot)).decode("utf-8")
    if t.root in ("BYTES", "VARBINARY", "BINARY"):
        return bytes(_variable(row, slot))
    if t.root == "DECIMAL":
        return _decimal(row, slot, t)
    if t.root in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        return _timestamp(row, slot, t)
    return _Undecodable(t.root)


class _Undecodable:
    """A value of a type statistics cannot prune on (nested types): never compared."""

    def __init__(self, root: str) -> None:
        self.root = root


def is_decodable(value: Any) -> bool:
    return not isinstance(value, _Undecodable)


def _variable(row: memoryview, slot: int) -> memoryview:
    word = struct.unpack_from("<q", row, slot)[0]
    if row[slot + 7] & 0x80:  # short value inline in the slot
        return row[slot : slot + (row[slot + 7] & 0x7F)]
    offset, length = (word >> 32) & 0xFFFFFFFF, word & 0xFFFFFFFF
    return row[offset : offset + length]


def _decimal(row: memoryview, slot: int, t: PaimonType) -> Decimal:
    scale = t.scale or 0
    if t.is_compact:
        unscaled = struct.unpack_from("<q", row, slot)[0]
    else:
        word = struct.unpack_from("<q", row, slot)[0]
        offset, length = (word >> 32) & 0xFFFFFFFF, word & 0xFFFFFFFF
        unscaled = int.from_bytes(row[offset : offset + length], "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def _timestamp(row: memoryview, slot: int, t: PaimonType) -> datetime:
    if t.is_compact:
        millis, nanos = struct.unpack_from("<q", row, slot)[0], 0
    else:
        word = struct.unpack_from("<q", row, slot)[0]
        offset, nanos = (word >> 32) & 0xFFFFFFFF, word & 0xFFFFFFFF
        millis = struct.unpack_from("<q", row, offset)[0]
    micros, rest = divmod(nanos, 1000)
    value = _EPOCH + timedelta(milliseconds=millis, microseconds=micros)
    if rest:
        # A datetime drops the nanoseconds: a max of 00:00:00.000000003 would read as
        # 00:00:00 and prune the file from 'ts > 00:00:00'. Beyond pandas' range (and a
        # nanosecond column's) the statistic is unusable anyway and reads as unknown.
        try:
            return pd.Timestamp(value) + pd.Timedelta(nanoseconds=rest)
        except (OverflowError, pd.errors.OutOfBoundsDatetime):
            return value
    return value
