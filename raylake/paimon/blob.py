"""Paimon's ``.blob`` files: the values of one BLOB column, one record per row.

A BLOB column of a data-evolution table is written to its own files (Paimon's
``BlobFileFormat``), beside the files that hold the other columns of the same rows
(raylake/paimon/evolution.py lines them up by row id). Layout, little-endian:

- records, one per row: the magic number 1481511375 (4 bytes), the value's bytes,
  the record's length (8 bytes, magic and these 12 bytes included) and the CRC-32 of
  everything before it in the record (4 bytes);
- the index: each record's length, as Paimon's ``DeltaVarintCompressor`` writes a
  long array (the first value and then the differences, each zigzag varint); a length
  of -1 is a null (no record), -2 a placeholder (no record; read as null);
- the index's length (4 bytes) and the format version (1 byte, 1).

Values are read whole (as ``binary``); every record's magic number and CRC are checked.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pyarrow as pa

from raylake.errors import CorruptMetadataError

MAGIC = 1481511375
VERSION = 1
_NULL, _PLACEHOLDER = -1, -2
_RECORD_OVERHEAD = 16  # magic (4), length (8), CRC (4)


def read_blob(source: Any, columns: list[str], path: str) -> pa.Table:
    """The file's values as a binary column under each name of ``columns`` (the blob
    column's name in the schema the file was written with; none: rows only)."""
    data = source.read()
    values = blob_values(data, path)
    array = pa.array(values, pa.binary())
    if not columns:
        return pa.table({"_": pa.nulls(len(values))}).select([])
    return pa.table({c: array for c in columns})


def blob_values(data: bytes, path: str) -> list[bytes | None]:
    if len(data) < 5 or data[-1] != VERSION:
        raise CorruptMetadataError(path, f"not a Paimon blob file of version {VERSION}")
    (index_length,) = struct.unpack_from("<i", data, len(data) - 5)
    index_start = len(data) - 5 - index_length
    if index_length < 0 or index_start < 0:
        raise CorruptMetadataError(path, f"blob index length {index_length} out of range")
    lengths = _delta_varints(data[index_start : len(data) - 5], path)
    values: list[bytes | None] = []
    offset = 0
    for i, length in enumerate(lengths):
        if length in (_NULL, _PLACEHOLDER):
            values.append(None)
            continue
        end = offset + length
        if length < _RECORD_OVERHEAD or end > index_start:
            raise CorruptMetadataError(path, f"blob record {i} of length {length} out of range")
        (magic,) = struct.unpack_from("<i", data, offset)
        (stored,) = struct.unpack_from("<q", data, end - 12)
        (crc,) = struct.unpack_from("<I", data, end - 4)
        if magic != MAGIC or stored != length or zlib.crc32(data[offset : end - 4]) != crc:
            raise CorruptMetadataError(path, f"blob record {i} fails its magic number or CRC")
        values.append(data[offset + 4 : end - 12])
        offset = end
    if offset != index_start:
        raise CorruptMetadataError(
            path, f"blob records span {offset} bytes, the data region {index_start}"
        )
    return values


def _delta_varints(index: bytes, path: str) -> list[int]:
    """Paimon's DeltaVarintCompressor: zigzag varints of the first value and the
    differences that follow."""
    out: list[int] = []
    previous, value, shift = 0, 0, 0
    for byte in index:
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte & 0x80:
            if shift > 63:
                raise CorruptMetadataError(path, "blob index holds a varint over 64 bits")
            continue
        delta = (value >> 1) ^ -(value & 1)
        previous = delta if not out else previous + delta
        out.append(previous)
        value, shift = 0, 0
    if shift:
        raise CorruptMetadataError(path, "blob index ends inside a varint")
    return out
