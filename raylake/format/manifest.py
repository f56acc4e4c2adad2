"""Manifests: Parquet files with one row per data file added to or deleted from a table.

A manifest row carries what planning needs without opening a data file: the
partition values, bucket, LSM level, path, sizes, row-group layout, per-column
min/max/null counts, the primary-key range and the sequence range. The stats
are typed columns (``stats.<column>.min`` has the column's own type), so that
pruning is one vectorized filter over the manifest table (see scan.py).
"""

from __future__ import annotations

import io
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raylake.errors import CorruptMetadataError
from raylake.format.schema import TableSchema
from raylake.format.types import has_min_max
from raylake.io import FileIO

MANIFEST_DIR = "manifest"
ADD, DELETE = 0, 1


@dataclass(frozen=True)
class DataFile:
    """One data file as the metadata knows it. Small and picklable."""

    path: str  # relative to the table root
    file_size: int
    row_count: int
    partition: tuple[Any, ...] = ()
    bucket: int = 0
    level: int = 0
    schema_id: int = 0
    # Effective sequence of row i is sequence_base + the file's sequence column at row i
    # (primary-key tables); the committer assigns sequence_base.
    sequence_base: int = 0
    min_sequence: int = 0
    max_sequence: int = 0
    added_snapshot: int = 0
    delete_row_count: int = 0
    row_group_rows: tuple[int, ...] = ()
    row_group_sizes: tuple[int, ...] = ()  # in-memory Arrow bytes of each row group
    column_sizes: tuple[int, ...] = ()  # in-memory Arrow bytes of each column, schema order
    stats: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False, compare=False)
    min_key: tuple[Any, ...] | None = None
    max_key: tuple[Any, ...] | None = None

    @property
    def in_memory_size(self) -> int:
        return sum(self.row_group_sizes)


@dataclass(frozen=True)
class ManifestMeta:
    """A manifest as listed in a snapshot."""

    path: str
    num_added: int
    num_deleted: int
    file_size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "num_added": self.num_added,
            "num_deleted": self.num_deleted,
            "file_size": self.file_size,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ManifestMeta:
        return cls(data["path"], data["num_added"], data["num_deleted"], data["file_size"])


