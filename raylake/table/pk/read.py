"""Planning and reading primary-key tables: bucket-aligned splits, merge-on-read.

A bucket's files fall into *sections*: groups of files whose key ranges overlap
(transitively). Sections share no key, so each is merged on its own, and a
section of one file is read without merging at all (its keys are unique and
only its ``-D`` rows are dropped), with the whole filter pushed into the scan.

A section of several files is merged. Only key and partition predicates go below
the merge (every version of a key has the same key, so they keep or drop all of
them together); the rest of the filter runs on the merged rows, so an old
version can never reappear. Projections read the projected columns, the filter's
columns, the key and the system columns.

Most deduplicate sections need no sort either: pk_dedupe.py reads them newest
file first in one streaming scan. The rest are merged by merge_engines.py.

Memory: single-file sections and newest-first scans stream in batches (the
latter holds the keys of one section). A merged section holds the projected
columns of all its files, ~24 bytes per row for the sort and its run ids, and
the merged output, for each of up to MERGE_THREADS sections. See
docs/primary-keys.md.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from raylake.caching import ProcessLock
from raylake.expr import (
    AlwaysTrue,
    Expr,
    filter_on_columns,
    nan_sensitive,
    referenced_columns,
    to_arrow,
)
from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.fragments import fragments_dataset, parquet_fragment, scan_batches
from raylake.table.pk.engines import merge
from raylake.table.pk.files import read_file
from raylake.table.pk.kernel import picks_rows
from raylake.table.pk.late import decide, materialize, section_rows
from raylake.table.pk.schema import DELETE, KIND, SEQ, MergeSpec, file_schema
from raylake.table.projection import FileProjection, projection_of
from raylake.table.rowfilter import filter_rows, widen
from raylake.table.split import (
    FileSlice,
    KeyRange,
    ReadUnit,
    Split,
    pack_sections,
    projected_size,
    slice_file,
)

# Sections merged at once by one reader (each holds its section's data in memory).
MERGE_THREADS = min(4, os.cpu_count() or 1)

_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = ProcessLock()


def merge_pool() -> ThreadPoolExecutor:
    """This process's merge threads, kept from one read to the next (a forked child
    starts its own).

    Threads that live on keep their allocator's freed memory: a read decodes into the
    buffers the previous one released instead of faulting in fresh pages, as pyarrow's
    own scans do on its long-lived thread pool (issue 20: about half the page faults of
    a merged read went to threads made for that read alone).
    """
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            # One thread per core: reads running at once share the pool without being
            # held below the machine; one read uses at most MERGE_THREADS of them.
            size = max(os.cpu_count() or 1, MERGE_THREADS)
            pool = ThreadPoolExecutor(size, thread_name_prefix="raylake-merge")
            _pool = (os.getpid(), pool)
        return _pool[1]


class _Ranged(Protocol):
    @property
    def min_key(self) -> tuple[Any, ...] | None: ...

    @property
    def max_key(self) -> tuple[Any, ...] | None: ...


R = TypeVar("R", bound=_Ranged)


def overlap_sections(files: Sequence[R]) -> list[list[R]]:
    """Group files into sections of transitively overlapping key ranges, in key order."""
    if any(f.min_key is None or f.max_key is None for f in files):
        return [list(files)] if files else []
    ordered = sorted(files, key=lambda f: (f.min_key, f.max_key))
    sections: list[list[R]] = []
    end: Any = None
    for f in ordered:
        if sections and f.min_key <= end:  # type: ignore[operator]
            sections[-1].append(f)
            end = max(end, f.max_key)
        else:
            sections.append([f])
            end = f.max_key
    return sections


# -- planning ----------------------------------------------------------------------------


def plan_primary_key_splits(
    snapshot_id: int,
    files: list[DataFile],
    ts: TableSchema,
    column_indices: Sequence[int] | None,
    target_size: int,
) -> list[Split]:
    """Bucket-aligned splits: whole sections of one bucket, packed up to ``target_size``.

    The sections are computed here, once, and carried in the splits.
    """
    return pack_sections(
        snapshot_id,
        files,
        lambda members: _units(overlap_sections(members), column_indices, target_size),
        target_size,
    )


def _units(
    sections: list[list[DataFile]], column_indices: Sequence[int] | None, target_size: int
) -> Iterator[ReadUnit]:
    """The read units of a bucket's sections (rows: the files' before merging).

    A single file larger than the target is cut by row groups (its keys are unique).
    A larger merged section is cut into key ranges, at most one per row group of its
    files, so that a reader holds a part of it, never the whole bucket (ranges.py).
    """
    for section in sections:
        if len(section) == 1:
            for piece in slice_file(section[0], target_size, column_indices):
                yield ReadUnit([piece], piece.size_bytes, piece.row_count)
            continue
        size = sum(projected_size(f, column_indices) for f in section)
        # Whole files: a merge needs every row of every version (of the part's keys).
        files = [next(slice_file(f, 1 << 62, column_indices)) for f in section]
        # Cuts fall on the first keys of row groups, and a part reads whole row groups
        # of every file it spans: parts no narrower than the coarsest file's groups keep
        # each group decoded about once. Small files (a delete, a few upserts) do not
        # count: decoding them again costs little.
        rows = sum(f.row_count for f in section)
        counts = [max(len(f.row_group_rows), 1) for f in section]
        large = [n for n, f in zip(counts, section) if f.row_count * 10 >= rows]
        groups = min(large) if large else max(counts)
        count = min(-(-size // max(target_size, 1)), groups)
        file_rows = sum(f.row_count for f in files)
        if count <= 1:
            yield ReadUnit(files, size, file_rows)
            continue
        for index in range(count):
            yield ReadUnit(files, size // count, file_rows, KeyRange(index, count))


def exact_row_count(split: Split) -> int | None:
    """Live rows of a split from metadata alone, when no section needs a merge."""
    if any(size > 1 for size in split.sections):
        return None
    if any(f.row_groups is not None and f.delete_row_count for f in split.files):
        return None  # the file's -D rows are counted per file, not per row group
    return sum(f.row_count - f.delete_row_count for f in split.files)


# -- reading -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadPlan:
    """What a primary-key read fetches, pushes down, and applies after the merge."""

    spec: MergeSpec
    output: tuple[str, ...]
    merge_columns: tuple[str, ...]  # read from each file of a merged section
    key_filter: pc.Expression | None  # safe below the merge
    residual: pc.Expression | None  # applied to merged rows
    full_filter: pc.Expression | None  # for single-file sections
    # Filter to apply to rows only, never to Parquet statistics (expr.nan_sensitive).
    rows_only: bool = False
    filter_columns: tuple[str, ...] = ()
    output_schema: pa.Schema = field(default_factory=lambda: pa.schema([]))  # of ``output``

    @classmethod
    def of(
        cls,
        ts: TableSchema,
        columns: Sequence[str] | None,
        filter: Expr,
        spec: MergeSpec | None = None,
        order_columns: Sequence[str] = (),
    ) -> ReadPlan:
        """The plan of a read of ``columns`` under ``filter``: by the table's merge spec,
        or by ``spec``, whose versions ``order_columns`` order (another format's)."""
        spec = MergeSpec.of(ts) if spec is None else spec
        output = tuple(ts.column_names if columns is None else columns)
        keyish = {*ts.primary_key, *ts.partition_keys}
        filter_columns = referenced_columns(filter)
        pushed = filter_on_columns(filter, keyish)
        needed = [*ts.primary_key, *output, *sorted(filter_columns), *order_columns]
        if spec.sequence_field:
            needed.append(spec.sequence_field)
        ordered = [c for c in ts.column_names if c in set(needed)]
        whole = None if isinstance(filter, AlwaysTrue) else to_arrow(filter)
        return cls(
            spec=spec,
            output=output,
            merge_columns=(*ordered, SEQ, KIND),
            key_filter=None if isinstance(pushed, AlwaysTrue) else to_arrow(pushed),
            residual=None if filter_columns <= keyish else whole,
            full_filter=whole,
            rows_only=nan_sensitive(filter),
            filter_columns=tuple(c for c in ts.column_names if c in filter_columns),
            output_schema=pa.schema([ts.arrow_schema.field(c) for c in output]),
        )

    @property
    def table_columns(self) -> tuple[str, ...]:
        """The table's columns a read fetches (the merge's, without the system columns)."""
        return self.merge_columns[:-2]


Part = tuple[Sequence[FileSlice], KeyRange | None]


def _sections(splits: Sequence[Split]) -> tuple[list[FileSlice], list[Part]]:
    """The single-file sections (as files) and the sections (or parts) that need a merge."""
    singles: list[FileSlice] = []
    merged: list[Part] = []
    for split in splits:
        for section, part in split.merge_parts():
            if len(section) == 1:
                singles.extend(section)
            else:
                merged.append((section, part))
    return singles, merged


def read_primary_key_splits(ctx: Any, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
    """Rows of many splits: all single-file sections in one parallel scan, then merges."""
    ts: TableSchema = ctx.table_schema
    plan = ReadPlan.of(ts, ctx.columns, ctx.filter)
    singles, merged = _sections(splits)
    if singles:
        yield from _single_batches(ctx, plan, singles)
    for pa_table in merge_sections(ctx.file_io, ts, plan, merged):
        yield from pa_table.to_batches(max_chunksize=ctx.batch_size)


def read_primary_key_table(ctx: Any, splits: Sequence[Split]) -> pa.Table:
    """The rows of ``read_primary_key_splits`` as one table, assembled by pyarrow where it can."""
    ts: TableSchema = ctx.table_schema
    plan = ReadPlan.of(ts, ctx.columns, ctx.filter)
    singles, merged = _sections(splits)
    if (singles and plan.rows_only) or not plan.output:
        return pa.Table.from_batches(list(read_primary_key_splits(ctx, splits)), ctx.output_schema)
    parts = []
    for dataset, condition, projection in _single_scans(ctx, plan, singles):
        # pyarrow's to_table assembles batches on all cores (append.py measured ~20%).
        output = list(plan.output)
        columns = output if projection is None else projection.dataset_columns(output)
        found = dataset.to_table(columns=columns, filter=condition, batch_size=ctx.batch_size)
        if projection is not None:  # the table's fields (a projection makes them nullable)
            found = pa.Table.from_arrays(found.columns, schema=plan.output_schema)
        parts.append(found)
    parts += merge_sections(ctx.file_io, ts, plan, merged)
    if not parts:
        return ctx.output_schema.empty_table()
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _single_scans(
    ctx: Any, plan: ReadPlan, files: list[FileSlice]
) -> list[tuple[ds.FileSystemDataset, pc.Expression | None, FileProjection | None]]:
    """One scan of the files that read as they are, one per other schema version (a
    table that never evolved has only the first): dataset, condition, projection."""
    groups: dict[int | None, tuple[FileProjection | None, list[FileSlice]]] = {}
    for f in files:
        projection = projection_of(ctx.file_io, ctx.table_schema, f.schema_id)
        if projection is not None and projection.by_name:
            projection = None  # pyarrow casts and fills by name in the one scan
        key = None if projection is None else f.schema_id
        groups.setdefault(key, (projection, []))[1].append(f)
    schema = file_schema(ctx.table_schema)
    scans = []
    for projection, members in groups.values():
        fragments = [
            parquet_fragment(ctx.file_io, f.path, row_groups=f.row_groups, file_size=f.file_size)
            for f in members
        ]
        view = schema if projection is None else projection.view_schema(schema)
        dataset = fragments_dataset(ctx.file_io, view, fragments)
        condition = None
        if not plan.rows_only:
            condition = plan.full_filter if projection is None else projection.filter(ctx.filter)
        if any(f.delete_row_count for f in members):
            live = pc.field(KIND) != pa.scalar(DELETE, pa.int8())
            condition = live if condition is None else live & condition
        scans.append((dataset, condition, projection))
    return scans


def _single_batches(ctx: Any, plan: ReadPlan, files: list[FileSlice]) -> Iterator[pa.RecordBatch]:
    """A single file's rows are final: drop its -D rows, and push the whole filter down.

    A ``rows_only`` filter is not pushed (pyarrow would prune row groups by statistics
    that ignore NaN): its columns are read too, and it is applied to the rows.
    """
    output = list(plan.output)
    for dataset, condition, projection in _single_scans(ctx, plan, files):
        needed = output
        if plan.rows_only:
            needed = widen(output, plan.filter_columns, ctx.table_schema.column_names) or []
        columns = needed if projection is None else projection.dataset_columns(needed)
        batches = scan_batches(
            ctx.file_io, dataset, columns=columns, filter=condition, batch_size=ctx.batch_size
        )
        if plan.rows_only:
            batches = filter_rows(batches, plan.full_filter, output)
        if projection is None or not output:
            yield from batches
        else:  # the table's fields (a projection makes them nullable)
            yield from (
                pa.RecordBatch.from_arrays(b.columns, schema=plan.output_schema) for b in batches
            )


def merge_sections(
    file_io: FileIO, ts: TableSchema, plan: ReadPlan, sections: Sequence[Part]
) -> Iterator[pa.Table]:
    """Merge sections on a few threads, yielding their rows in section order.

    pyarrow and numpy release the GIL, so one section's decoding overlaps another's
    sorting. At most ``MERGE_THREADS + 1`` sections of one read are in memory at once;
    concurrent reads share the process's ``MERGE_THREADS`` threads (``merge_pool``).
    """
    threads = min(len(sections), MERGE_THREADS)
    if threads <= 1:
        for section, part in sections:
            yield merge_section(file_io, ts, plan, section, part)
        return
    todo = iter(sections)
    pool = merge_pool()
    pending = deque(
        pool.submit(merge_section, file_io, ts, plan, *s) for s in itertools.islice(todo, threads)
    )
    try:
        while pending:
            done = pending.popleft().result()
            following = next(todo, None)
            if following is not None:
                pending.append(pool.submit(merge_section, file_io, ts, plan, *following))
            yield done
    finally:  # a consumer that stops early leaves no queued merge behind
        for future in pending:
            future.cancel()


def merge_section(
    file_io: FileIO,
    ts: TableSchema,
    plan: ReadPlan,
    section: Sequence[FileSlice],
    part: KeyRange | None = None,
) -> pa.Table:
    """The merged, filtered, projected rows of one section (or part) of overlapping files.

    Engines that pick rows decide from the keys and decode only the winners
    (late.py); the others merge every version of every column.
    """
    if picks_rows(plan.spec):
        decision = decide(file_io, ts, plan.spec, section, part)
        parts = list(materialize(file_io, ts, plan, section, decision, part))
        if len(parts) == 1:
            return parts[0]
        if not plan.output:  # concat_tables forgets the rows of tables without columns
            return pa.table({"n": pa.nulls(sum(p.num_rows for p in parts))}).select([])
        schema = pa.schema([file_schema(ts).field(c) for c in plan.output])
        return pa.concat_tables(parts) if parts else schema.empty_table()
    if part is None:
        found = [read_file(file_io, ts, f, plan.merge_columns, plan.key_filter) for f in section]
        after = plan.residual
    else:
        found = [rows for rows, _ in section_rows(file_io, ts, section, plan.merge_columns, part)]
        after = plan.full_filter  # the key filter was not pushed into the part's read
    merged = merge(pa.concat_tables(found), plan.spec)
    if after is not None:
        merged = merged.filter(after)
    if not plan.output:
        return merged.select([])
    return pa.table(merged.select(list(plan.output)).columns, schema=plan.output_schema)
