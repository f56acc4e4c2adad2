"""Append tables: independent files, split by row-group ranges, read by pyarrow.dataset.

Every split's files (or row-group ranges) go into one ``pyarrow.dataset`` scan,
which prunes row groups by Parquet statistics, filters rows in C++ and reads
several files ahead in parallel.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from raylake.expr import AlwaysTrue, Expr, nan_sensitive, referenced_columns, to_arrow
from raylake.format.manifest import DataFile
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.table.append_writer import AppendTableWriter
from raylake.table.changes import InsertSplit
from raylake.table.fragments import (
    fragments_dataset,
    parquet_fragment,
    scan_arguments,
    scan_batches,
)
from raylake.table.kind import TableKind
from raylake.table.projection import FileProjection, projection_of
from raylake.table.readahead import read_ahead
from raylake.table.rowfilter import filter_rows, widen
from raylake.table.split import Split, pack_slices, partition_sort_key, slice_file
from raylake.table.writer import TableWriter

if TYPE_CHECKING:
    from raylake.table.changes import ChangeRange, ChangeSplit
    from raylake.table.scan import ReadContext
    from raylake.table.table import Table


class AppendKind(TableKind):
    name = "append"
    described = "an append table"
    write_modes = ("append", "overwrite")

    def new_writer(self, file_io: FileIO, *, file_prefix: str = "data") -> TableWriter:
        return AppendTableWriter(file_io, self.ts, file_prefix=file_prefix)

    def pruning_filter(self, filter: Expr) -> Expr:
        return filter  # files are independent: any predicate may prune

    def plan_splits(
        self,
        snapshot_id: int,
        files: list[DataFile],
        column_indices: Sequence[int] | None,
        target_size: int,
    ) -> list[Split]:
        """Files in partition order, each partition's in the order they were written,
        large ones cut into row-group ranges, packed."""
        files = in_read_order(files)
        pieces = [
            (f.partition, f.bucket, piece)
            for f in files
            for piece in slice_file(f, target_size, column_indices)
        ]
        return pack_slices(
            snapshot_id, pieces, target_size, self.ts.table_options.split_open_file_cost
        )

    def read_batches(self, ctx: ReadContext, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        if not splits:
            return
        for dataset, projection in _datasets(ctx, splits):
            if projection is None:
                yield from _batches(ctx, dataset)
            else:
                yield from _projected_batches(ctx, dataset, projection)

    def read_table(self, ctx: ReadContext, splits: Sequence[Split]) -> pa.Table:
        """The same scan as ``read_batches``, materialized by pyarrow itself: its
        ``to_table`` assembles batches on all cores (~20% faster than collecting them)."""
        if not splits or nan_sensitive(ctx.filter):
            return super().read_table(ctx, splits)
        datasets = _datasets(ctx, splits)
        if len(datasets) > 1 and ctx.columns == ():
            # concat_tables forgets the rows of tables without columns (counting).
            return super().read_table(ctx, splits)
        parts = []
        for dataset, projection in datasets:
            if projection is None:
                parts.append(_table(ctx, dataset))
                continue
            columns = list(ctx.output_schema.names)
            pa_table = dataset.to_table(
                columns=projection.dataset_columns(columns),
                filter=projection.filter(ctx.filter),
                batch_size=ctx.batch_size,
                use_threads=ctx.use_threads,
                **scan_arguments(ctx.file_io),
            )
            if columns:  # the scan's fields (a dataset projection makes them nullable)
                pa_table = pa.Table.from_arrays(pa_table.columns, schema=ctx.output_schema)
            parts.append(pa_table)
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def exact_row_count(self, split: Split) -> int | None:
        return split.row_count

    def plan_changes(self, rng: ChangeRange) -> list[ChangeSplit]:
        """Rows of the files added as inserts, of the files removed (an overwrite) as
        deletes: files are independent, so that is the whole change."""
        if rng.step:
            return [InsertSplit(s) for s in rng.splits(rng.after.id, rng.added())]
        from raylake.table.append_changes import through_compactions

        return rng.file_changes(expand=through_compactions(rng))

    def compact(self, file_io: FileIO, *, full: bool) -> Snapshot | None:
        from raylake.table.append_compaction import compact_append

        return compact_append(file_io, self.ts, full=full)

    def delete(self, tbl: Table, keys_or_filter: Any) -> Snapshot | None:
        from raylake.table.append_delete import delete_append_rows

        return delete_append_rows(tbl, keys_or_filter)

    @property
    def shards_by_file(self) -> bool:
        # Every file of a raylake append table lies in bucket 0, whatever ``buckets`` the
        # table was created with: sharded by bucket, one shard would read it all.
        return True

    @property
    def bucket_count(self) -> int | None:
        return 1  # the same: the ``buckets`` stored by a table made before meant nothing


def in_read_order(files: Sequence[DataFile]) -> list[DataFile]:
    """Files in partition order, each partition's in the order they were written: a
    commit numbers its new files in order (sequence_base), the same for two tables
    written alike, whatever their random file names (docs/format.md, "Row order")."""
    # Partitions are few: compute each one's sort key once, not once per file.
    partition_keys = {f.partition: partition_sort_key(f.partition) for f in files}
    return sorted(files, key=lambda f: (partition_keys[f.partition], f.sequence_base, f.path))


def columns_of(ctx: ReadContext) -> list[str] | None:
    return None if ctx.columns is None else list(ctx.columns)


def _batches(ctx: ReadContext, dataset: ds.FileSystemDataset) -> Iterator[pa.RecordBatch]:
    scan = {**scan_arguments(ctx.file_io), "use_threads": ctx.use_threads}
    columns = columns_of(ctx)
    row_filter = None if isinstance(ctx.filter, AlwaysTrue) else to_arrow(ctx.filter)
    if not nan_sensitive(ctx.filter):
        yield from scan_batches(
            ctx.file_io,
            dataset,
            columns=columns,
            filter=row_filter,
            batch_size=ctx.batch_size,
            **scan,
        )
        return
    # Filter rows only: pyarrow would prune row groups by NaN-blind statistics.
    needed = widen(columns, referenced_columns(ctx.filter), ctx.table_schema.column_names)
    batches = scan_batches(ctx.file_io, dataset, columns=needed, batch_size=ctx.batch_size, **scan)
    yield from filter_rows(batches, row_filter, columns)


def _projected_batches(
    ctx: ReadContext, dataset: ds.FileSystemDataset, projection: FileProjection
) -> Iterator[pa.RecordBatch]:
    """Files of another schema version: read by field id, as the scan's columns."""
    scan = {**scan_arguments(ctx.file_io), "use_threads": ctx.use_threads}
    output = ctx.output_schema
    if not nan_sensitive(ctx.filter):
        batches = scan_batches(
            ctx.file_io,
            dataset,
            columns=projection.dataset_columns(output.names),
            filter=projection.filter(ctx.filter),
            batch_size=ctx.batch_size,
            **scan,
        )
        yield from (_as_output(batch, output) for batch in batches)
        return
    needed = widen(output.names, referenced_columns(ctx.filter), ctx.table_schema.column_names)
    assert needed is not None
    read = scan_batches(
        ctx.file_io,
        dataset,
        columns=projection.dataset_columns(needed),
        batch_size=ctx.batch_size,
        **scan,
    )
    for batch in filter_rows(read, to_arrow(ctx.filter), output.names):
        yield _as_output(batch, output)


