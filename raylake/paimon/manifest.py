"""Paimon manifest lists and manifests (Avro or ORC), and the live data files of a snapshot.

A snapshot's base manifest list plus its delta manifest list name the manifests of
the whole table; each manifest entry ADDs or DELETEs a data file. An ADD and a later
DELETE of the same file identity (partition, bucket, level, file name) cancel; what
remains is the snapshot's file set. Entries are decoded once per file (metadata),
never per row.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raylake.errors import CorruptMetadataError, MissingDependencyError, UnsupportedPaimonError
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.paimon.binary_row import decode_row
from raylake.paimon.schema import PaimonSchema
from raylake.paimon.snapshot import BASE_LIST, CHANGELOG_LIST, DELTA_LIST
from raylake.paimon.types import PaimonType

MANIFEST_DIR = "manifest"
# Row tracking's columns, which a file may store (and keep statistics of) beside its own.
_SYSTEM_TYPES = {"_ROW_ID": PaimonType("BIGINT"), "_SEQUENCE_NUMBER": PaimonType("BIGINT")}
ADD, DELETE = 0, 1


_AVRO_MAGIC, _ORC_MAGIC = b"Obj\x01", b"ORC"


def avro_records(file_io: FileIO, rel: str) -> Iterator[dict[str, Any]]:
    """The records of one metadata file of the table (manifest lists, manifests, index
    manifests). Java writes them as Avro or, with ``manifest.format=orc``, as ORC with
    the same field names; the file's magic bytes say which (a table may change the
    option, so old and new manifests can differ)."""
    raw = file_io.read_bytes(rel)
    if raw.startswith(_ORC_MAGIC):
        yield from _orc_records(raw, file_io.full_path(rel))
        return
    try:
        import fastavro
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise MissingDependencyError("fastavro", "paimon") from exc
    if not raw.startswith(_AVRO_MAGIC):
        raise CorruptMetadataError(
            file_io.full_path(rel), "neither an Avro nor an ORC file (bad magic bytes)"
        )
    try:
        yield from fastavro.reader(io.BytesIO(raw))  # type: ignore[misc]
    except (ValueError, EOFError) as exc:
        raise CorruptMetadataError(
            file_io.full_path(rel), f"not a readable Avro file: {exc}"
        ) from exc


def _orc_records(raw: bytes, where: str) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.orc as orc

    try:
        table = orc.ORCFile(pa.BufferReader(raw)).read()
    except (pa.ArrowException, OSError) as exc:
        raise CorruptMetadataError(where, f"not a readable ORC file: {exc}") from exc
    # A manifest holds a few entries per data file: one conversion per file, not per row.
    return table.to_pylist()


@dataclass(frozen=True)
class Stats:
    """Min/max/null counts of some columns, decoded; None where unknown."""

    min: Mapping[str, Any]
    max: Mapping[str, Any]
    null_count: Mapping[str, int | None]


@dataclass(frozen=True)
class PaimonFile:
    """One live data file of a snapshot, from its manifest entry."""

    partition: tuple[Any, ...]
    bucket: int
    total_buckets: int
    level: int
    file_name: str
    path: str  # relative to the table root
    file_size: int
    row_count: int
    min_key: tuple[Any, ...]
    max_key: tuple[Any, ...]
    min_sequence: int
    max_sequence: int
    schema_id: int
    delete_row_count: int | None
    value_stats: Stats
    partition_bytes: bytes
    # Row tracking: the row id of the file's first row; data evolution: the columns it
    # holds (None: all of its schema's).
    first_row_id: int | None = None
    write_cols: tuple[str, ...] | None = None

    @property
    def identity(self) -> tuple[bytes, int, int, str]:
        return (self.partition_bytes, self.bucket, self.level, self.file_name)


def manifest_names(file_io: FileIO, manifest_list: str) -> list[str]:
    return [r["_FILE_NAME"] for r in avro_records(file_io, f"{MANIFEST_DIR}/{manifest_list}")]


def snapshot_manifests(file_io: FileIO, snap: Snapshot) -> list[str]:
    """The manifests of the whole table at ``snap``: base, then delta."""
    props = snap.properties
    return [*manifest_names(file_io, props[BASE_LIST]), *manifest_names(file_io, props[DELTA_LIST])]


def delta_manifests(file_io: FileIO, snap: Snapshot, changelog: bool = False) -> list[str]:
    props = snap.properties
    key = CHANGELOG_LIST if changelog else DELTA_LIST
    return manifest_names(file_io, props[key]) if props.get(key) else []


class EntryDecoder:
    """Turns manifest entries into :class:`PaimonFile` s for one table (schemas, options)."""

    def __init__(
        self,
        file_io: FileIO,
        schemas: Mapping[int, PaimonSchema],
        current: PaimonSchema,
        partition_path: Any,
        data_evolution: bool = False,
    ) -> None:
        self.file_io = file_io
        self.data_evolution = data_evolution
        self.schemas = schemas
        self.current = current
        self.partition_types = current.types_of(list(current.partition_keys))
        self.key_names = current.trimmed_primary_keys if current.primary_keys else ()
        self.key_types = current.types_of(list(self.key_names))
        self.partition_path = partition_path

    def entries(self, manifests: Sequence[str]) -> Iterator[tuple[int, PaimonFile]]:
        for name in manifests:
            rel = f"{MANIFEST_DIR}/{name}"
            for record in avro_records(self.file_io, rel):
                yield int(record["_KIND"]), self.decode(record, self.file_io.full_path(rel))

    def decode(self, record: Mapping[str, Any], where: str) -> PaimonFile:
        meta = record["_FILE"]
        name = meta["_FILE_NAME"]
        if meta.get("_EXTERNAL_PATH"):
            raise UnsupportedPaimonError(
                self.file_io.uri, f"data file {name} lives at an external path"
            )
        written = meta.get("_WRITE_COLS")
        schema = self.schemas.get(int(meta["_SCHEMA_ID"]), self.current)
        partial = written is not None and not set(schema.names) <= set(written)
        if partial and not self.data_evolution:
            raise UnsupportedPaimonError(
                self.file_io.uri, f"data file {name} holds only some columns (data evolution)"
            )
        first_row_id = meta.get("_FIRST_ROW_ID")
        partition = decode_row(record["_PARTITION"], self.partition_types, where)
        bucket = int(record["_BUCKET"])
        schema_id = int(meta["_SCHEMA_ID"])
        return PaimonFile(
            partition=partition,
            bucket=bucket,
            total_buckets=int(record.get("_TOTAL_BUCKETS") or 0),
            level=int(meta["_LEVEL"]),
            file_name=name,
            path=f"{self.partition_path(partition)}bucket-{bucket}/{name}",
            file_size=int(meta["_FILE_SIZE"]),
            row_count=int(meta["_ROW_COUNT"]),
            min_key=decode_row(meta["_MIN_KEY"], self.key_types, where),
            max_key=decode_row(meta["_MAX_KEY"], self.key_types, where),
            min_sequence=int(meta["_MIN_SEQUENCE_NUMBER"]),
            max_sequence=int(meta["_MAX_SEQUENCE_NUMBER"]),
            schema_id=schema_id,
            delete_row_count=meta.get("_DELETE_ROW_COUNT"),
            value_stats=self._value_stats(meta, schema_id, where),
            partition_bytes=bytes(record["_PARTITION"]),
            first_row_id=None if first_row_id is None else int(first_row_id),
            write_cols=tuple(written) if partial else None,
        )

    def _value_stats(self, meta: Mapping[str, Any], schema_id: int, where: str) -> Stats:
        """Value statistics under the current column names (mapped by field id)."""
        written = self.schemas.get(schema_id, self.current)
        columns = meta.get("_VALUE_STATS_COLS")
        if columns is None:  # all the file's columns: those it names, else its schema's
            columns = meta.get("_WRITE_COLS") or written.names
        names = list(columns)
        if not names:
            return Stats({}, {}, {})
        try:
            types = [_SYSTEM_TYPES.get(n) or written.field(n).type for n in names]
        except KeyError:
            return Stats({}, {}, {})
        stats = meta["_VALUE_STATS"]
        mins = decode_row(stats["_MIN_VALUES"], types, where)
        maxs = decode_row(stats["_MAX_VALUES"], types, where)
        nulls = list(stats.get("_NULL_COUNTS") or [None] * len(names))
        current = self.current.by_id()
        out_min, out_max, out_nulls = {}, {}, {}
        for i, name in enumerate(names):
            if name in _SYSTEM_TYPES:
                continue
            field = current.get(written.field(name).id)
            if field is None or field.type.root != written.field(name).type.root:
                continue  # dropped, or a type change: the old statistics say nothing
            out_min[field.name], out_max[field.name] = mins[i], maxs[i]
            out_nulls[field.name] = nulls[i] if i < len(nulls) else None
        return Stats(out_min, out_max, out_nulls)


def live_files(decoder: EntryDecoder, manifests: Sequence[str]) -> list[PaimonFile]:
    """The files the manifests' entries leave live: ADDs not cancelled by a DELETE."""
    live: dict[tuple[bytes, int, int, str], PaimonFile] = {}
    for kind, f in decoder.entries(manifests):
        if kind == ADD:
            live[f.identity] = f
        elif kind == DELETE:
            live.pop(f.identity, None)
        else:
            raise CorruptMetadataError(f.file_name, f"unknown manifest entry kind {kind}")
    return list(live.values())
