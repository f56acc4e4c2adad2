"""Late materialization: decide a section's winners from keys, then decode only their rows.

A merge of a deduplicate or first-row section picks whole rows. The *decision* is
the merge-on-read kernel's (kernel.py, shared with Paimon tables): it reads the key,
the sequence field, ``_rl_seq`` and ``_rl_kind`` of every file of the section (here:
:func:`section_rows`, a key-range part's rows where the section is cut) and records,
per file, a bitmask of the rows that win, kept per process under the files' paths.
The *materialization* then reads the other columns file by file and row group by row
group, skips the row groups where no row won, and takes the winners out of the rest
(issue 20): value columns of a superseded version are never gathered, copied or
converted, and row groups that lost entirely are never decoded. Partial-update and
aggregation compute values from every version, so their sections are merged whole
(read.py).

Output order: file by file (newest first for the sort-free path, section order
otherwise), each file's winners in key order. It is a function of the files, so
every read of the same snapshot returns the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raylake.caching import LruCache, process_cache
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.fragments import parquet_fragment
from raylake.table.pk import kernel
from raylake.table.pk.files import read_file, table_fields
from raylake.table.pk.group_readers import GroupReaders, group_threads, run_in_order
from raylake.table.pk.kernel import Decision, clear_decisions
from raylake.table.pk.ranges import bounds, read_range
from raylake.table.pk.schema import MergeSpec, file_schema
from raylake.table.pk.shared import SHARED_GROUP_BYTES, SharedGroups
from raylake.table.projection import FileProjection, projection_of
from raylake.table.split import FileSlice, KeyRange

if TYPE_CHECKING:
    from raylake.table.pk.read import ReadPlan


_groups = SharedGroups(SHARED_GROUP_BYTES)
_layouts: LruCache[tuple[str, str, tuple[str, ...]], tuple[list[int], list[str]]] = process_cache(
    LruCache(4096)
)


def clear_decision_cache() -> None:
    """Forget cached decisions and shared row groups (benchmarks of cold reads, tests)."""
    clear_decisions()
    _groups.clear()
    _layouts.clear()


def shared_group_info() -> dict[str, int]:
    """Row groups decoded once for several parts, and the takes they served."""
    return _groups.info()


def decide(
    file_io: FileIO,
    ts: TableSchema,
    spec: MergeSpec,
    section: Sequence[FileSlice],
    part: KeyRange | None = None,
) -> Decision:
    """The winners of a deduplicate or first-row section or part (the kernel's decision,
    kept per process)."""
    return kernel.decide(
        _decision_key(file_io, section, part),
        spec,
        section,
        ts,
        lambda columns: section_rows(file_io, ts, section, columns, part),
    )


def _decision_key(
    file_io: FileIO, section: Sequence[FileSlice], part: KeyRange | None
) -> tuple[object, ...]:
    return (file_io.uri, tuple((f.path, f.sequence_base) for f in section), part)


def section_rows(
    file_io: FileIO,
    ts: TableSchema,
    section: Sequence[FileSlice],
    columns: Sequence[str],
    part: KeyRange | None,
) -> list[tuple[pa.Table, int]]:
    """Each file's ``columns`` in the part (all rows without one), and the first row's position."""
    if part is None:
        return [(read_file(file_io, ts, f, columns), 0) for f in section]
    key = ts.primary_key
    lo, hi = bounds(file_io, key, section, part)
    empty = file_schema(ts).empty_table().select(list(columns))
    found = []
    for f in section:
        projection = projection_of(file_io, ts, f.schema_id)
        wanted = list(columns) if projection is None else projection.file_columns(columns)
        rows, first = read_range(file_io, f, wanted, key, lo, hi)
        if rows is not None:
            if projection is not None:
                rows = projection.conform(rows, columns)
            else:
                rows = table_fields(rows, file_schema(ts))
        found.append((empty, 0) if rows is None else (rows, first))
    return found


# -- materialization ----------------------------------------------------------------------


def materialize(
    file_io: FileIO,
    ts: TableSchema,
    plan: ReadPlan,
    section: Sequence[FileSlice],
    decision: Decision,
    part: KeyRange | None = None,
) -> Iterator[pa.Table]:
    """The winning rows of a decided section, filtered and projected, a row group at a time."""
    if not plan.output and plan.full_filter is None:
        # Only counting: every winner is a row, nothing needs decoding.
        if decision.total:
            yield pa.table({"n": pa.nulls(decision.total)}).select([])
        return
    # Each row group with a winner is a job: decoded, filtered and finished, in order.
    threads = group_threads(file_io)
    readers = GroupReaders(file_io, per_job=threads > 1)
    try:
        jobs = [
            job
            for i in decision.order
            if decision.winners[i]
            for job in _file_winners(file_io, ts, plan, section, part, decision, i, readers)
        ]
        for tables in run_in_order(jobs, threads):
            yield from tables
    finally:
        readers.close()


def _sharing_parts(
    file_io: FileIO,
    section: Sequence[FileSlice],
    part: KeyRange,
    i: int,
    start: int,
    stop: int,
) -> dict[int, pa.BooleanArray]:
    """The winners' masks, by part, of the parts with winners in rows ``[start, stop)`` of
    file ``i``: this part's neighbours, as far as their decisions are cached and reach
    into those rows (the loaders' counting read decides every part first)."""
    found: dict[int, pa.BooleanArray] = {}
    for step in (-1, 1):
        p = part.index + step
        while 0 <= p < part.count:
            other = kernel.decisions.peek(_decision_key(file_io, section, KeyRange(p, part.count)))
            if other is None:
                break
            offset, n = other.offsets[i], other.rows[i]
            if n and (offset >= stop or offset + n <= start):
                break  # its rows of the file lie past the group: so do the next parts'
            mask = other.selection(i, start, stop)
            if mask.true_count:
                found[p] = mask
            p += step
    return found


def _file_winners(
    file_io: FileIO,
    ts: TableSchema,
    plan: ReadPlan,
    section: Sequence[FileSlice],
    part: KeyRange | None,
    decision: Decision,
    i: int,
    readers: GroupReaders,
) -> Iterator[Callable[[], list[pa.Table]]]:
    """File ``i``'s winners, a job per row group that holds one: decoded whole and filtered.

    A row group at a time (256K rows in primary-key files) decodes with the fewest
    calls; 64K-row batches cost about a third more CPU here (issue 20). A group that
    holds rows of other parts too is decoded once for all of them (shared.py).
    """
    f = section[i]
    metadata = parquet_fragment(file_io, f.path, file_size=f.file_size).metadata
    offset, n = decision.offsets[i], decision.rows[i]  # this part's rows of the file
    # Only what the output and the filter need: the decision already used the key,
    # the sequence field and the system columns.
    needed = {*plan.output, *plan.filter_columns}
    wanted = [c for c in plan.merge_columns if c in needed]
    # A file of another schema version: its own names, mapped by field id after decoding.
    projection = projection_of(file_io, ts, f.schema_id)
    stored = wanted if projection is None else projection.file_columns(wanted)
    starts, dictionary = _layout(file_io, f.path, metadata, stored)

    def winners(g: int, masks: Mapping[int, pa.BooleanArray]) -> dict[int, pa.Table]:
        with readers.reader(f.path, metadata, dictionary) as reader:
            rows = reader.read_row_group(g, columns=stored, use_threads=True)
        return {p: rows if m.true_count == len(m) else rows.filter(m) for p, m in masks.items()}

    def job(g: int, mask: pa.BooleanArray, others: dict[int, pa.BooleanArray]) -> list[pa.Table]:
        if others and part is not None:
            section_key = _decision_key(file_io, section, None)
            key = (section_key, part.count, i, g, tuple(stored), tuple(dictionary))
            masks = {part.index: mask, **others}
            rows = _groups.take(key, part.index, partial(winners, g, masks))
        else:
            rows = winners(g, {0: mask})[0]
        return list(_finish(plan, rows, dictionary, projection, wanted))

    for g in range(len(starts) - 1):
        start, stop = starts[g], starts[g + 1]
        if stop <= offset or start >= offset + n:
            continue  # none of this part's rows
        mask = decision.selection(i, start, stop)
        if not mask.true_count:
            continue  # a group where every row lost is never decoded
        others: dict[int, pa.BooleanArray] = {}
        if part is not None and (start < offset or stop > offset + n):
            # The group holds rows of other parts: decode it once for those that win there.
            others = _sharing_parts(file_io, section, part, i, start, stop)
        yield partial(job, g, mask, others)


def _layout(
    file_io: FileIO, path: str, metadata: pq.FileMetaData, stored: Sequence[str]
) -> tuple[list[int], list[str]]:
    """The first row of each row group of a data file (and its end), and which of
    ``stored`` are read as dictionaries: worked out from the footer once per process
    (files never change), not at every read of a training epoch."""
    key = (file_io.uri, path, tuple(stored))
    found = _layouts.get(key)
    if found is None:
        sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        found = ([int(x) for x in np.cumsum([0, *sizes])], dictionary_columns(metadata, stored))
        _layouts.put(key, found)
    return found


def _finish(
    plan: ReadPlan,
    rows: pa.Table,
    dictionary: Sequence[str],
    projection: FileProjection | None,
    wanted: Sequence[str],
) -> Iterator[pa.Table]:
    """Winners decoded, mapped onto the read schema, filtered and projected."""
    if dictionary:
        rows = _decode_dictionaries(rows, dictionary)
    if projection is not None:
        rows = projection.conform(rows, wanted)
    if plan.full_filter is not None:
        rows = rows.filter(plan.full_filter)
    if not rows.num_rows:
        return
    if not plan.output:  # counting under a filter: rows, no columns
        yield rows.select([])
        return
    # The table's fields (a file marks its key columns not null).
    yield pa.table(rows.select(list(plan.output)).columns, schema=plan.output_schema)


def dictionary_columns(metadata: pq.FileMetaData, columns: Sequence[str]) -> list[str]:
    """The string and binary ``columns`` stored dictionary-encoded in every row group
    (names the file lacks are skipped).

    They are read as dictionary indices and only the winners' values are built
    (a superseded version's strings are never copied). A column whose pages fell
    back to plain encoding is read as is: rebuilding a dictionary would cost more.
    Shared by raylake's and Paimon's merged reads.
    """
    schema = metadata.schema.to_arrow_schema()
    found = []
    for name in columns:
        j = schema.get_field_index(name)
        if j < 0:
            continue
        dtype = schema[j].type
        if not (pa.types.is_string(dtype) or pa.types.is_binary(dtype)):
            continue
        chunks = [metadata.row_group(g).column(j) for g in range(metadata.num_row_groups)]
        # Dictionary indices take a few bits per row; plain strings take their length.
        if all(
            c.has_dictionary_page and c.total_uncompressed_size <= 4 * c.num_values + 65536
            for c in chunks
        ):
            found.append(name)
    return found


def _decode_dictionaries(rows: pa.Table, names: Sequence[str]) -> pa.Table:
    for name in names:
        i = rows.schema.get_field_index(name)
        column = rows.column(i)
        rows = rows.set_column(i, name, column.cast(column.type.value_type))
    return rows
