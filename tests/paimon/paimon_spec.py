"""Builds what pypaimon cannot write (compactions, deletion vectors), from Paimon's spec.

Used by the tests on a copy of a fixture table: new snapshots whose manifests reuse the
Avro schemas of the table's own manifests, data files at levels > 0 with the system
columns, deletion-vector index files in the 32- and 64-bit formats, and BinaryRows.
Everything here follows the spec as docs/paimon.md cites it; a table built this way
checks raylake against the spec, not against a Paimon writer.
"""

from __future__ import annotations

import copy
import json
import struct
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pyroaring

MAGIC_32, MAGIC_64 = 1581511376, 1681511377


# -- BinaryRow -----------------------------------------------------------------------------


def encode_row(values: Sequence[Any], kinds: Sequence[str]) -> bytes:
    """A serialized BinaryRow (arity prefix included) of ``values`` of Paimon ``kinds``:
    BIGINT, INT, DOUBLE, BOOLEAN, STRING, DATE (days), DECIMAL18 (unscaled, compact),
    DECIMAL38 (unscaled, variable), TIMESTAMP3 (millis), TIMESTAMP6 ((millis, nanos))."""
    arity = len(values)
    nulls = ((arity + 63 + 8) // 64) * 8
    fixed = bytearray(nulls + 8 * arity)
    variable = bytearray()
    for i, (value, kind) in enumerate(zip(values, kinds)):
        slot = nulls + 8 * i
        if value is None:
            bit = i + 8
            fixed[bit >> 3] |= 1 << (bit & 7)
            continue
        if kind in ("BIGINT", "DECIMAL18", "TIMESTAMP3"):
            struct.pack_into("<q", fixed, slot, value)
        elif kind in ("INT", "DATE"):
            struct.pack_into("<i", fixed, slot, value)
        elif kind == "DOUBLE":
            struct.pack_into("<d", fixed, slot, value)
        elif kind == "BOOLEAN":
            struct.pack_into("<?", fixed, slot, value)
        elif kind in ("STRING", "DECIMAL38", "TIMESTAMP6"):
            if kind == "STRING":
                data = value.encode()
            elif kind == "DECIMAL38":
                data = value.to_bytes(16, "big", signed=True).lstrip(b"\x00") or b"\x00"
            else:
                data = struct.pack("<q", value[0])
            if kind == "STRING" and len(data) <= 7:
                fixed[slot : slot + len(data)] = data
                fixed[slot + 7] = 0x80 | len(data)
                continue
            offset = len(fixed) + len(variable)
            low = value[1] if kind == "TIMESTAMP6" else len(data)
            struct.pack_into("<q", fixed, slot, (offset << 32) | low)
            variable += data + b"\x00" * (-len(data) % 8)
        else:
            raise ValueError(kind)
    return struct.pack(">i", arity) + bytes(fixed) + bytes(variable)


# -- manifests and snapshots ---------------------------------------------------------------


def _read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with open(path, "rb") as f:
        reader = fastavro.reader(f)
        return reader.writer_schema, list(reader)


def _write(path: Path, schema: dict[str, Any], records: list[dict[str, Any]]) -> int:
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), records, codec="null")
    return path.stat().st_size


def latest_snapshot(table: Path) -> dict[str, Any]:
    latest = max(int(p.name.split("-")[1]) for p in (table / "snapshot").glob("snapshot-*"))
    return dict(json.loads((table / "snapshot" / f"snapshot-{latest}").read_text()))


def _manifest_names(table: Path, manifest_list: str) -> list[str]:
    return [r["_FILE_NAME"] for r in _read(table / "manifest" / manifest_list)[1]]


def live_entries(table: Path) -> list[dict[str, Any]]:
    """The ADD records of the latest snapshot that no DELETE cancels."""
    snap = latest_snapshot(table)
    names = [
        *_manifest_names(table, snap["baseManifestList"]),
        *_manifest_names(table, snap["deltaManifestList"]),
    ]
    live: dict[tuple[Any, ...], dict[str, Any]] = {}
    for name in names:
        for r in _read(table / "manifest" / name)[1]:
            key = (r["_PARTITION"], r["_BUCKET"], r["_FILE"]["_LEVEL"], r["_FILE"]["_FILE_NAME"])
            if r["_KIND"] == 0:
                live[key] = r
            else:
                live.pop(key, None)
    return list(live.values())


