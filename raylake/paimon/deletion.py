"""Deletion vectors: which rows of a data file are deleted, as roaring bitmaps.

A snapshot's index manifest (Avro) lists index files of type ``DELETION_VECTORS``;
each names, per data file, a range of an index file in ``index/``. At that offset:
a 4-byte big-endian length, then the bitmap data, then a CRC-32 of it. The data starts
with a magic number that says the format:

- 32-bit (``BitmapDeletionVector``): magic 1581511376 big-endian, then a standard
  portable RoaringBitmap.
- 64-bit (``Bitmap64DeletionVector``, Iceberg's layout): magic 1681511377
  little-endian, then a portable 64-bit roaring bitmap (a little-endian count of
  32-bit bitmaps, each after its 4-byte high key).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from raylake.errors import CorruptMetadataError, MissingDependencyError, UnsupportedPaimonError
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.paimon.manifest import ADD, DELETE, MANIFEST_DIR, avro_records
from raylake.paimon.snapshot import INDEX_MANIFEST

INDEX_DIR = "index"
DELETION_VECTORS = "DELETION_VECTORS"
MAGIC_32 = 1581511376
MAGIC_64 = 1681511377


@dataclass(frozen=True)
class DeletionFile:
    """Where one data file's deletion vector lies."""

    path: str  # relative to the table root
    offset: int
    length: int
    cardinality: int | None
    # With `index-file-in-data-file-dir`, ``path`` is the index file's name, in the
    # directory of the data file it belongs to (raylake/paimon/scan.py joins them).
    in_data_dir: bool = False


def deletion_files(
    file_io: FileIO, snap: Snapshot, in_data_dir: bool = False
) -> dict[tuple[bytes, int, str], DeletionFile]:
    """The deletion vector of each data file at ``snap``: (partition, bucket, file name) ->.

    ``in_data_dir``: the table's index files lie beside its data files (the option
    `index-file-in-data-file-dir`), not in ``index/``."""
    index_manifest = snap.properties.get(INDEX_MANIFEST)
    if not index_manifest:
        return {}
    live: dict[tuple[bytes, int, str], dict] = {}
    for record in avro_records(file_io, f"{MANIFEST_DIR}/{index_manifest}"):
        if record["_INDEX_TYPE"] != DELETION_VECTORS:
            continue
        identity = (bytes(record["_PARTITION"]), int(record["_BUCKET"]), record["_FILE_NAME"])
        if int(record["_KIND"]) == ADD:
            live[identity] = record
        elif int(record["_KIND"]) == DELETE:
            live.pop(identity, None)
    found: dict[tuple[bytes, int, str], DeletionFile] = {}
    for (partition, bucket, index_name), record in live.items():
        if record.get("_EXTERNAL_PATH"):
            raise UnsupportedPaimonError(
                file_io.uri, f"the index file {index_name} lives at an external path"
            )
        for dv in record.get("_DELETIONS_VECTORS_RANGES") or ():
            found[(partition, bucket, dv["f0"])] = DeletionFile(
                path=index_name if in_data_dir else f"{INDEX_DIR}/{index_name}",
                offset=int(dv["f1"]),
                length=int(dv["f2"]),
                cardinality=dv.get("_CARDINALITY"),
                in_data_dir=in_data_dir,
            )
    return found


def deleted_positions(file_io: FileIO, dv: DeletionFile) -> np.ndarray:
    """The deleted row positions of one data file (sorted, int64)."""
    try:
        import pyroaring
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise MissingDependencyError("pyroaring", "paimon") from exc
    path = file_io.full_path(dv.path)
    with file_io.fs.open(path, "rb") as f:
        f.seek(dv.offset)
        head = f.read(8)
        if len(head) < 8:
            raise CorruptMetadataError(path, f"no deletion vector at offset {dv.offset}")
        length = struct.unpack(">i", head[:4])[0]
        rest = f.read(length - 4 + 4)  # the bitmap after the magic, then the CRC
    data, crc = head[4:] + rest[:-4], rest[-4:]
    if len(rest) != length or (zlib.crc32(data) & 0xFFFFFFFF) != struct.unpack(">I", crc)[0]:
        raise CorruptMetadataError(path, f"the deletion vector at offset {dv.offset} fails its CRC")
    if struct.unpack(">i", data[:4])[0] == MAGIC_32:
        positions = pyroaring.BitMap.deserialize(data[4:]).to_array()
    elif struct.unpack("<i", data[:4])[0] == MAGIC_64:
        positions = pyroaring.BitMap64.deserialize(data[4:]).to_array()
    else:
        raise CorruptMetadataError(path, f"unknown deletion vector magic {data[:4].hex()}")
    return np.asarray(positions, dtype=np.int64)


def keep_mask(row_count: int, deleted: np.ndarray) -> np.ndarray:
    keep = np.ones(row_count, dtype=bool)
    keep[deleted[deleted < row_count]] = False
    return keep
