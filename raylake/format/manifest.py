"""Manifests: Parquet files with one row per data file added to or deleted from a table.

A manifest row carries what planning needs without opening a data file: the
partition values, bucket, LSM level, path, sizes, row-group layout, per-column
min/max/null counts, the primary-key range and the sequence range. The stats
are typed columns (``stats.<key>.min`` has the column's own type), so that
pruning is one vectorized filter over the manifest table (see scan.py).

Statistics are keyed by field id in format version 2 (by column name in version 1);
a manifest is read under the schema of the scan, whichever schema wrote it: renamed
columns keep their statistics, widened ones are cast, columns added later read as
unknown (null), dropped ones are left out (manifest_stats.py).
"""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raylake.caching import LruCache, ProcessThreads, process_cache
from raylake.errors import CorruptMetadataError, RaylakeError
from raylake.format.manifest_stats import (
    STATS_BY_ID,
    STATS_KEYS,
    conform_manifest,
    physical_stats_names,
)
from raylake.format.schema import V1, TableSchema
from raylake.format.types import has_min_max
from raylake.io import FileIO
from raylake.pyvalues import exact_pylist

MANIFEST_DIR = "manifest"
# The columns whose statistics a reader decodes; None: all of them.
StatsColumns: TypeAlias = Collection[str] | None
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


# The one list of how DataFile's fields are stored: each plain field as a manifest
# column of this Arrow type, in on-disk order (tuples are stored as lists). The other
# fields are structs whose members come from the table schema: ``partition`` (the
# partition keys), ``stats`` (per column), ``min_key``/``max_key`` (the primary key).
PLAIN_FIELDS: dict[str, pa.DataType] = {
    "path": pa.string(),
    "file_size": pa.int64(),
    "row_count": pa.int64(),
    "bucket": pa.int32(),
    "level": pa.int32(),
    "schema_id": pa.int64(),
    "sequence_base": pa.int64(),
    "min_sequence": pa.int64(),
    "max_sequence": pa.int64(),
    "added_snapshot": pa.int64(),
    "delete_row_count": pa.int64(),
    "row_group_rows": pa.list_(pa.int64()),
    "row_group_sizes": pa.list_(pa.int64()),
    "column_sizes": pa.list_(pa.int64()),
}
STRUCT_FIELDS = ("partition", "stats", "min_key", "max_key")
_TUPLE_FIELDS = frozenset(n for n, t in PLAIN_FIELDS.items() if pa.types.is_list(t))
_FIELD_ORDER = tuple(f.name for f in fields(DataFile))
if set(_FIELD_ORDER) != {*PLAIN_FIELDS, *STRUCT_FIELDS}:  # a new DataFile field needs a column
    raise TypeError(f"the manifest codec does not cover DataFile's fields {_FIELD_ORDER}")


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


def manifest_schema(ts: TableSchema, stats_columns: StatsColumns = None) -> pa.Schema:
    """The schema of a manifest; with ``stats_columns``, of one read with only those stats."""
    if stats_columns is None:
        return ts.derived("manifest_schema", lambda: _manifest_schema(ts, None))
    return _manifest_schema(ts, stats_columns)


def _manifest_schema(ts: TableSchema, stats_keys: StatsColumns) -> pa.Schema:
    stats_fields = []
    for f in ts.arrow_schema:
        key = ts.stats_key(f.name)
        if stats_keys is not None and key not in stats_keys:
            continue
        stats_fields.append(pa.field(key, stats_type(f.type)))
    columns = [
        pa.field("kind", pa.int8(), nullable=False),
        *(pa.field(n, t, nullable=n != "path") for n, t in PLAIN_FIELDS.items()),
    ]
    if stats_fields or stats_keys is None:
        columns.append(pa.field("stats", pa.struct(stats_fields)))
    if ts.partition_keys:
        columns.append(pa.field("partition", pa.struct(list(ts.partition_schema))))
    if ts.primary_key:
        key_struct = pa.struct([ts.arrow_schema.field(k) for k in ts.primary_key])
        columns += [pa.field("min_key", key_struct), pa.field("max_key", key_struct)]
    if ts.format_version == V1:
        return pa.schema(columns)
    return pa.schema(columns, metadata={STATS_KEYS: STATS_BY_ID})


def stats_type(dtype: pa.DataType) -> pa.StructType:
    """The statistics of a column of type ``dtype``: min, max (where kept), null count."""
    parts = [pa.field("null_count", pa.int64())]
    if has_min_max(dtype):
        parts = [pa.field("min", dtype), pa.field("max", dtype), *parts]
    return pa.struct(parts)


