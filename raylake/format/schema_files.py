"""The schema files of a table: ``schema/schema-<id>.json``, one per schema version.

A schema file is written once with create-if-absent and never changes, so a schema
read by id is cached for the life of the process (readers of files written under an
older schema look that schema up by the id their manifest entry records).
"""

from __future__ import annotations

import re

from raylake.caching import LruCache, process_cache
from raylake.errors import CommitFailedError, CorruptMetadataError, TableNotFoundError
from raylake.format.metadata_json import json_object, read_json_object
from raylake.format.schema import SCHEMA_DIR, TableSchema
from raylake.io import FileIO

_SCHEMA_NAME = re.compile(r"^schema-(\d+)\.json$")
_by_id: LruCache[tuple[str, int], TableSchema] = process_cache(LruCache(256))


def schema_path(schema_id: int) -> str:
    return f"{SCHEMA_DIR}/schema-{schema_id}.json"


def schema_ids(file_io: FileIO) -> list[int]:
    """Ids of the schema files; leftovers of an interrupted create (``*.tmp``) are not schemas."""
    return file_io.numbered(SCHEMA_DIR, _SCHEMA_NAME)


def load_schema(file_io: FileIO, ids: list[int] | None = None) -> TableSchema:
    """The current (largest id) schema of a table; ``ids``: its schema ids, where the
    caller has just listed them (one listing, not two: each goes to the store)."""
    ids = schema_ids(file_io) if ids is None else ids
    if not ids:
        raise TableNotFoundError(file_io.uri)
    return schema_by_id(file_io, ids[-1])


def schema_by_id(file_io: FileIO, schema_id: int) -> TableSchema:
    """Schema ``schema_id`` of a table, read once per process."""
    key = (file_io.uri, schema_id)
    found = _by_id.get(key)
    if found is None:
        found = _read(file_io, schema_id)
        _by_id.put(key, found)
    return found


def schema_at_least(file_io: FileIO, ts: TableSchema, schema_id: int) -> TableSchema:
    """``ts``, or schema ``schema_id`` where that is newer: what rewrites a snapshot's rows
    (a compaction, a lookup changelog) uses, so that a schema loaded before another
    process changed it does not drop the newer columns."""
    return ts if schema_id <= ts.schema_id else schema_by_id(file_io, schema_id)


def write_schema(file_io: FileIO, ts: TableSchema) -> bool:
    """Create ``schema-<id>.json`` unless it exists (the commit point of a schema change)."""
    created = file_io.create_if_absent(schema_path(ts.schema_id), ts.to_bytes())
    if created:
        _by_id.put((file_io.uri, ts.schema_id), ts)
    return created


def check_same_table(file_io: FileIO, ts: TableSchema) -> None:
    """Refuse to commit under ``ts`` where the table it was read from is gone, or was
    replaced by another (deleted and created again): the commit would make a directory
    without a schema, or a snapshot naming files of other columns. Read afresh, never
    from the cache, which holds what this process saw before."""
    found = stored_schema(file_io, ts.schema_id)
    if found is None:
        raise TableNotFoundError(file_io.uri)
    if found.to_json() != ts.to_json():
        raise CommitFailedError(
            f"the table at {file_io.uri!r} was replaced after it was opened: its schema "
            f"{ts.schema_id} is not the one this commit was written under; open it again "
            "(open_table) and write again. Nothing was committed"
        )


def stored_schema(file_io: FileIO, schema_id: int) -> TableSchema | None:
    """Schema ``schema_id`` as the store holds it now (None: no such file), never from the
    cache, which holds what this process saw before a table was created again."""
    path = schema_path(schema_id)
    try:
        raw = file_io.read_bytes(path)
    except FileNotFoundError:
        return None
    return TableSchema.from_json(json_object(raw, file_io.full_path(path)))


def forget_schemas() -> None:
    """Drop the cached schemas (a table created anew where one was deleted)."""
    _by_id.clear()


def _read(file_io: FileIO, schema_id: int) -> TableSchema:
    data, path = read_json_object(file_io, schema_path(schema_id), "schema file")
    ts = TableSchema.from_json(data, path)
    if ts.schema_id != schema_id:
        raise CorruptMetadataError(path, f"file holds schema id {ts.schema_id}")
    return ts
