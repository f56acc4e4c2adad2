"""Changes of primary-key tables between two snapshots (raylake/table/changes.py).

Planning, per bucket:

- a changelog where it is exact for the range: one snapshot's changelog (any
  ``changelog-producer``, the stream's step), or a ``lookup`` changelog of several
  commits without an OVERWRITE, folded into one net change per key;
- else the buckets whose files differ, with their files at both snapshots planned
  here once and carried in a :class:`DiffSplit`.

Reading a DiffSplit: when the bucket only gained files (no compaction or overwrite
in between), the changed keys are the keys of the new files, and only their
versions in the old files are read and merged (the lookup changelog's method);
otherwise the bucket is merged at both snapshots and compared. Value filters apply
to the change rows, after the diff, so an old version never resurfaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from raylake.errors import UnsupportedOperationError
from raylake.expr import AlwaysTrue, to_arrow
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.table.changes import (
    ROW_KIND,
    ChangelogSplit,
    ChangeRange,
    ChangeReadContext,
    ChangeSplit,
    DiffSplit,
)
from raylake.table.pk.changelog import bucket_changes, diff_merged, diff_states
from raylake.table.pk.engines import run_starts
from raylake.table.pk.read import read_file
from raylake.table.pk.schema import (
    DELETE,
    INSERT,
    KIND,
    KIND_NAMES,
    SEQ,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    MergeSpec,
    file_schema,
)
from raylake.table.scan import ReadContext
from raylake.table.split import Split, bucket_order, by_bucket

_ORDER = "_rl_order"  # the reserved prefix: no table column has the name


def plan_changes(rng: ChangeRange) -> list[ChangeSplit]:
    producer = rng.ts.table_options.changelog_producer
    if rng.use_changelog and producer != "none":
        if rng.step:
            return _changelog_splits(rng, [rng.after], net=False)
        if producer == "lookup":
            snaps = rng.snapshots()
            if snaps is not None and all(s.commit_kind != "OVERWRITE" for s in snaps):
                return _changelog_splits(rng, snaps, net=True)
    return rng.diffs()


def _changelog_splits(rng: ChangeRange, snaps: Sequence[Snapshot], net: bool) -> list[ChangeSplit]:
    rng.from_changelog = True
    groups = by_bucket(rng.changelog_files(snaps))  # commit order within each bucket
    return [
        ChangelogSplit(rng.after.id, partition, bucket, tuple(files), net)
        for (partition, bucket), files in sorted(groups.items(), key=lambda g: bucket_order(g[0]))
    ]


def read_changes(ctx: ChangeReadContext, split: ChangeSplit) -> Iterator[pa.RecordBatch]:
    if isinstance(split, ChangelogSplit):
        return change_batches(ctx, _changelog_rows(ctx, split))
    if isinstance(split, DiffSplit):
        return change_batches(ctx, [_diff_rows(ctx, split)])
    raise UnsupportedOperationError(f"a primary-key table reads no {type(split).__name__}")


def _changelog_rows(ctx: ChangeReadContext, split: ChangelogSplit) -> Iterator[pa.Table]:
    ts = ctx.table_schema
    if not split.net:
        columns = [*ctx.needed_columns(), KIND]
        for f in split.files:
            yield read_file(ctx.file_io, ts, f, columns)
        return
    columns = [*ts.column_names, SEQ, KIND]
    rows = [read_file(ctx.file_io, ts, f, columns) for f in split.files]
    yield fold_changelog(pa.concat_tables(rows) if rows else file_schema(ts).empty_table(), ts)


def fold_changelog(rows: pa.Table, ts: TableSchema) -> pa.Table:
    """Changelog rows of several commits (in commit order) -> one net change per key.

    A key existed before the range if its first row is a before-image (``-U``/``-D``),
    and exists after it if its last row is an after-image (``+I``/``+U``); the two
    images are compared like two states (``diff_states``), so a key changed and changed
    back produces nothing.
    """
    n = rows.num_rows
    if n == 0:
        return file_schema(ts).empty_table()
    key = list(ts.primary_key)
    rows = rows.append_column(_ORDER, pa.array(np.arange(n, dtype=np.int64)))
    rows = rows.sort_by([*((k, "ascending") for k in key), (_ORDER, "ascending")])
    rows = rows.drop_columns([_ORDER])
    starts = run_starts([rows.column(k) for k in key])
    ends = np.append(starts[1:], n) - 1
    kinds = np.asarray(rows.column(KIND).to_numpy())
    existed = np.isin(kinds[starts], [UPDATE_BEFORE, DELETE])
    exists = np.isin(kinds[ends], [INSERT, UPDATE_AFTER])
    before = rows.take(pa.array(starts[existed]))
    after = rows.take(pa.array(ends[exists]))
    return diff_states(before, after, ts)


def _diff_rows(ctx: ChangeReadContext, split: DiffSplit) -> pa.Table:
    ts = ctx.table_schema
    old = [f for s in split.before for f in s.files]
    new = [f for s in split.after for f in s.files]
    old_paths = {f.path for f in old}
    if old_paths <= {f.path for f in new}:
        # Files only added: no other key changed, so read just these keys' old versions.
        common = [f for f in new if f.path in old_paths]
        added = [f for f in new if f.path not in old_paths]
        return bucket_changes(ctx.file_io, ts, MergeSpec.of(ts), common, added)
    return diff_merged(_state(ctx, split.before), _state(ctx, split.after), ts)


def _state(ctx: ChangeReadContext, splits: Sequence[Split]) -> pa.Table:
    """The bucket's merged rows (every column)."""
    return ReadContext(ctx.file_io, ctx.table_schema).read_table(splits)


def change_batches(ctx: ChangeReadContext, tables: Iterable[pa.Table]) -> Iterator[pa.RecordBatch]:
    """Change rows with an int8 ``_rl_kind`` (of either format) -> filtered, projected,
    the kind named if asked, else upserts (+I, +U) only."""
    row_filter = None if isinstance(ctx.filter, AlwaysTrue) else to_arrow(ctx.filter)
    out = ctx.output_schema
    names = np.asarray(KIND_NAMES, dtype=object)
    for rows in tables:
        if row_filter is not None:
            rows = rows.filter(row_filter)
        codes = np.asarray(rows.column(KIND).to_numpy(), dtype=np.int64)
        if not ctx.include_row_kind:
            rows = rows.filter(pa.array((codes == INSERT) | (codes == UPDATE_AFTER)))
        if not rows.num_rows:
            continue
        columns = [rows.column(f.name) for f in out if f.name != ROW_KIND]
        if not columns and not ctx.include_row_kind:  # no column asked for (a count)
            # from_arrays would make a table of no rows: the rows are what is asked
            yield from rows.select([]).to_batches(max_chunksize=ctx.batch_size)
            continue
        if ctx.include_row_kind:
            columns.append(pa.array(names[codes], pa.string()))
        yield from pa.Table.from_arrays(columns, schema=out).to_batches(
            max_chunksize=ctx.batch_size
        )
