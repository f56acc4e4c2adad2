"""Deleting rows of append tables: the files that hold matching rows, rewritten without them.

Copy-on-write, as deltalake's and PyIceberg's deletes do. ``Table.delete(filter)`` on an
append table

* prunes the live files by partition values and statistics, as a scan with the same
  filter does;
* drops whole, unread, the files whose partition values alone select them (a filter on
  partition columns only: deleting old days costs no data read);
* reads every other candidate file and keeps the rows the filter does not select (false
  or null), so the rows deleted are exactly those ``to_arrow(filter=...)`` returned;
  a file without a matching row is left as it is;
* writes each rewritten file's rows to new files numbered as the old file was
  (``sequence_base``), so they stay where they were in the read order;
* commits once, an OVERWRITE snapshot that removes the rewritten and dropped files and
  adds the new ones. Streams and ``changes()`` see it as they see a merge's rewrite:
  the old rows of those files out, the kept ones in.

A concurrent commit that removed a file the delete read (an overwrite, a merge, a
compaction, another delete) makes it run again on the new state, up to ``ATTEMPTS``
times; concurrent appends do not conflict (their rows were not there to delete).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raylake.errors import (
    FilterError,
    InvalidArgumentError,
)
from raylake.expr import (
    Expr,
    as_expr,
    bind,
    evaluate_python,
    must_match,
    referenced_columns,
    to_arrow,
)
from raylake.format.manifest import DataFile, data_files_from_table
from raylake.format.schema import TableSchema
from raylake.format.schema_files import schema_at_least
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.io import FileIO
from raylake.table.aborted import abort_messages
from raylake.table.commit import CommitRequest, commit_or_abort
from raylake.table.kind import kind_of
from raylake.table.projection import follow_columns
from raylake.table.replaced import check_files_kept, rerun_on_conflict, vanished_as_conflict
from raylake.table.source import ManifestStats, pruned_live_entries
from raylake.table.whole_files import batches_of, read_whole_files
from raylake.table.writer import CommitMessage, writing

if TYPE_CHECKING:
    from raylake.table.table import Table

# The candidate files are read (and their kept rows written) this many bytes at a time.
BATCH_BYTES = 256 * 1024 * 1024
_ROW = "_rl_row"  # the reserved prefix: no table column has the name


def delete_append_rows(tbl: Table, keys_or_filter: Any) -> Snapshot | None:
    """Delete the rows a filter selects as one commit; when none matches, nothing is
    committed and the latest snapshot (None for a table without any) is returned. A
    concurrent commit that removed a file it read makes it run again on the new state."""
    expr = _filter_arg(keys_or_filter, tbl.table_schema)

    def attempt() -> Snapshot | None:
        with vanished_as_conflict(tbl.file_io, tbl.table_schema, "delete"):  # expired while read
            return _delete_once(tbl, expr)

    return rerun_on_conflict(attempt)[0]


def _filter_arg(value: Any, ts: TableSchema) -> Expr:
    if value is None:
        raise FilterError("delete() needs a filter; to delete every row pass 'true'")
    if not isinstance(value, str | Expr):
        raise InvalidArgumentError(
            "keys_or_filter",
            value,
            "a filter (a string or expression): an append table has no primary key to "
            "delete rows by",
        )
    expr = as_expr(value)
    bind(expr, ts.arrow_schema)  # an unknown column or a wrong literal: refused here
    return expr


def _delete_once(tbl: Table, expr: Expr) -> Snapshot | None:
    file_io = tbl.file_io
    snap = SnapshotManager(file_io).latest()
    if snap is None:
        return None
    # Rewritten under an older schema than the snapshot's, rows would lose newer columns.
    ts = schema_at_least(file_io, tbl.table_schema, snap.schema_id)
    # The filter names the columns of the caller's schema: a column renamed since is
    # followed by id (a newer column may have taken its name), as a read follows it.
    _, expr = follow_columns(tbl.table_schema, ts, None, expr)
    # Typed literals (a date given as a string): pruning compares them with statistics.
    expr = bind(expr, ts.arrow_schema)
    entries = pruned_live_entries(file_io, ts, snap, expr)
    candidates = data_files_from_table(entries, ts)
    # Files the filter selects whole are dropped unread: by their partition, or by
    # statistics proving that every row matches (as Delta and Iceberg drop them).
    proven = entries.filter(must_match(expr, ManifestStats(ts))).column("path").to_pylist()
    dropped_paths = {*proven, *(f.path for f in _selected_by_partition(candidates, expr, ts))}
    removed: list[DataFile] = [f for f in candidates if f.path in dropped_paths]
    to_read = [f for f in candidates if f.path not in dropped_paths]
    messages: list[CommitMessage] = []
    row_filter = to_arrow(expr)
    try:
        for batch in batches_of(to_read, BATCH_BYTES):
            for f, rows in zip(batch, _read_files(file_io, ts, snap, batch)):
                kept = _rows_kept(rows, row_filter)
                if kept.num_rows == rows.num_rows:
                    continue
                removed.append(f)
                if kept.num_rows:
                    messages.append(_rewrite(file_io, ts, f, kept))
    except BaseException:
        abort_messages(file_io, messages)
        raise
    if not removed:
        return snap
    request = CommitRequest(
        messages=(*messages, CommitMessage(deleted_files=tuple(removed))),
        kind="OVERWRITE",
        base_snapshot_id=snap.id,
        conflict_check=partial(_check_kept, file_io, ts, snap, {f.path for f in candidates}),
        keep_sequences=True,
    )
    return commit_or_abort(file_io, ts, request)


def _check_kept(
    file_io: FileIO, ts: TableSchema, base: Snapshot, paths: set[str], latest: Snapshot
) -> None:
    check_files_kept(file_io, ts, base, latest, paths, "delete")


def _selected_by_partition(
    files: Sequence[DataFile], expr: Expr, ts: TableSchema
) -> list[DataFile]:
    """The files that a filter on partition columns only selects whole."""
    if not ts.partition_keys or not referenced_columns(expr) <= set(ts.partition_keys):
        return []
    bound = bind(expr, ts.partition_schema)
    selected = {
        p
        for p in {f.partition for f in files}
        if evaluate_python(bound, dict(zip(ts.partition_keys, p))) is True
    }
    return [f for f in files if f.partition in selected]


def _read_files(
    file_io: FileIO, ts: TableSchema, snap: Snapshot, files: Sequence[DataFile]
) -> list[pa.Table]:
    return read_whole_files(file_io, ts, snap.id, files)


def _rows_kept(rows: pa.Table, row_filter: Any) -> pa.Table:
    """The rows the filter does not select: false or null, as a scan leaves them out."""
    indexed = rows.append_column(_ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    selected = indexed.filter(row_filter).column(_ROW).to_numpy()
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[selected] = False
    return rows.filter(pa.array(keep))


def _rewrite(file_io: FileIO, ts: TableSchema, old: DataFile, kept: pa.Table) -> CommitMessage:
    """``kept`` in new files numbered from the old file's first number, in order."""
    with writing(kind_of(ts).new_writer(file_io)) as writer:
        writer.write(kept)
        written = [f for m in writer.prepare_commit() for f in m.new_files]
    numbered, start = [], old.sequence_base
    for f in written:
        numbered.append(replace(f, sequence_base=start))
        start += f.row_count
    return CommitMessage(new_files=tuple(numbered))
