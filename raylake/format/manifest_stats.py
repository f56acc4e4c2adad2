"""Manifests written under another schema, read under the reader's.

Statistics are keyed by field id in format version 2 and by column name in version 1.
A manifest is read under the schema of the scan, whichever schema wrote it: renamed
columns keep their statistics, widened ones are cast, columns added later read as
unknown (null), dropped ones are left out.
"""

from __future__ import annotations

import pyarrow as pa

from raylake.format.schema import V1, TableSchema
from raylake.io import FileIO

# Parquet metadata of a version-2 manifest: its statistics are keyed by field id.
STATS_KEYS = b"raylake.stats-keys"
STATS_BY_ID = b"field-id"


def physical_stats_names(
    file_io: FileIO, ts: TableSchema, stored: pa.Schema
) -> dict[str, str] | None:
    """Statistics key of ``ts`` -> child name in a stored manifest; None when they agree.

    A version-1 manifest keys statistics by the column names of schema 0, whose field
    ids are the column positions; read under a version-2 schema they map by id.
    """
    by_id = (stored.metadata or {}).get(STATS_KEYS) == STATS_BY_ID
    if ts.format_version == V1 or by_id:
        return None
    from raylake.format.schema_files import schema_by_id  # schema files read manifests' schemas

    names = schema_by_id(file_io, 0).names_by_id
    return {str(i): names[i] for i in ts.field_ids if i in names}


def conform_manifest(
    pa_table: pa.Table, expected: pa.Schema, physical: dict[str, str] | None
) -> pa.Table:
    """A stored manifest in the layout of ``expected`` (statistics by the reader's keys)."""
    if pa_table.schema.names != expected.names:
        missing = [n for n in expected.names if n not in pa_table.schema.names]
        if missing == ["stats"]:  # a read of no statistics from a manifest of no columns
            pa_table = pa_table.append_column("stats", pa.nulls(pa_table.num_rows, pa.struct([])))
        pa_table = pa_table.select(expected.names)
    if pa_table.schema == expected and physical is None:
        return pa_table
    i = expected.get_field_index("stats")
    if i < 0:
        return pa_table.cast(expected)
    stats = _conform_stats(pa_table.column(i), expected.field(i).type, physical)
    pa_table = pa_table.set_column(i, expected.field(i), stats)
    return pa_table.cast(expected) if pa_table.schema != expected else pa_table


def _conform_stats(
    stats: pa.ChunkedArray, expected: pa.StructType, physical: dict[str, str] | None
) -> pa.Array:
    """Statistics children of a stored manifest under the reader's keys and types."""
    column = stats.combine_chunks()
    stored = {column.type.field(j).name: j for j in range(column.type.num_fields)}
    children = []
    for k in range(expected.num_fields):
        want = expected.field(k)
        name = want.name if physical is None else physical.get(want.name)
        if name is None or name not in stored:
            children.append(pa.nulls(len(column), want.type))  # unknown: added later
            continue
        child = column.field(stored[name])
        if not child.type.equals(want.type):
            child = _conform_struct(child, want.type)
        children.append(child)
    mask = column.is_null() if column.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(expected), mask=mask)


def _conform_struct(child: pa.StructArray, want: pa.StructType) -> pa.StructArray:
    """One column's statistics under a widened type: bounds cast, missing bounds unknown."""
    parts = []
    for j in range(want.num_fields):
        f = want.field(j)
        index = child.type.get_field_index(f.name)
        parts.append(pa.nulls(len(child), f.type) if index < 0 else _bound(child.field(index), f))
    return pa.StructArray.from_arrays(parts, fields=list(want))


def _bound(values: pa.Array, want: pa.Field) -> pa.Array:
    """Bounds under the reader's type. A reader whose schema is older than the manifest
    (a Table opened before a column was widened) may not hold them: they are unknown to
    it, which never prunes a file wrongly (its rows then say what they hold)."""
    try:
        return values.cast(want.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(len(values), want.type)
