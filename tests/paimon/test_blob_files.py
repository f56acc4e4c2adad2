"""Paimon's .blob files (one BLOB column, raylake/paimon/blob.py), decoded against an
encoder written here from the format's description, and refused when damaged."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from java_corpus import ROOT
from property_depth import examples

import raylake
from raylake.errors import CorruptMetadataError
from raylake.paimon.blob import MAGIC, blob_values


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    zigzag &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode(values: list[bytes | None]) -> bytes:
    """A blob file as Paimon's BlobFormatWriter writes one (nulls: length -1)."""
    body, lengths = bytearray(), []
    for value in values:
        if value is None:
            lengths.append(-1)
            continue
        length = len(value) + 16
        record = struct.pack("<i", MAGIC) + value + struct.pack("<q", length)
        body += record + struct.pack("<I", zlib.crc32(record))
        lengths.append(length)
    index, previous = bytearray(), 0
    for i, length in enumerate(lengths):
        index += _varint(length if i == 0 else length - previous)
        previous = length
    return bytes(body) + bytes(index) + struct.pack("<i", len(index)) + b"\x01"


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.none() | st.binary(max_size=300), max_size=40))
def test_values_decode_as_written(values: list[bytes | None]) -> None:
    assert blob_values(encode(values), "f.blob") == values


def test_a_java_written_blob_file_decodes() -> None:
    path = next((ROOT / "parquet_blob_data_evolution_with_dense_stats").rglob("*.blob"))
    assert blob_values(path.read_bytes(), str(path)) == [b"Lily", b"Alice"]


@pytest.mark.parametrize("where", [0, 6, -6, -3, -1])
def test_a_damaged_file_is_refused(where: int) -> None:
    """A flipped byte in a magic number, a value, the index, its length or the version."""
    data = bytearray(encode([b"apple", None, b"banana"]))
    data[where] ^= 0x40
    with pytest.raises(CorruptMetadataError, match=r"f\.blob"):
        blob_values(bytes(data), "f.blob")


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_blob_values_of_rolled_files_line_up_with_their_rows(fmt: str) -> None:
    """Two .blob files tile each five-row file of the other columns (the writer rolled
    them at 50 bytes): projected and filtered reads keep each value with its row."""
    tbl = raylake.open_table(
        str(ROOT / f"{fmt}_blob_append_table_alter_table_with_cast_with_data_evolution")
    )
    names = ["Lily", "Alice", "Bob", "Cindy", "Dave", "Apple", "Banana", "Cherry", "Durian"]
    want = {100 + 10 * i: s.encode() for i, s in enumerate([*names, "Elderberry"])}
    got = tbl.to_arrow(columns=["f3", "f5"]).to_pylist()
    assert {r["f3"]: r["f5"] for r in got} == want
    late = tbl.to_arrow(columns=["f5"], filter="f3 >= 170 and f3 < 190").column("f5")
    assert sorted(late.to_pylist()) == [b"Cherry", b"Durian"]
    assert tbl.count() == 10
