"""Deleting rows of primary-key tables, by filter or by key.

The current rows are looked up first and written back as ``-D`` rows, so a
delete carries the full before-image (for changelogs) and the sequence field
(so that it orders correctly against late rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raylake.errors import (
    FilterError,
    InvalidArgumentError,
    SchemaMismatchError,
)
from raylake.expr import Expr, as_expr
from raylake.format.schema import TableSchema
from raylake.format.schema_files import schema_at_least
from raylake.table.commit import commit_or_abort
from raylake.table.commit_args import commit_request
from raylake.table.conform import conform, iter_input
from raylake.table.pk.bucket import bucket_ids
from raylake.table.pk.keyjoin import rows_with_keys
from raylake.table.pk.schema import DELETE
from raylake.table.pk.write import BUCKET_COLUMN, PrimaryKeyTableWriter
from raylake.table.projection import follow_columns
from raylake.table.replaced import rerun_on_conflict, vanished_as_conflict
from raylake.table.writer import split_by_partition, writing

if TYPE_CHECKING:
    from raylake.format.snapshot import Snapshot
    from raylake.table.table import Table


def write_deletes(writer: PrimaryKeyTableWriter, rows: Iterable[pa.Table]) -> None:
    """Write current rows as ``-D`` rows (they carry every column, sequence field included)."""
    for pa_table in rows:
        kinds = pa.array(np.full(pa_table.num_rows, DELETE, dtype=np.int8))
        writer.write_arrow(conform(pa_table, writer.ts.arrow_schema, writer.ts.primary_key), kinds)


def delete_rows(tbl: Table, keys_or_filter: Any) -> Snapshot | None:
    """Delete the rows a filter selects, or the rows of the given keys, as one commit.

    Keys that do not exist are ignored; when nothing matches, nothing is committed and
    the latest snapshot is returned. Where concurrent commits and an expiration removed
    the snapshot or a file the delete was reading, it reads the new latest state again.
    """

    def attempt() -> Snapshot | None:
        with vanished_as_conflict(tbl.file_io, tbl.table_schema, "delete"):
            return _delete_once(tbl, keys_or_filter)

    return rerun_on_conflict(attempt)[0]


def _delete_once(tbl: Table, keys_or_filter: Any) -> Snapshot | None:
    base = tbl.latest_snapshot()
    if base is not None and base.schema_id > tbl.table_schema.schema_id:
        # A Table opened before a schema change: the -D rows carry whole before-images,
        # so they are read and written under the base's schema, with the newer columns.
        newer = schema_at_least(tbl.file_io, tbl.table_schema, base.schema_id)
        if isinstance(keys_or_filter, str | Expr):
            # The filter names the caller's columns: one renamed since is followed by
            # id (a newer column may have taken its name), as a read follows it.
            _, keys_or_filter = follow_columns(
                tbl.table_schema, newer, None, as_expr(keys_or_filter)
            )
        tbl = type(tbl)(tbl.file_io, newer, tbl.source)
    with writing(PrimaryKeyTableWriter(tbl.file_io, tbl.table_schema)) as writer:
        if base is not None:
            write_deletes(writer, [_current_rows(tbl, keys_or_filter, base.id)])
        messages = writer.prepare_commit()
    request = commit_request(
        messages, None, allow_empty=False, base_snapshot_id=None if base is None else base.id
    )
    if request is None:
        return tbl.latest_snapshot()
    # The files were written just now, in this call: no existence checks (aborted.py).
    return commit_or_abort(tbl.file_io, tbl.table_schema, request)


def _current_rows(tbl: Table, keys_or_filter: Any, snapshot_id: int) -> pa.Table:
    # The base snapshot is read under the table's schema, not the one it was committed
    # with (as time travel would): a schema change may have come after it.
    if keys_or_filter is None or isinstance(keys_or_filter, str | Expr):
        if keys_or_filter is None:
            raise FilterError("delete() needs a filter or keys; to delete everything pass 'true'")
        return tbl.scan(filter=keys_or_filter).at(snapshot_id).to_arrow()
    ts = tbl.table_schema
    keys = _key_table(keys_or_filter, ts)
    if keys.num_rows == 0:
        return ts.arrow_schema.empty_table()
    buckets = pa.array(bucket_ids([keys.column(k) for k in ts.primary_key], ts.buckets))
    grouping = (*ts.partition_keys, BUCKET_COLUMN)
    wanted = {
        (tuple(values[:-1]), int(values[-1]))
        for values, _ in split_by_partition(keys.append_column(BUCKET_COLUMN, buckets), grouping)
    }
    scan = tbl.scan().at(snapshot_id)
    splits = [s for s in scan.plan() if (s.partition, s.bucket) in wanted]
    current = pa.Table.from_batches(
        list(scan.read_context().read_all(splits)), schema=ts.arrow_schema
    )
    return rows_with_keys(current, keys, ts.primary_key)


def _key_table(data: Any, ts: TableSchema) -> pa.Table:
    """The key columns of user-given keys, conformed to the key types, nulls rejected."""
    if np.isscalar(data) or (
        isinstance(data, list | tuple | set | frozenset)
        and any(item is None or np.isscalar(item) for item in data)
    ):  # delete(1) or delete([1, 2]) for a one-column key: the column's name is needed
        example = {ts.primary_key[0]: [1, 2]}
        raise InvalidArgumentError(
            "keys_or_filter",
            data,
            f"a filter, or keys in columns: a dict ({example}), a "
            "list of dicts, a pyarrow Table or a pandas DataFrame",
        )
    key_schema = pa.schema([ts.arrow_schema.field(k) for k in ts.primary_key])
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        names = {name for row in data for name in row}
        data = {name: [row.get(name) for row in data] for name in names}
    if isinstance(data, Mapping):
        data = _python_columns(data, key_schema)
    chunks = []
    for chunk in iter_input(data):
        missing = [k for k in ts.primary_key if k not in chunk.schema.names]
        if missing:  # in any chunk: a later one lacking a key gave pyarrow's KeyError
            raise SchemaMismatchError(
                f"keys to delete lack primary-key column(s) {missing} (the key is "
                f"{list(ts.primary_key)})",
                column=missing[0],
            )
        chunk = chunk if isinstance(chunk, pa.Table) else pa.Table.from_batches([chunk])
        chunks.append(conform(chunk.select(list(ts.primary_key)), key_schema, ts.primary_key))
    return pa.concat_tables(chunks) if chunks else key_schema.empty_table()


def _python_columns(data: Mapping[Any, Any], key_schema: pa.Schema) -> pa.Table:
    """A dict of key columns as Arrow, the columns other than the key left out (they are
    ignored, and need not convert)."""
    columns = {name: data[name] for name in key_schema.names if name in data}
    try:
        return pa.table(columns)
    except (TypeError, pa.ArrowInvalid) as exc:  # {"id": 1}: a scalar, not a column
        raise InvalidArgumentError(
            "keys_or_filter", data, "a dict of key columns (lists of values), e.g. {'id': [1]}"
        ) from exc
    except OverflowError:  # Python ints are taken as int64 first: 2**63 and above fail
        pass
    typed = {}
    for name, values in columns.items():
        field = key_schema.field(name)
        try:
            typed[name] = pa.array(values, type=field.type)
        except (OverflowError, pa.ArrowException) as exc:
            raise InvalidArgumentError(
                "keys_or_filter",
                data,
                f"keys that fit the key columns: column {name!r} is {field.type} ({exc})",
            ) from None
    return pa.table(typed)