def _to_row(kind: int, f: DataFile, ts: TableSchema) -> dict[str, Any]:
    row: dict[str, Any] = {"kind": kind, "stats": f.stats}
    for name in PLAIN_FIELDS:
        value = getattr(f, name)
        row[name] = list(value) if name in _TUPLE_FIELDS else value
    if ts.partition_keys:
        row["partition"] = dict(zip(ts.partition_keys, f.partition))
    if ts.primary_key:
        row["min_key"] = None if f.min_key is None else dict(zip(ts.primary_key, f.min_key))
        row["max_key"] = None if f.max_key is None else dict(zip(ts.primary_key, f.max_key))
    return row


def data_files_from_table(manifest: pa.Table, ts: TableSchema) -> list[DataFile]:
    """Decode manifest rows (typically the ones that survived pruning) into DataFiles.

    Column by column: converting whole columns to Python lists is several times faster
    than converting rows to dicts, which matters when a plan holds 100,000 files.
    """
    n = manifest.num_rows
    if n == 0:
        return []
    names = set(manifest.column_names)

    def values(name: str) -> list[Any]:
        return exact_pylist(manifest.column(name))

    def struct_tuples(name: str, keys: Sequence[str]) -> list[Any]:
        if not keys or name not in names:
            return [() if not keys else None] * n
        column = manifest.column(name).combine_chunks()
        children = [exact_pylist(column.field(k)) for k in keys]
        valid = column.is_valid().to_pylist()
        return [tuple(row) if ok else None for ok, row in zip(valid, zip(*children))]

    by_name: dict[str, list[Any]] = {
        name: [tuple(v) for v in values(name)] if name in _TUPLE_FIELDS else values(name)
        for name in PLAIN_FIELDS
    }
    by_name["partition"] = [p or () for p in struct_tuples("partition", ts.partition_keys)]
    by_name["stats"] = [s or {} for s in values("stats")] if "stats" in names else [{}] * n
    by_name["min_key"] = [k or None for k in struct_tuples("min_key", ts.primary_key)]
    by_name["max_key"] = [k or None for k in struct_tuples("max_key", ts.primary_key)]
    return [DataFile(*row) for row in zip(*(by_name[name] for name in _FIELD_ORDER))]


def entries_table(entries: Iterable[tuple[int, DataFile]], ts: TableSchema) -> pa.Table:
    rows = [_to_row(kind, f, ts) for kind, f in entries]
    return pa.Table.from_pylist(rows, schema=manifest_schema(ts))


def write_manifest(file_io: FileIO, entries: pa.Table) -> ManifestMeta:
    """Write manifest entries (an Arrow table of :func:`manifest_schema`) to a new file."""
    rel = f"{MANIFEST_DIR}/manifest-{uuid.uuid4().hex}.parquet"
    buf = io.BytesIO()
    pq.write_table(entries, buf, compression="zstd")
    data = buf.getvalue()
    try:
        file_io.write_bytes(rel, data)
    except BaseException:  # a store may keep half a file (a full disk): the name is ours
        file_io.delete_quietly([rel])
        raise
    kinds = entries.column("kind")
    num_deleted = int(pc.sum(pc.equal(kinds, DELETE)).as_py() or 0)
    return ManifestMeta(rel, entries.num_rows - num_deleted, num_deleted, len(data))


# Decoded manifests, keyed by (table uri, manifest path, the stats columns read).
# Decoded manifests depend on the schema they are read under: keys start with the
# table and the schema id.
_Reader: TypeAlias = tuple[str, int]
_manifests: LruCache[tuple[_Reader, str, tuple[str, ...] | None], pa.Table] = process_cache(
    LruCache(256)
)
_live_sets: LruCache[tuple[_Reader, tuple[str, ...], tuple[str, ...] | None], pa.Table] = (
    process_cache(LruCache(8))
)
_live_file_lists: LruCache[tuple[_Reader, tuple[str, ...], tuple[str, ...]], list[DataFile]] = (
    process_cache(LruCache(4))
)
_POOL_PREFIX = "raylake-manifest"
_pool = ProcessThreads(8, _POOL_PREFIX)


def read_manifest(
    file_io: FileIO, rel: str, ts: TableSchema, stats_columns: StatsColumns = None
) -> pa.Table:
    """Read one manifest; manifests are immutable, so they are cached per process.

    ``stats_columns`` names the columns whose statistics to decode (None: all). A
    manifest holds min, max and null count of every column; planning a query needs
    those of the columns its filter names, and decoding only them makes cold planning
    of a wide table several times cheaper.
    """
    wanted = _stats_key(ts, stats_columns)
    reader = (file_io.uri, ts.schema_id)
    cached = _manifests.get((reader, rel, wanted))
    if cached is None and wanted is not None:
        full = _manifests.get((reader, rel, None))
        cached = None if full is None else _project_stats(full, ts, wanted)
    if cached is not None:
        return cached
    try:
        data = file_io.read_bytes(rel)
    except FileNotFoundError as exc:
        raise CorruptMetadataError(file_io.full_path(rel), "manifest file is missing") from exc
    # A store that failed (after its retries, or refused access) goes up as it is: the
    # manifest is not corrupt, and a later read may well succeed.
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        physical = physical_stats_names(file_io, ts, parquet.schema_arrow)
        # ParquetFile.read without threads: a manifest is small and wide, and the thread
        # pool of read_table costs more than it saves there.
        columns = None if wanted is None else _manifest_columns(ts, wanted, physical)
        pa_table = parquet.read(columns=columns, use_threads=False)
        pa_table = conform_manifest(pa_table, manifest_schema(ts, wanted), physical)
    except RaylakeError:
        raise  # the schema files physical_stats_names reads: their own error
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptMetadataError(
            file_io.full_path(rel), f"not a readable manifest: {exc}"
        ) from exc
    _manifests.put((reader, rel, wanted), pa_table)
    return pa_table


