"""Java-written ORC TIMESTAMP values as Java reads them (Apache ORC C++ bugs ORC-763/1287).

ORC stores a TIMESTAMP as seconds (relative to 2015-01-01 in the *writer's* time zone)
and nanoseconds. Java's writer adds a second to a negative value with a fraction of a
millisecond or more, and Java's reader takes it back, both in the writer's zone. The
C++ reader under pyarrow takes it back only when the value is negative *after* moving
it out of the writer's zone, so where the two signs differ, a value comes back a second
off: written by a JVM in Asia/Shanghai, ``1970-01-01 00:00:00.001`` reads as
``00:00:01.001`` (any wall clock within the zone's offset of the epoch).

:func:`java_timestamps` undoes that for the TIMESTAMP columns of a file whose writer is
Java and whose writer zone is not UTC: one vectorized pass per column. The writer zone
is in the stripe footer, which pyarrow does not expose: :func:`writer_time_zone` reads
it from the file's tail (a few protobuf fields). TIMESTAMP WITH LOCAL TIME ZONE columns
(ORC's TIMESTAMP_INSTANT) are not moved between zones and read right.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import UnsupportedPaimonError

_NONE, _ZLIB, _ZSTD = 0, 1, 5
_SECOND = 1_000_000_000
_MILLI = 1_000_000


def java_timestamps(table: pa.Table, reader: Any, source: Any, where: str) -> pa.Table:
    """``table`` (read from the ORC ``reader`` over ``source``) with its TIMESTAMP values
    as Java reads them."""
    naive = [i for i, f in enumerate(table.schema) if _has_naive_timestamp(f.type)]
    if not naive or not str(reader.writer).upper().endswith("JAVA"):
        return table
    zone = writer_time_zone(source, where)
    if zone in (None, "", "UTC", "GMT", "Etc/UTC", "Z"):
        return table
    for i in naive:
        field = table.schema.field(i)
        if not pa.types.is_timestamp(field.type):
            raise UnsupportedPaimonError(
                where,
                f"column {field.name!r} nests a TIMESTAMP in an ORC file a JVM wrote in "
                f"{zone}: pyarrow's ORC reader reads some of its values a second off "
                "(ORC-763), and raylake corrects top-level columns only",
            )
        table = table.set_column(i, field, _corrected(table.column(i), zone))
    return table


def _has_naive_timestamp(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.tz is None
    if pa.types.is_struct(t):
        return any(_has_naive_timestamp(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_naive_timestamp(t.value_type)
    if pa.types.is_map(t):
        return _has_naive_timestamp(t.key_type) or _has_naive_timestamp(t.item_type)
    return False


def _corrected(values: Any, zone: str) -> Any:
    """Take back the second the C++ reader got wrong: where the value is negative in the
    writer's zone (Java takes a second back) but not as read (C++ did not), and the
    other way round; only values with a fraction of a millisecond or more moved."""
    unit = values.type.unit
    nanos = values.cast(pa.timestamp("ns"))
    raw = nanos.cast(pa.int64())
    whole = pc.floor_temporal(nanos, unit="second").cast(pa.int64())
    fraction = pc.greater_equal(pc.subtract(raw, whole), _MILLI)
    instant = pc.assume_timezone(nanos, timezone=zone, ambiguous="earliest", nonexistent="earliest")
    java_negative = pc.less(instant.cast(pa.int64()), 0)
    read_negative = pc.less(raw, 0)
    late = pc.and_(fraction, pc.and_(java_negative, pc.invert(read_negative)))
    early = pc.and_(fraction, pc.and_(read_negative, pc.invert(java_negative)))
    shift = pc.subtract(
        pc.if_else(early, _SECOND, 0).cast(pa.int64()),
        pc.if_else(late, _SECOND, 0).cast(pa.int64()),
    )
    fixed = pc.add(raw, shift).cast(pa.timestamp("ns"))
    return fixed.cast(pa.timestamp(unit))


def writer_time_zone(source: Any, where: str) -> str | None:
    """The writer time zone of an ORC file's first stripe (None: no stripe, or none set).

    ``source`` is a seekable pyarrow input file. The tail: the last byte is the length
    of the postscript (uncompressed protobuf: footer length, compression); the footer
    lists the stripes; a stripe's footer (field 3) names the writer's zone."""
    size = source.size()
    source.seek(max(0, size - 256))
    tail = source.read()
    ps_length = tail[-1]
    postscript = _fields(tail[-1 - ps_length : -1])
    footer_length = int(postscript.get(1, [0])[0])
    compression = int(postscript.get(2, [_NONE])[0])
    source.seek(size - 1 - ps_length - footer_length)
    footer = _fields(_decompress(source.read(footer_length), compression, where))
    stripes = footer.get(3)
    if not stripes:
        return None
    stripe = _fields(stripes[0])
    offset, index, data, length = (int(stripe.get(k, [0])[0]) for k in (1, 2, 3, 4))
    source.seek(offset + index + data)
    stripe_footer = _fields(_decompress(source.read(length), compression, where))
    zone = stripe_footer.get(3)
    return bytes(zone[0]).decode() if zone else None


def _decompress(data: bytes, compression: int, where: str) -> bytes:
    if compression == _NONE:
        return data
    out = bytearray()
    at = 0
    while at + 3 <= len(data):
        header = data[at] | data[at + 1] << 8 | data[at + 2] << 16
        chunk = data[at + 3 : at + 3 + (header >> 1)]
        at += 3 + (header >> 1)
        if header & 1:  # stored as is
            out += chunk
        elif compression == _ZLIB:
            out += zlib.decompress(chunk, -15)
        elif compression == _ZSTD:
            out += _zstd(chunk)
        else:
            raise UnsupportedPaimonError(
                where,
                f"an ORC file compressed with codec {compression} holds TIMESTAMP values a "
                "JVM wrote: raylake reads the writer's time zone (to correct ORC-763) from "
                "zlib- or zstd-compressed files only",
            )
    return bytes(out)


def _zstd(chunk: bytes) -> bytes:
    try:
        from compression import zstd  # type: ignore[import-not-found]
    except ImportError:
        from backports import zstd  # type: ignore[import-not-found,no-redef]
    return bytes(zstd.decompress(chunk))


def _fields(buf: bytes) -> dict[int, list[Any]]:
    """The fields of a protobuf message by number: varints as ints, others as bytes."""
    out: dict[int, list[Any]] = {}
    for number, value in _walk(memoryview(buf)):
        out.setdefault(number, []).append(value)
    return out


def _walk(buf: memoryview) -> Iterator[tuple[int, Any]]:
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        wire = key & 7
        value: int | bytes
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire == 2:
            length, at = _varint(buf, at)
            value, at = bytes(buf[at : at + length]), at + length
        elif wire == 1:
            value, at = bytes(buf[at : at + 8]), at + 8
        elif wire == 5:
            value, at = bytes(buf[at : at + 4]), at + 4
        else:
            return
        yield key >> 3, value


def _varint(buf: memoryview, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, at
        shift += 7
