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
import pyarrow.compute as pc

from raylake.errors import UnknownColumnError
from raylake.expr import (
    AlwaysTrue,
    Expr,
    as_expr,
    bind,
    might_match,
    referenced_columns,
)
from raylake.format.manifest import data_files_from_table, live_data_files, live_files_of
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.format.types import has_min_max
from raylake.io import FileIO
from raylake.table.args import as_of_arg, columns_arg, snapshot_id_arg
from raylake.table.kind import kind_of
from raylake.table.readahead import read_ahead
from raylake.table.split import Split


class ManifestStats:
    """Adapts manifest columns to the expr module's StatsSource protocol."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema

    def has_stats(self, column: str) -> bool:
        return column in self._schema.names and has_min_max(self._schema.field(column).type)

    def min(self, column: str) -> pc.Expression:
        return pc.field("stats", column, "min")

    def max(self, column: str) -> pc.Expression:
        return pc.field("stats", column, "max")

    def null_count(self, column: str) -> pc.Expression:
        return pc.field("stats", column, "null_count")

    def row_count(self) -> pc.Expression:
        return pc.field("row_count")


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

    @property
    def output_schema(self) -> pa.Schema:
        schema = self.table_schema.arrow_schema
        if self.columns is None:
            return schema
        return pa.schema([schema.field(c) for c in self.columns])

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        """Stream the rows of one split as RecordBatches."""
        return self.read_all([split])

    def read_all(self, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        """Stream many splits; an append table's splits share one pyarrow scan (readahead)."""
        return kind_of(self.table_schema).read_batches(self, splits)

    def read_table(self, splits: Sequence[Split]) -> pa.Table:
        """All rows of many splits as one table (the same rows as ``read_all``)."""
        return kind_of(self.table_schema).read_table(self, splits)

    def read_tables(self, splits: Iterable[Split], window: int | None = None) -> Iterator[pa.Table]:
        """Each split's rows as a table, in order, with ``window`` split reads in flight
        (default: ``FileIO.files_in_flight``, more on remote stores); memory holds a
        window of splits, never all of them (raylake/table/readahead.py)."""
        size = self.file_io.files_in_flight if window is None else window
        return read_ahead(lambda split: self.read_table([split]), splits, size)


@dataclass(frozen=True)
class TableScan:
    """An immutable scan builder: ``select``/``where``/``at`` return new scans."""

    file_io: FileIO
    table_schema: TableSchema
    columns: tuple[str, ...] | None = None
    filter: Expr = field(default_factory=AlwaysTrue)
    snapshot_id: int | None = None
    as_of: int | None = None  # epoch millis
    split_target_size: int | None = None

    def select(self, columns: Sequence[str] | None) -> TableScan:
        columns = columns_arg(columns)
        if columns is None:
            return replace(self, columns=None)
        names = self.table_schema.column_names
        for c in columns:
            if c not in names:
                raise UnknownColumnError(c, names)
        return replace(self, columns=tuple(columns))

    def where(self, filter: str | Expr | None) -> TableScan:
        expr = as_expr(filter)
        bound = bind(expr, self.table_schema.arrow_schema)  # fail early on unknown columns
        return replace(self, filter=bound)

    def at(self, snapshot_id: int | None = None, as_of: datetime | int | None = None) -> TableScan:
        snapshot_id, as_of = snapshot_id_arg(snapshot_id), as_of_arg(as_of)
        return replace(self, snapshot_id=snapshot_id, as_of=_to_millis(as_of))

    def with_split_size(self, target_bytes: int) -> TableScan:
        return replace(self, split_target_size=target_bytes)

    def snapshot(self) -> Snapshot | None:
        manager = SnapshotManager(self.file_io)
        if self.snapshot_id is not None:
            return manager.get(self.snapshot_id)
        if self.as_of is not None:
            return manager.as_of(self.as_of)
        return manager.latest()

    def read_context(self) -> ReadContext:
        return ReadContext(self.file_io, self.table_schema, self.columns, self.filter)

    @property
    def output_schema(self) -> pa.Schema:
        return self.read_context().output_schema

    def plan(self) -> list[Split]:
        """Splits of the chosen snapshot that may hold matching rows (manifests only)."""
        snap = self.snapshot()
        if snap is None:
            return []
        ts = self.table_schema
        kind = kind_of(ts)
        pruning = kind.pruning_filter(self.filter)
        if isinstance(pruning, AlwaysTrue):
            files = live_data_files(self.file_io, snap.base_manifests, ts)
        else:
            # Decode the statistics of the filter's columns only (cold planning of wide
            # tables), and only the rows that survive pruning.
            stats_columns = referenced_columns(pruning)
            live = live_files_of(self.file_io, snap.base_manifests, ts, stats_columns)
            if live.num_rows:
                live = live.filter(might_match(pruning, ManifestStats(ts.arrow_schema)))
            files = data_files_from_table(live, ts)
        target = self.split_target_size or ts.table_options.split_target_size
        return kind.plan_splits(snap.id, files, self._column_indices(), target)

    def _column_indices(self) -> list[int] | None:
        if self.columns is None:
            return None
        names = self.table_schema.column_names
        return [names.index(c) for c in self.columns]

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        yield from self.read_context().read_all(self.plan())

    def to_arrow(self) -> pa.Table:
        return self.read_context().read_table(self.plan())

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.to_arrow().to_pandas(**kwargs)

    def count(self) -> int:
        """Row count; from manifests alone for the splits that need no filter or merge."""
        splits = self.plan()
        kind = kind_of(self.table_schema)
        known: list[int] = []
        rest: list[Split] = []
        for split in splits:
            rows = kind.exact_row_count(split) if isinstance(self.filter, AlwaysTrue) else None
            if rows is None:
                rest.append(split)
            else:
                known.append(rows)
        counted = self.select([]).read_context().read_all(rest) if rest else iter(())
        return sum(known) + sum(b.num_rows for b in counted)


def _to_millis(value: datetime | int | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    if value.tzinfo is None:
        value = value.astimezone()  # naive times are local times, as in datetime.timestamp()
    return int(value.timestamp() * 1000)