def _stats_key(ts: TableSchema, stats_columns: StatsColumns) -> tuple[str, ...] | None:
    """The statistics keys of the named columns, in schema order."""
    if stats_columns is None:
        return None
    wanted = set(stats_columns)
    keys = tuple(ts.stats_key(c) for c in ts.column_names if c in wanted)
    # A dotted column name would be ambiguous as a Parquet column path: read all stats.
    if any("." in c for c in keys):
        return None
    return keys


def _manifest_columns(
    ts: TableSchema, stats_keys: tuple[str, ...], physical: dict[str, str] | None
) -> list[str]:
    top = [f.name for f in manifest_schema(ts) if f.name != "stats"]
    if physical is not None:
        stats_keys = tuple(physical[k] for k in stats_keys if k in physical)
    return top + [f"stats.{c}" for c in stats_keys]


def _project_stats(full: pa.Table, ts: TableSchema, stats_columns: tuple[str, ...]) -> pa.Table:
    stats = full.column("stats").combine_chunks()
    projected = full.drop_columns(["stats"])
    if stats_columns:
        children = [stats.field(c) for c in stats_columns]
        struct = pa.StructArray.from_arrays(children, names=list(stats_columns))
        projected = projected.append_column("stats", struct)
    expected = manifest_schema(ts, stats_columns)
    return projected.select(expected.names).replace_schema_metadata(expected.metadata)


def read_entries(
    file_io: FileIO,
    metas: Sequence[ManifestMeta],
    ts: TableSchema,
    stats_columns: StatsColumns = None,
) -> pa.Table:
    """All entries of several manifests, in order."""
    read = partial(_read_one, file_io, ts, stats_columns)
    if len(metas) > 1 and not threading.current_thread().name.startswith(_POOL_PREFIX):
        # Decoding Parquet releases the GIL, and object stores answer in parallel:
        # read uncached manifests side by side, on one pool kept for the process.
        tables = list(_pool.get().map(read, metas))
    else:
        tables = [read(m) for m in metas]
    if not tables:
        return manifest_schema(ts, _stats_key(ts, stats_columns)).empty_table()
    return pa.concat_tables(tables)


def _read_one(
    file_io: FileIO, ts: TableSchema, stats_columns: StatsColumns, meta: ManifestMeta
) -> pa.Table:
    return read_manifest(file_io, meta.path, ts, stats_columns)


def live_files(entries: pa.Table) -> pa.Table:
    """The ADD entries not cancelled by a DELETE entry (paths are never reused)."""
    is_delete = pc.equal(entries.column("kind"), DELETE)
    deleted = pc.filter(entries.column("path"), is_delete)
    added = entries.filter(pc.invert(is_delete))
    if len(deleted) == 0:
        return added
    return added.filter(pc.invert(pc.is_in(added.column("path"), value_set=deleted)))


def live_files_of(
    file_io: FileIO,
    metas: Sequence[ManifestMeta],
    ts: TableSchema,
    stats_columns: StatsColumns = None,
) -> pa.Table:
    """The live file set that a list of manifests describes, cached per process.

    Manifests are immutable, so the same list always yields the same set: repeated
    scans of one snapshot (and commits on top of it) plan without re-deriving it.
    """
    key = ((file_io.uri, ts.schema_id), tuple(m.path for m in metas), _stats_key(ts, stats_columns))
    return _live_sets.get_or_compute(
        key, lambda: live_files(read_entries(file_io, metas, ts, stats_columns))
    )


def live_data_files(
    file_io: FileIO, metas: Sequence[ManifestMeta], ts: TableSchema
) -> list[DataFile]:
    """Every live file of a manifest list as DataFiles without statistics, cached per process.

    What a plan without a filter needs: decoding 100,000 files into Python objects is
    most of the cost of planning them, and the result never changes for a snapshot.
    """
    key = ((file_io.uri, ts.schema_id), tuple(m.path for m in metas), ())
    return _live_file_lists.get_or_compute(
        key, lambda: data_files_from_table(live_files_of(file_io, metas, ts, ()), ts)
    )


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
    _manifests.clear()
    _live_sets.clear()
    _live_file_lists.clear()


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
