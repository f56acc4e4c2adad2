"""Scan planning and split reading.

Planning happens once, on the driver, from manifests only: live files are
pruned by one vectorized filter over the manifest's typed statistics (which
covers partition values too, since a partition column's min equals its max in
every file), then packed into splits. Reading goes through one kernel,
:class:`ReadContext`, whose table kind decides how (raylake/table/kind.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pyarrow as pa

from raylake.arguments import check_count, refuse_unknown_keywords
from raylake.errors import InvalidArgumentError, UnknownColumnError, UnsupportedOperationError
from raylake.expr import AlwaysTrue, Expr, and_, as_expr, bind
from raylake.format.schema import TableSchema
from raylake.format.schema_files import schema_by_id
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.io.read_errors import (
    batches_retried,
    named_batches,
    named_store_errors,
    reads_retried,
)
from raylake.table.args import as_of_arg, columns_arg, datetime_millis, snapshot_id_arg
from raylake.table.counting import count_rows
from raylake.table.kind import kind_of
from raylake.table.readahead import read_ahead
from raylake.table.scan_reads import ScanReads
from raylake.table.source import (  # their home before the sources
    ManifestStats as ManifestStats,
)
from raylake.table.source import (
    RaylakeSource,
    TableSource,
)
from raylake.table.source import (
    prune_entries as prune_entries,
)
from raylake.table.source import (
    pruned_live_files as pruned_live_files,
)
from raylake.table.split import Split
from raylake.table.stale_schema import stale_schema_batches, stale_schema_errors
from raylake.table.visible import visible_batches, visible_errors


@dataclass(frozen=True)
class ReadContext:
    """Everything a worker needs to read splits: picklable, no caches, no table object.

    Ray read tasks, Spark tasks, Torch workers and streaming readers all read through
    this one kernel; the table kind decides how (a pyarrow scan, or merge-on-read).
    """

    file_io: FileIO
    table_schema: TableSchema
    columns: tuple[str, ...] | None = None
    filter: Expr = field(default_factory=AlwaysTrue)
    batch_size: int = 131_072
    # False: an append table's scan decodes on the calling thread, not on pyarrow's
    # process-wide CPU pool (a training loader's cap on its cores, docs/training.md).
    use_threads: bool = True

    @property
    def output_schema(self) -> pa.Schema:
        schema = self.table_schema.arrow_schema
        if self.columns is None:
            return schema
        return pa.schema([schema.field(c) for c in self.columns])

    @refuse_unknown_keywords
    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        """Stream the rows of one split as RecordBatches."""
        return self.read_all([split])

    @refuse_unknown_keywords
    def read_all(self, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        """Stream many splits; an append table's splits share one pyarrow scan (readahead).
        A read that fails after the retry bound raises StorageRetriesExhaustedError."""
        read = kind_of(self.table_schema).read_batches
        policy = self.file_io.retry_policy
        splits = list(splits)  # read again from the start on a retry: not an iterator
        batches = batches_retried(lambda: read(self, splits), policy)
        named = named_batches(batches, policy.max_attempts)
        # A worker on a machine without the table's disk: named, not a missing file.
        visible = visible_batches(self.file_io, named)
        return stale_schema_batches(self.file_io, self.table_schema, visible)

    @refuse_unknown_keywords
    def read_table(self, splits: Sequence[Split]) -> pa.Table:
        """All rows of many splits as one table (the same rows as ``read_all``)."""
        with (
            stale_schema_errors(self.file_io, self.table_schema),
            named_store_errors(self.file_io.retry_policy.max_attempts),
            visible_errors(self.file_io),
        ):
            read = kind_of(self.table_schema).read_table
            return reads_retried(lambda: read(self, splits), self.file_io.retry_policy)

    @refuse_unknown_keywords
    def read_tables(self, splits: Iterable[Split], window: int | None = None) -> Iterator[pa.Table]:
        """Each split's rows as a table, in order, with ``window`` split reads in flight
        (default: ``FileIO.files_in_flight``, more on remote stores); memory holds a
        window of splits, never all of them (raylake/table/readahead.py)."""
        size = self.file_io.files_in_flight if window is None else window
        return read_ahead(lambda split: self.read_table([split]), splits, size)


@dataclass(frozen=True)
class TableScan(ScanReads):
    """An immutable scan builder: ``select``/``where``/``at`` return new scans."""

    file_io: FileIO
    table_schema: TableSchema
    columns: tuple[str, ...] | None = None
    filter: Expr = field(default_factory=AlwaysTrue)
    snapshot_id: int | None = None
    as_of: int | None = None  # epoch millis
    split_target_size: int | None = None
    # Where snapshots and files come from (None: the raylake table at file_io).
    table_source: TableSource | None = field(default=None, repr=False, compare=False)
    # The snapshot this scan resolved on first use: one scan reads one snapshot, and
    # reads its file once (`pin`). Not an init field, so `replace` starts a new scan fresh.
    _resolved: list[Snapshot | None] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    @refuse_unknown_keywords
    def select(self, columns: Sequence[str] | None) -> TableScan:
        columns = columns_arg(columns)
        if columns is None:
            return self._derive(columns=None)
        names = self.table_schema.column_names
        for c in columns:
            if c not in names:
                raise UnknownColumnError(c, names)
        if len(set(columns)) != len(columns):  # two equal names break to_pandas and joins
            raise InvalidArgumentError("columns", columns, "a list of distinct column names")
        return self._derive(columns=tuple(columns))

    @refuse_unknown_keywords
    def where(self, filter: str | Expr | None) -> TableScan:
        """A scan whose rows also match ``filter`` (filters combine with AND)."""
        expr = as_expr(filter)
        bound = bind(expr, self.table_schema.arrow_schema)  # fail early on unknown columns
        return self._derive(filter=and_(self.filter, bound))

    @refuse_unknown_keywords
    def at(self, snapshot_id: int | None = None, as_of: datetime | int | None = None) -> TableScan:
        snapshot_id, as_of = snapshot_id_arg(snapshot_id), as_of_arg(as_of)
        if snapshot_id is not None and as_of is not None:  # which would win is a guess
            raise InvalidArgumentError("as_of", as_of, "None when snapshot_id is given")
        return replace(self, snapshot_id=snapshot_id, as_of=_to_millis(as_of))

    def as_of_its_schema(self) -> TableScan:
        """This scan under the schema its snapshot was committed with (time travel)."""
        snap = self.snapshot()
        if snap is None or snap.schema_id == self.table_schema.schema_id:
            return self
        if self.columns is not None or not isinstance(self.filter, AlwaysTrue):
            raise UnsupportedOperationError("choose a scan's schema before its columns and filter")
        return self._derive(table_schema=schema_by_id(self.file_io, snap.schema_id))

    @refuse_unknown_keywords
    def with_split_size(self, target_bytes: int) -> TableScan:
        return self._derive(split_target_size=check_count("target_bytes", target_bytes, 1))

    def _derive(self, **changes: Any) -> TableScan:
        """A copy with ``changes`` that reads the same snapshot, resolved once for both."""
        derived = replace(self, **changes)
        object.__setattr__(derived, "_resolved", self._resolved)
        return derived

    def snapshot(self) -> Snapshot | None:
        """The snapshot this scan reads, resolved on the first call and then kept."""
        if not self._resolved:
            snap = self._resolve_snapshot()
            self.source.check_opened_schema(self.table_schema, snap)
            self._resolved.append(snap)
        return self._resolved[0]

    @property
    def source(self) -> TableSource:
        """The table's source of snapshots and files."""
        if self.table_source is None:
            object.__setattr__(self, "table_source", RaylakeSource(self.file_io))
        assert self.table_source is not None
        return self.table_source

    def _resolve_snapshot(self) -> Snapshot | None:
        manager = self.source
        if self.snapshot_id is not None:
            return manager.get(self.snapshot_id)
        if self.as_of is not None:
            return manager.as_of(self.as_of)
        return manager.latest()

    def pin(self) -> TableScan:
        """This scan at the snapshot it resolves to now (latest, ``as_of`` or an id).

        Later commits do not change what the pinned scan reads, and its snapshot file is
        not read again.
        """
        snap = self.snapshot()
        pinned = replace(self, snapshot_id=snap.id if snap is not None else None, as_of=None)
        pinned._resolved.append(snap)
        return pinned

    def read_context(self) -> ReadContext:
        return ReadContext(self.file_io, self.table_schema, self.columns, self.filter)

    @property
    def output_schema(self) -> pa.Schema:
        return self.read_context().output_schema

    @refuse_unknown_keywords
    def plan(self) -> list[Split]:
        """Splits of the chosen snapshot that may hold matching rows (manifests only), in
        plan order: an append table's partitions in order, each one's rows in the order
        they were written (docs/format.md, "Row order")."""
        snap = self.snapshot()
        if snap is None:
            return []
        ts = self.table_schema
        kind = kind_of(ts)
        files = self.source.live_files(ts, snap, kind.pruning_filter(self.filter))
        target = self.split_target_size or ts.table_options.split_target_size
        return self.stamped(kind.plan_splits(snap.id, files, self._column_indices(), target))

    def stamped(self, splits: list[Split]) -> list[Split]:
        """``splits`` with the schema they are planned, and must be read, under."""
        schema_id = self.table_schema.schema_id
        return [replace(s, schema_id=schema_id) for s in splits]

    def _column_indices(self) -> list[int] | None:
        if self.columns is None:
            return None
        names = self.table_schema.column_names
        return [names.index(c) for c in self.columns]

    @refuse_unknown_keywords
    def count(self) -> int:
        """Row count; from manifests alone for the splits that need no filter or merge."""
        return count_rows(self.read_context(), self.plan())


def _to_millis(value: datetime | int | None, name: str = "as_of") -> int | None:
    if value is None or isinstance(value, int):
        return value
    return datetime_millis(value, name)