def commit(
    table: Path,
    *,
    kind: str,
    added: Sequence[dict[str, Any]] = (),
    deleted: Sequence[dict[str, Any]] = (),
    index_manifest: str | None = None,
    changelog: Sequence[dict[str, Any]] = (),
) -> int:
    """A new snapshot whose delta manifest ADDs ``added`` and DELETEs ``deleted``, and
    whose changelog manifest (where ``changelog`` is given) ADDs those files."""
    snap = latest_snapshot(table)
    sample = next((table / "manifest").glob("manifest-[0-9a-f]*"))
    entry_schema, _ = _read(sample)
    entries = [dict(copy.deepcopy(r), _KIND=1) for r in deleted]
    entries += [dict(copy.deepcopy(r), _KIND=0) for r in added]
    manifest = f"manifest-{uuid.uuid4()}-0"
    size = _write(table / "manifest" / manifest, entry_schema, entries)
    list_schema, list_records = _read(table / "manifest" / snap["baseManifestList"])
    template = copy.deepcopy(list_records[0]) if list_records else None
    if template is None:
        list_schema, list_records = _read(table / "manifest" / snap["deltaManifestList"])
        template = copy.deepcopy(list_records[0])
    base = []
    for name in (snap["baseManifestList"], snap["deltaManifestList"]):
        base += _read(table / "manifest" / name)[1]
    delta = dict(
        template,
        _FILE_NAME=manifest,
        _FILE_SIZE=size,
        _NUM_ADDED_FILES=len(added),
        _NUM_DELETED_FILES=len(deleted),
    )
    stem = f"manifest-list-{uuid.uuid4()}"
    _write(table / "manifest" / f"{stem}-0", list_schema, base)
    _write(table / "manifest" / f"{stem}-1", list_schema, [delta])
    new_id = snap["id"] + 1
    new = dict(
        snap,
        id=new_id,
        baseManifestList=f"{stem}-0",
        deltaManifestList=f"{stem}-1",
        commitKind=kind,
        timeMillis=snap["timeMillis"] + 1,
    )
    if index_manifest is not None:
        new["indexManifest"] = index_manifest
    new.pop("changelogManifestList", None)
    if changelog:
        name = f"manifest-{uuid.uuid4()}-0"
        entries = [dict(copy.deepcopy(r), _KIND=0) for r in changelog]
        size = _write(table / "manifest" / name, entry_schema, entries)
        listed = dict(delta, _FILE_NAME=name, _FILE_SIZE=size, _NUM_ADDED_FILES=len(changelog))
        _write(table / "manifest" / f"{stem}-2", list_schema, [dict(listed, _NUM_DELETED_FILES=0)])
        new["changelogManifestList"] = f"{stem}-2"
    (table / "snapshot" / f"snapshot-{new_id}").write_text(json.dumps(new))
    (table / "snapshot" / "LATEST").write_text(str(new_id))
    return int(new_id)