def _as_output(batch: pa.RecordBatch, output: pa.Schema) -> pa.RecordBatch:
    """A batch with the scan's fields (a dataset projection makes every field nullable)."""
    if not output.names:  # counting: a batch without columns still has its rows
        return batch
    return pa.RecordBatch.from_arrays(batch.columns, schema=output)


def _table(ctx: ReadContext, dataset: ds.FileSystemDataset) -> pa.Table:
    row_filter = None if isinstance(ctx.filter, AlwaysTrue) else to_arrow(ctx.filter)
    columns = columns_of(ctx)
    fragments = list(dataset.get_fragments())
    if ctx.file_io.is_remote and len(fragments) > 1 and columns != []:
        # On an object store, files read on a pool of their own beat one scanner's
        # fragment readahead (bench/object_store.py): each file's footer and row
        # groups are requested as soon as a thread is free, not as the scanner's
        # batch queue drains. The result is the whole table either way.
        def read(fragment: ds.Fragment) -> pa.Table:
            one = fragments_dataset(ctx.file_io, dataset.schema, [fragment])
            return one.to_table(
                columns=columns,
                filter=row_filter,
                batch_size=ctx.batch_size,
                use_threads=ctx.use_threads,
            )

        window = ctx.file_io.files_in_flight
        return pa.concat_tables(list(read_ahead(read, fragments, window)))
    return dataset.to_table(
        columns=columns,
        filter=row_filter,
        batch_size=ctx.batch_size,
        use_threads=ctx.use_threads,
        **scan_arguments(ctx.file_io),
    )


def _datasets(
    ctx: ReadContext, splits: Sequence[Split]
) -> list[tuple[ds.FileSystemDataset, FileProjection | None]]:
    """The splits' files as datasets, in plan order: one per run of files that read
    alike (as they are, or through one older schema version's projection).

    A table that never evolved has one. Runs, not one dataset per schema version:
    reads keep the plan's order, which is the order rows were written (a rename
    between two writes would otherwise read the later write's rows first).
    """
    # (schema id, or None for the files that read as they are; projection; fragments)
    runs: list[tuple[int | None, FileProjection | None, list[ds.ParquetFileFragment]]] = []
    schema = ctx.table_schema.arrow_schema
    for split in splits:
        # Telling pyarrow each file's partition values lets it drop predicates they
        # already decide (residuals, as with hive partitioning) instead of testing rows.
        guarantee = _partition_guarantee(ctx, split.partition)
        for piece in split.files:
            projection = projection_of(ctx.file_io, ctx.table_schema, piece.schema_id)
            if projection is not None and projection.by_name:
                projection = None  # pyarrow casts and fills by name in the one scan
            fragment = parquet_fragment(
                ctx.file_io,
                piece.path,
                row_groups=piece.row_groups,
                partition_expression=guarantee,
                file_size=piece.file_size,
            )
            key = None if projection is None else piece.schema_id
            if not runs or runs[-1][0] != key:
                runs.append((key, projection, []))
            runs[-1][2].append(fragment)
    if not runs:
        runs.append((None, None, []))
    return [
        (
            fragments_dataset(
                ctx.file_io, schema if p is None else p.view_schema(schema), fragments
            ),
            p,
        )
        for _, p, fragments in runs
    ]


def _partition_guarantee(ctx: ReadContext, partition: tuple[Any, ...]) -> pc.Expression:
    guarantee = pc.scalar(True)
    schema = ctx.table_schema.arrow_schema
    for key, value in zip(ctx.table_schema.partition_keys, partition):
        column = pc.field(key)
        if value is None:
            guarantee = guarantee & column.is_null()
        else:
            guarantee = guarantee & (column == pa.scalar(value, schema.field(key).type))
    return guarantee
