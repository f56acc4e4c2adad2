"""Scan planning and split reading.

Planning happens once, on the driver, from manifests only: live files are
pruned by one vectorized filter over the manifest's typed statistics (which
covers partition values too, since a partition column's min equals its max in
every file), then packed into splits. Reading a split hands its files and
row-group ranges to ``pyarrow.dataset``, which prunes row groups by Parquet
statistics and filters rows in C++.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from raylake.errors import UnknownColumnError
from raylake.expr import (
    AlwaysTrue,
    Expr,
    as_expr,
    bind,
    might_match,
    nan_sensitive,
    referenced_columns,
    to_arrow,
)
from raylake.format.manifest import data_files_from_table, live_files_of
from raylake.format.options import TableOptions
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.format.types import has_min_max
from raylake.io import FileIO
from raylake.table.fragments import fragments_dataset, parquet_fragment
from raylake.table.split import Split, pack_slices, partition_sort_key, slice_file


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
    """Everything a worker needs to read splits: picklable, no caches, no table object."""

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
        if split.needs_merge:
            from raylake.table.pk.read import read_merged_split

            yield from read_merged_split(self, split)
            return
        dataset = self._dataset([split])
        yield from self._scan(dataset)

    def read_all(self, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        """Stream many splits; an append table's splits share one pyarrow scan (readahead)."""
        if self.table_schema.is_primary_key_table:
            from raylake.table.pk.read import read_primary_key_splits

            yield from read_primary_key_splits(self, splits)
            return
        if splits:
            yield from self._scan(self._dataset(splits))

    def read_table(self, splits: Sequence[Split]) -> pa.Table:
        """All rows of many splits as one table (one threaded pyarrow scan for append tables)."""
        if self.table_schema.is_primary_key_table:
            from raylake.table.pk.read import read_primary_key_table

            return read_primary_key_table(self, splits)
        if not splits:
            return self.output_schema.empty_table()
        dataset = self._dataset(splits)
        if nan_sensitive(self.filter):
            return pa.Table.from_batches(list(self._scan(dataset)), schema=self.output_schema)
        return dataset.to_table(**self._scan_args())

    def _dataset(self, splits: Sequence[Split]) -> ds.FileSystemDataset:
        fragments = []
        for split in splits:
            # Telling pyarrow each file's partition values lets it drop predicates they
            # already decide (residuals, as with hive partitioning) instead of testing rows.
            guarantee = self._partition_guarantee(split.partition)
            fragments += [
                parquet_fragment(
                    self.file_io,
                    piece.path,
                    row_groups=piece.row_groups,
                    partition_expression=guarantee,
                )
                for piece in split.files
            ]
        return fragments_dataset(self.file_io, self.table_schema.arrow_schema, fragments)

    def _partition_guarantee(self, partition: tuple[Any, ...]) -> pc.Expression:
        guarantee = pc.scalar(True)
        schema = self.table_schema.arrow_schema
        for key, value in zip(self.table_schema.partition_keys, partition):
            column = pc.field(key)
            if value is None:
                guarantee = guarantee & column.is_null()
            else:
                guarantee = guarantee & (column == pa.scalar(value, schema.field(key).type))
        return guarantee

    def _scan_args(self) -> dict[str, Any]:
        return {
            "columns": None if self.columns is None else list(self.columns),
            "filter": None if isinstance(self.filter, AlwaysTrue) else to_arrow(self.filter),
            "batch_size": self.batch_size,
        }

    def _scan(self, dataset: ds.Dataset) -> Iterator[pa.RecordBatch]:
        if not nan_sensitive(self.filter):
            yield from dataset.to_batches(**self._scan_args())
            return
        # Filter rows only: pyarrow would prune row groups by NaN-blind statistics.
        args = self._scan_args()
        row_filter, columns = args.pop("filter"), args.pop("columns")
        needed = None
        if columns is not None:
            extra = referenced_columns(self.filter) - set(columns)
            needed = columns + [c for c in self.table_schema.column_names if c in extra]
        for batch in dataset.to_batches(columns=needed, **args):
            kept = pa.Table.from_batches([batch]).filter(row_filter)
            if columns is not None:
                kept = kept.select(columns)
            yield from kept.to_batches()


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
        if columns is None:
            return replace(self, columns=None)
        if isinstance(columns, str):
            columns = [columns]
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
        live = live_files_of(self.file_io, snap.base_manifests, ts)
        pruning = self._pruning_filter()
        if not isinstance(pruning, AlwaysTrue) and live.num_rows:
            live = live.filter(might_match(pruning, ManifestStats(ts.arrow_schema)))
        files = data_files_from_table(live, ts)
        options = ts.table_options
        target = self.split_target_size or options.split_target_size
        if ts.is_primary_key_table:
            from raylake.table.pk.read import plan_primary_key_splits

            return plan_primary_key_splits(snap.id, files, ts, self._column_indices(), target)
        return plan_append_splits(snap.id, files, self._column_indices(), options, target)

    def _pruning_filter(self) -> Expr:
        """The part of the filter that may prune files before reading."""
        if not self.table_schema.is_primary_key_table:
            return self.filter
        # Only key and partition predicates may prune a primary-key table: a value predicate
        # could prune the file holding a row's newest version and resurface an older one.
        from raylake.expr import filter_on_columns

        ts = self.table_schema
        return filter_on_columns(self.filter, {*ts.primary_key, *ts.partition_keys})

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
        """Row count; exact from manifests alone when nothing must be filtered or merged."""
        splits = self.plan()
        if isinstance(self.filter, AlwaysTrue) and not any(s.needs_merge for s in splits):
            return sum(s.row_count for s in splits)
        if isinstance(self.filter, AlwaysTrue) and self.table_schema.is_primary_key_table:
            from raylake.table.pk.read import exact_row_count

            known = {i: exact_row_count(s) for i, s in enumerate(splits)}
            rest = [s for i, s in enumerate(splits) if known[i] is None]
            merged = self.select([]).read_context().read_all(rest) if rest else iter(())
            return sum(n or 0 for n in known.values()) + sum(b.num_rows for b in merged)
        return sum(b.num_rows for b in self.select([]).read_context().read_all(splits))


def plan_append_splits(
    snapshot_id: int,
    files: list[Any],
    column_indices: Sequence[int] | None,
    options: TableOptions,
    target: int,
) -> list[Split]:
    files = sorted(files, key=lambda f: (partition_sort_key(f.partition), f.path))
    pieces = [
        (f.partition, f.bucket, piece)
        for f in files
        for piece in slice_file(f, target, column_indices)
    ]
    return pack_slices(snapshot_id, pieces, target, options.split_open_file_cost)


def _to_millis(value: datetime | int | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    if value.tzinfo is None:
        value = value.astimezone()  # naive times are local times, as in datetime.timestamp()
    return int(value.timestamp() * 1000)
