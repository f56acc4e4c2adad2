"""The read work of a stream plan: small picklable splits, readable in any process.

Three kinds, one per way a snapshot's changes are found:

- :class:`InsertSplit`: rows that are new as a whole (a full state, an append
  table's added files); every row is an insert.
- :class:`ChangelogSplit`: one bucket's changelog files of one snapshot (primary-key
  tables with a ``changelog-producer``), rows with their recorded row kinds.
- :class:`DiffSplit`: one bucket's merged state at two snapshots, compared
  (primary-key tables without a changelog, and catch-up across many snapshots).

:class:`StreamReadContext` reads any of them into the stream's output schema: the
projected columns, and ``_rl_kind`` (``+I``/``-U``/``+U``/``-D``) when asked. Without
the row kind a stream carries upserts only: inserts and after-images (``+I``,
``+U``); before-images and deletes need ``include_row_kind=True``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.expr import AlwaysTrue, Expr, referenced_columns, to_arrow
from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.pk.changelog import diff_states
from raylake.table.pk.read import read_file
from raylake.table.pk.schema import INSERT, KIND, KIND_NAMES, SEQ, UPDATE_AFTER
from raylake.table.rowfilter import widen
from raylake.table.scan import ReadContext, TableScan
from raylake.table.split import Split

ROW_KIND = KIND  # "_rl_kind": the name Table.changelog uses, which a PK writer accepts


@dataclass(frozen=True)
class InsertSplit:
    """The rows of a table split, each one an insert."""

    split: Split

    @property
    def bucket(self) -> int:
        return self.split.bucket

    @property
    def row_count(self) -> int:
        return self.split.row_count


@dataclass(frozen=True)
class ChangelogSplit:
    """The changelog files one snapshot wrote for one bucket."""

    snapshot_id: int
    partition: tuple[Any, ...]
    bucket: int
    files: tuple[DataFile, ...]

    @property
    def row_count(self) -> int:
        return sum(f.row_count for f in self.files)


@dataclass(frozen=True)
class DiffSplit:
    """The changes of one bucket between two snapshots (``before`` None: from empty)."""

    before: int | None
    after: int
    partition: tuple[Any, ...]
    bucket: int
    row_count: int = 0  # live rows of the bucket at ``after``, before merging: an estimate


StreamSplit = InsertSplit | ChangelogSplit | DiffSplit


@dataclass(frozen=True)
class StreamReadContext:
    """Everything a worker needs to read stream splits: picklable, no table object."""

    file_io: FileIO
    table_schema: TableSchema
    columns: tuple[str, ...] | None = None
    filter: Expr = field(default_factory=AlwaysTrue)
    include_row_kind: bool = False

    @property
    def output_schema(self) -> pa.Schema:
        schema = ReadContext(self.file_io, self.table_schema, self.columns).output_schema
        if self.include_row_kind:
            schema = schema.append(pa.field(ROW_KIND, pa.string(), nullable=False))
        return schema

    def read(self, split: StreamSplit) -> Iterator[pa.RecordBatch]:
        if isinstance(split, InsertSplit):
            return self._inserts(split.split)
        if isinstance(split, ChangelogSplit):
            return self._changes(self._changelog_rows(split))
        return self._changes(self._diff_rows(split))

    def read_all(self, splits: Sequence[StreamSplit]) -> Iterator[pa.RecordBatch]:
        for split in splits:
            yield from self.read(split)

    def read_table(self, splits: Sequence[StreamSplit]) -> pa.Table:
        return pa.Table.from_batches(list(self.read_all(splits)), schema=self.output_schema)

    # -- the three kinds ---------------------------------------------------------------

    def _inserts(self, split: Split) -> Iterator[pa.RecordBatch]:
        ctx = ReadContext(self.file_io, self.table_schema, self.columns, self.filter)
        for batch in ctx.read(split):
            if self.include_row_kind:
                kinds = pa.repeat(pa.scalar(KIND_NAMES[INSERT]), batch.num_rows)
                batch = batch.append_column(self.output_schema.field(ROW_KIND), kinds)
            yield batch

    def _needed_columns(self) -> list[str]:
        names = self.table_schema.column_names
        wanted = widen(self.columns, referenced_columns(self.filter), names)
        return list(names) if wanted is None else wanted

    def _changelog_rows(self, split: ChangelogSplit) -> Iterator[pa.Table]:
        columns = [*self._needed_columns(), KIND]
        for f in split.files:
            yield read_file(self.file_io, self.table_schema, f, columns)

    def _diff_rows(self, split: DiffSplit) -> Iterator[pa.Table]:
        before = _bucket_state(self, split.before, split.partition, split.bucket)
        after = _bucket_state(self, split.after, split.partition, split.bucket)
        ts = self.table_schema
        yield diff_states(_as_file_rows(before, ts), _as_file_rows(after, ts), ts)

    def _changes(self, tables: Iterator[pa.Table]) -> Iterator[pa.RecordBatch]:
        """Rows with an int8 row kind -> filtered, projected, with the kind as asked."""
        row_filter = None if isinstance(self.filter, AlwaysTrue) else to_arrow(self.filter)
        out = self.output_schema
        for rows in tables:
            if row_filter is not None:
                rows = rows.filter(row_filter)
            kinds = rows.column(KIND)
            if not self.include_row_kind:
                upserts = pc.or_(pc.equal(kinds, INSERT), pc.equal(kinds, UPDATE_AFTER))
                rows = rows.filter(upserts)
            columns = [rows.column(f.name) for f in out if f.name != ROW_KIND]
            if self.include_row_kind:
                codes = np.asarray(rows.column(KIND).to_numpy(), dtype=np.int64)
                columns.append(pa.array(np.asarray(KIND_NAMES, dtype=object)[codes], pa.string()))
            if rows.num_rows:
                yield from pa.Table.from_arrays(columns, schema=out).to_batches()


def _bucket_state(
    ctx: StreamReadContext, snapshot_id: int | None, partition: tuple[Any, ...], bucket: int
) -> pa.Table:
    """One bucket's merged rows (every column) at a snapshot; empty for None."""
    ts = ctx.table_schema
    if snapshot_id is None:
        return ts.arrow_schema.empty_table()
    scan = TableScan(ctx.file_io, ts).at(snapshot_id)
    splits = [s for s in scan.plan() if s.bucket == bucket and s.partition == partition]
    return scan.read_context().read_table(splits)


def _as_file_rows(state: pa.Table, ts: TableSchema) -> pa.Table:
    """Merged rows in the data-file layout that ``diff_states`` compares."""
    n = state.num_rows
    return state.append_column(
        pa.field(SEQ, pa.int64(), nullable=False), pa.array(np.zeros(n, dtype=np.int64))
    ).append_column(pa.field(KIND, pa.int8(), nullable=False), pa.array(np.zeros(n, dtype=np.int8)))