def manifest_schema(ts: TableSchema) -> pa.Schema:
    stats_fields = []
    for f in ts.arrow_schema:
        parts = [pa.field("null_count", pa.int64())]
        if has_min_max(f.type):
            parts = [pa.field("min", f.type), pa.field("max", f.type), *parts]
        stats_fields.append(pa.field(f.name, pa.struct(parts)))
    fields = [
        pa.field("kind", pa.int8(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("file_size", pa.int64()),
        pa.field("row_count", pa.int64()),
        pa.field("bucket", pa.int32()),
        pa.field("level", pa.int32()),
        pa.field("schema_id", pa.int64()),
        pa.field("sequence_base", pa.int64()),
        pa.field("min_sequence", pa.int64()),
        pa.field("max_sequence", pa.int64()),
        pa.field("added_snapshot", pa.int64()),
        pa.field("delete_row_count", pa.int64()),
        pa.field("row_group_rows", pa.list_(pa.int64())),
        pa.field("row_group_sizes", pa.list_(pa.int64())),
        pa.field("column_sizes", pa.list_(pa.int64())),
        pa.field("stats", pa.struct(stats_fields)),
    ]
    if ts.partition_keys:
        fields.append(pa.field("partition", pa.struct(list(ts.partition_schema))))
    if ts.primary_key:
        key_struct = pa.struct([ts.arrow_schema.field(k) for k in ts.primary_key])
        fields += [pa.field("min_key", key_struct), pa.field("max_key", key_struct)]
    return pa.schema(fields)


def _to_row(kind: int, f: DataFile, ts: TableSchema) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": kind,
        "path": f.path,
        "file_size": f.file_size,
        "row_count": f.row_count,
        "bucket": f.bucket,
        "level": f.level,
        "schema_id": f.schema_id,
        "sequence_base": f.sequence_base,
        "min_sequence": f.min_sequence,
        "max_sequence": f.max_sequence,
        "added_snapshot": f.added_snapshot,
        "delete_row_count": f.delete_row_count,
        "row_group_rows": list(f.row_group_rows),
        "row_group_sizes": list(f.row_group_sizes),
        "column_sizes": list(f.column_sizes),
        "stats": f.stats,
    }
    if ts.partition_keys:
        row["partition"] = dict(zip(ts.partition_keys, f.partition))
    if ts.primary_key:
        row["min_key"] = None if f.min_key is None else dict(zip(ts.primary_key, f.min_key))
        row["max_key"] = None if f.max_key is None else dict(zip(ts.primary_key, f.max_key))
    return row


def data_files_from_table(manifest: pa.Table, ts: TableSchema) -> list[DataFile]:
    """Decode manifest rows (typically the few that survived pruning) into DataFiles."""
    out = []
    for row in manifest.to_pylist():
        part = row.get("partition") or {}
        min_key, max_key = row.get("min_key"), row.get("max_key")
        out.append(
            DataFile(
                path=row["path"],
                file_size=row["file_size"],
                row_count=row["row_count"],
                partition=tuple(part.get(k) for k in ts.partition_keys),
                bucket=row["bucket"],
                level=row["level"],
                schema_id=row["schema_id"],
                sequence_base=row["sequence_base"],
                min_sequence=row["min_sequence"],
                max_sequence=row["max_sequence"],
                added_snapshot=row["added_snapshot"],
                delete_row_count=row["delete_row_count"],
                row_group_rows=tuple(row["row_group_rows"]),
                row_group_sizes=tuple(row["row_group_sizes"]),
                column_sizes=tuple(row["column_sizes"]),
                stats=row["stats"] or {},
                min_key=None if min_key is None else tuple(min_key[k] for k in ts.primary_key),
                max_key=None if max_key is None else tuple(max_key[k] for k in ts.primary_key),
            )
        )
    return out


def entries_table(entries: Iterable[tuple[int, DataFile]], ts: TableSchema) -> pa.Table:
    rows = [_to_row(kind, f, ts) for kind, f in entries]
    return pa.Table.from_pylist(rows, schema=manifest_schema(ts))


def write_manifest(file_io: FileIO, entries: pa.Table) -> ManifestMeta:
    """Write manifest entries (an Arrow table of :func:`manifest_schema`) to a new file."""
    rel = f"{MANIFEST_DIR}/manifest-{uuid.uuid4().hex}.parquet"
    buf = io.BytesIO()
    pq.write_table(entries, buf, compression="zstd")
    data = buf.getvalue()
    file_io.write_bytes(rel, data)
    kinds = entries.column("kind")
    num_deleted = int(pc.sum(pc.equal(kinds, DELETE)).as_py() or 0)
    return ManifestMeta(rel, entries.num_rows - num_deleted, num_deleted, len(data))


_CACHE_LIMIT = 256
_cache: OrderedDict[tuple[str, str], pa.Table] = OrderedDict()
_cache_lock = threading.Lock()


def read_manifest(file_io: FileIO, rel: str, ts: TableSchema) -> pa.Table:
    """Read one manifest; manifests are immutable, so they are cached per process."""
    key = (file_io.uri, rel)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    try:
        data = file_io.read_bytes(rel)
        # ParquetFile.read without threads: a manifest is small and wide, and the thread
        # pool of read_table costs more than it saves there.
        pa_table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
        expected = manifest_schema(ts)
        if pa_table.schema != expected:
            pa_table = pa_table.cast(expected)
    except FileNotFoundError as exc:
        raise CorruptMetadataError(file_io.full_path(rel), "manifest file is missing") from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptMetadataError(
            file_io.full_path(rel), f"not a readable manifest: {exc}"
        ) from exc
    with _cache_lock:
        _cache[key] = pa_table
        if len(_cache) > _CACHE_LIMIT:
            _cache.popitem(last=False)
    return pa_table


def read_entries(file_io: FileIO, metas: Sequence[ManifestMeta], ts: TableSchema) -> pa.Table:
    """All entries of several manifests, in order."""
    if len(metas) > 1:
        # Decoding Parquet releases the GIL: read uncached manifests side by side.
        with ThreadPoolExecutor(max_workers=min(len(metas), 4)) as pool:
            tables = list(pool.map(lambda m: read_manifest(file_io, m.path, ts), metas))
    else:
        tables = [read_manifest(file_io, m.path, ts) for m in metas]
    if not tables:
        return manifest_schema(ts).empty_table()
    return pa.concat_tables(tables)


def live_files(entries: pa.Table) -> pa.Table:
    """The ADD entries not cancelled by a DELETE entry (paths are never reused)."""
    is_delete = pc.equal(entries.column("kind"), DELETE)
    deleted = pc.filter(entries.column("path"), is_delete)
    added = entries.filter(pc.invert(is_delete))
    if len(deleted) == 0:
        return added
    return added.filter(pc.invert(pc.is_in(added.column("path"), value_set=deleted)))


_LIVE_CACHE_LIMIT = 8
_live_cache: OrderedDict[tuple[str, tuple[str, ...]], pa.Table] = OrderedDict()


def live_files_of(file_io: FileIO, metas: Sequence[ManifestMeta], ts: TableSchema) -> pa.Table:
    """The live file set that a list of manifests describes, cached per process.

    Manifests are immutable, so the same list always yields the same set: repeated
    scans of one snapshot (and commits on top of it) plan without re-deriving it.
    """
    key = (file_io.uri, tuple(m.path for m in metas))
    with _cache_lock:
        cached = _live_cache.get(key)
        if cached is not None:
            _live_cache.move_to_end(key)
            return cached
    live = live_files(read_entries(file_io, metas, ts))
    with _cache_lock:
        _live_cache[key] = live
        if len(_live_cache) > _LIVE_CACHE_LIMIT:
            _live_cache.popitem(last=False)
    return live


def live_files_by_bucket(
    file_io: FileIO, metas: Sequence[ManifestMeta], ts: TableSchema
) -> dict[tuple[tuple[Any, ...], int], list[DataFile]]:
    """The live files of a manifest list, grouped by (partition values, bucket)."""
    groups: dict[tuple[tuple[Any, ...], int], list[DataFile]] = {}
    for f in data_files_from_table(live_files_of(file_io, metas, ts), ts):
        groups.setdefault((f.partition, f.bucket), []).append(f)
    return groups


def clear_manifest_caches() -> None:
    """Forget cached manifests and live file sets (for benchmarks of cold reads)."""
    with _cache_lock:
        _cache.clear()
        _live_cache.clear()


def with_commit_fields(f: DataFile, snapshot_id: int, sequence_base: int) -> DataFile:
    """Stamp a new file with the snapshot that adds it and its sequence base."""
    span = f.max_sequence - f.min_sequence
    return replace(
        f,
        added_snapshot=snapshot_id,
        sequence_base=sequence_base,
        min_sequence=sequence_base + f.min_sequence,
        max_sequence=sequence_base + f.min_sequence + span,
    )