def data_file(
    table: Path,
    template: dict[str, Any],
    rows: pa.Table,
    *,
    level: int,
    bucket: int | None = None,
    key: str = "id",
    prefix: str = "data",
) -> dict[str, Any]:
    """Write a primary-key data file (rows with the system columns) into the template's
    bucket directory; return its manifest record (the template's, updated). ``prefix``
    "changelog" names a changelog file."""
    record = copy.deepcopy(template)
    if bucket is not None:
        record["_BUCKET"] = bucket
    name = f"{prefix}-{uuid.uuid4()}-0.parquet"
    old = next(table.rglob(template["_FILE"]["_FILE_NAME"]))
    path = old.parent.parent / f"bucket-{record['_BUCKET']}" / name
    path.parent.mkdir(exist_ok=True)
    pq.write_table(rows, path)
    keys, seqs = rows.column(f"_KEY_{key}").to_pylist(), rows.column("_SEQUENCE_NUMBER").to_pylist()
    meta = record["_FILE"]
    kinds = rows.column("_VALUE_KIND").to_pylist()
    meta.update(
        _FILE_NAME=name,
        _FILE_SIZE=path.stat().st_size,
        _ROW_COUNT=rows.num_rows,
        _MIN_KEY=encode_row([min(keys)], ["BIGINT"]),
        _MAX_KEY=encode_row([max(keys)], ["BIGINT"]),
        _MIN_SEQUENCE_NUMBER=min(seqs),
        _MAX_SEQUENCE_NUMBER=max(seqs),
        _LEVEL=level,
        _DELETE_ROW_COUNT=sum(1 for k in kinds if k in (1, 3)),
    )
    meta["_KEY_STATS"] = dict(
        meta["_KEY_STATS"], _MIN_VALUES=meta["_MIN_KEY"], _MAX_VALUES=meta["_MAX_KEY"]
    )
    return record


# -- deletion vectors ----------------------------------------------------------------------


def deletion_vector(positions: Sequence[int], bits: int) -> bytes:
    """One serialized deletion vector: length, magic + bitmap, CRC."""
    if bits == 32:
        data = struct.pack(">i", MAGIC_32) + pyroaring.BitMap(positions).serialize()
    else:
        data = struct.pack("<i", MAGIC_64) + pyroaring.BitMap64(positions).serialize()
    return struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data) & 0xFFFFFFFF)


def write_deletion_vectors(
    table: Path, partition: bytes, bucket: int, deleted: dict[str, Sequence[int]], bits: int
) -> str:
    """An index file holding the vectors of ``deleted`` (file name -> positions) and an
    index manifest listing it; returns the index manifest's name."""
    body = bytearray(b"\x01")  # the index file format version
    ranges = []
    for file_name, positions in deleted.items():
        vector = deletion_vector(positions, bits)
        length = len(vector) - 8 if bits == 32 else len(vector)
        ranges.append(
            {"f0": file_name, "f1": len(body), "f2": length, "_CARDINALITY": len(positions)}
        )
        body += vector
    index_name = f"index-{uuid.uuid4()}-0"
    (table / "index").mkdir(exist_ok=True)
    (table / "index" / index_name).write_bytes(bytes(body))
    schema = {
        "type": "record",
        "name": "IndexManifestEntry",
        "fields": [
            {"name": "_VERSION", "type": "int"},
            {"name": "_KIND", "type": "int"},
            {"name": "_PARTITION", "type": "bytes"},
            {"name": "_BUCKET", "type": "int"},
            {"name": "_INDEX_TYPE", "type": "string"},
            {"name": "_FILE_NAME", "type": "string"},
            {"name": "_FILE_SIZE", "type": "long"},
            {"name": "_ROW_COUNT", "type": "long"},
            {
                "name": "_DELETIONS_VECTORS_RANGES",
                "type": [
                    "null",
                    {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "DeletionVectorMeta",
                            "fields": [
                                {"name": "f0", "type": "string"},
                                {"name": "f1", "type": "int"},
                                {"name": "f2", "type": "int"},
                                {"name": "_CARDINALITY", "type": ["null", "long"], "default": None},
                            ],
                        },
                    },
                ],
                "default": None,
            },
        ],
    }
    record = {
        "_VERSION": 1,
        "_KIND": 0,
        "_PARTITION": partition,
        "_BUCKET": bucket,
        "_INDEX_TYPE": "DELETION_VECTORS",
        "_FILE_NAME": index_name,
        "_FILE_SIZE": len(body),
        "_ROW_COUNT": len(ranges),
        "_DELETIONS_VECTORS_RANGES": ranges,
    }
    manifest = f"index-manifest-{uuid.uuid4()}-0"
    _write(table / "manifest" / manifest, schema, [record])
    return manifest
