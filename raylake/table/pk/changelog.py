"""Changelogs of primary-key tables: what each commit changed, as +I/-U/+U/-D rows.

``changelog-producer``:

- ``input``: the writer records the rows as written, with their row kinds.
- ``lookup``: the *committer* looks up the written keys in the parent snapshot
  and records before-images (``-U``, or ``-D`` for a removed key) and
  after-images (``+U``, or ``+I`` for a new key) of the keys whose row changed.
  Only the committer knows the commit order, so the before-images are exact even
  with concurrent writers; on a retry the changelog is computed again.

A changelog file lives beside the data files of its bucket and has the data file
layout (``_rl_seq`` is the row's position in the file). ``read_changelog``
returns the rows in commit order with ``_rl_kind`` as ``+I``/``-U``/``+U``/``-D``,
which a primary-key writer accepts as input, so a changelog replays as is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import UnsupportedOperationError
from raylake.format.manifest import (
    DataFile,
    data_files_from_table,
    live_files_by_bucket,
    read_entries,
)
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.table.pk.engines import merge, run_starts
from raylake.table.pk.keyjoin import rows_with_keys
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
from raylake.table.split import FileSlice, by_bucket
from raylake.table.writer import RollingFileWriter, writing

_TAG = "_rl_after"  # the reserved prefix: no table column has the name


def changelog_files(file_io: FileIO, ts: TableSchema, snap: Snapshot) -> list[DataFile]:
    """The changelog files of one snapshot, in commit order."""
    entries = read_entries(file_io, snap.changelog_manifests, ts)
    return data_files_from_table(entries, ts)


def iter_changelog(
    file_io: FileIO, ts: TableSchema, snap: Snapshot, columns: Sequence[str] | None = None
) -> Iterator[pa.Table]:
    """The changelog of one snapshot, file by file (bounded memory)."""
    if ts.table_options.changelog_producer == "none":
        raise UnsupportedOperationError(
            f"{file_io.uri} records no changelog (changelog-producer=none); create the table "
            "with options={'changelog-producer': 'input'} or 'lookup'"
        )
    wanted = ts.column_names if columns is None else list(columns)
    for f in changelog_files(file_io, ts, snap):
        pa_table = read_file(file_io, ts, f, [*wanted, KIND])
        names = pc.take(pa.array(KIND_NAMES), pa_table.column(KIND))
        yield pa_table.set_column(len(wanted), KIND, names)


def read_changelog(
    file_io: FileIO, ts: TableSchema, snap: Snapshot, columns: Sequence[str] | None = None
) -> pa.Table:
    """The whole changelog of one snapshot; ``_rl_kind`` holds ``+I``/``-U``/``+U``/``-D``."""
    wanted = ts.column_names if columns is None else list(columns)
    schema = pa.schema([*(ts.arrow_schema.field(c) for c in wanted), pa.field(KIND, pa.string())])
    return pa.Table.from_batches(
        [b for t in iter_changelog(file_io, ts, snap, columns) for b in t.to_batches()],
        schema=schema,
    )


def lookup_changelog(
    file_io: FileIO, ts: TableSchema, parent: Snapshot | None, added: Sequence[DataFile]
) -> list[DataFile]:
    """Write the lookup changelog of a commit adding ``added`` on top of ``parent``.

    Returns the changelog files (empty unless the table's producer is ``lookup``).
    """
    if ts.table_options.changelog_producer != "lookup" or not added:
        return []
    spec = MergeSpec.of(ts)
    old = {} if parent is None else live_files_by_bucket(file_io, parent.base_manifests, ts)
    written: list[DataFile] = []
    try:
        for (partition, bucket), new in by_bucket(added).items():
            changes = bucket_changes(file_io, ts, spec, old.get((partition, bucket), []), new)
            if changes.num_rows:
                writer = RollingFileWriter(
                    file_io,
                    ts,
                    ts.table_options,
                    partition,
                    bucket,
                    prefix="lookup-changelog",
                    schema=file_schema(ts),
                )
                with writing(writer):
                    writer.write(changes)
                    written += writer.close()
    except BaseException:
        file_io.delete_quietly([f.path for f in written])
        raise
    return written


def bucket_changes(
    file_io: FileIO,
    ts: TableSchema,
    spec: MergeSpec,
    old_files: Sequence[DataFile | FileSlice],
    new_files: Sequence[DataFile | FileSlice],
) -> pa.Table:
    """Changelog rows (file layout) for the keys the new files of one bucket wrote."""
    columns = [*ts.column_names, SEQ, KIND]
    new_rows = pa.concat_tables([read_file(file_io, ts, f, columns) for f in new_files])
    keys = new_rows.select(list(ts.primary_key)).group_by(list(ts.primary_key)).aggregate([])
    key_filter = None
    if len(ts.primary_key) == 1:
        key_filter = pc.field(ts.primary_key[0]).isin(keys.column(0))
    old_rows = [read_file(file_io, ts, f, columns, key_filter) for f in old_files]
    old = pa.concat_tables(old_rows) if old_rows else file_schema(ts).empty_table()
    if key_filter is None and old.num_rows:
        old = rows_with_keys(old, keys, ts.primary_key)
    before = merge(old, spec)
    after = merge(pa.concat_tables([old, new_rows]), spec)
    return diff_states(before, after, ts)


def diff_states(before: pa.Table, after: pa.Table, ts: TableSchema) -> pa.Table:
    """Changelog rows turning state ``before`` into ``after`` (both one row per key).

    Per key, in key order: ``+I`` (new), ``-D`` (gone), or ``-U`` then ``+U``
    (changed). Keys whose row is unchanged produce nothing.
    """
    key = list(ts.primary_key)
    tagged = pa.concat_tables(
        [
            before.append_column(_TAG, pa.array(np.zeros(before.num_rows, dtype=np.int8))),
            after.append_column(_TAG, pa.array(np.ones(after.num_rows, dtype=np.int8))),
        ]
    )
    order = pc.sort_indices(
        tagged, sort_keys=[(k, "ascending") for k in key] + [(_TAG, "ascending")]
    )
    rows = tagged.take(order)
    n = rows.num_rows
    starts = run_starts([rows.column(k) for k in key])
    sizes = np.diff(np.append(starts, n))
    is_after = np.asarray(rows.column(_TAG).to_numpy()) == 1
    paired = np.repeat(sizes == 2, sizes)
    changed = np.ones(n, dtype=bool)
    if paired.any():
        first = starts[sizes == 2]
        differs = _rows_differ(rows, first, first + 1, ts)
        changed[first] = changed[first + 1] = differs
    kinds = np.where(paired, np.where(is_after, UPDATE_AFTER, UPDATE_BEFORE), 0)
    kinds = np.where(~paired, np.where(is_after, INSERT, DELETE), kinds).astype(np.int8)
    rows = rows.set_column(rows.column_names.index(KIND), KIND, pa.array(kinds))
    rows = rows.filter(pa.array(changed)).drop_columns([_TAG])
    seq = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    schema = file_schema(ts)
    columns = [seq if name == SEQ else rows.column(name) for name in schema.names]
    return pa.Table.from_arrays(columns, schema=schema)


def diff_merged(before: pa.Table, after: pa.Table, ts: TableSchema) -> pa.Table:
    """``diff_states`` of two merged reads of a bucket (rows without system columns)."""
    return diff_states(_as_file_rows(before), _as_file_rows(after), ts)


def _as_file_rows(state: pa.Table) -> pa.Table:
    """Merged rows in the data-file layout that ``diff_states`` compares (sequence and
    kind unused)."""
    zeros = np.zeros(state.num_rows, dtype=np.int64)
    return state.append_column(
        pa.field(SEQ, pa.int64(), nullable=False), pa.array(zeros)
    ).append_column(pa.field(KIND, pa.int8(), nullable=False), pa.array(zeros.astype(np.int8)))


def _rows_differ(
    rows: pa.Table, left: np.ndarray, right: np.ndarray, ts: TableSchema
) -> np.ndarray:
    """Whether row ``left[i]`` differs from row ``right[i]`` in any value column."""
    differs = np.zeros(len(left), dtype=bool)
    for name in ts.column_names:
        if name in ts.primary_key:
            continue
        a = rows.column(name).take(pa.array(left))
        b = rows.column(name).take(pa.array(right))
        differs |= ~_same_values(a.combine_chunks(), b.combine_chunks())
    return differs


def _bools(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _same_values(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Whether ``a[i]`` and ``b[i]`` hold the same value (two nulls do). Structs compare
    field by field and lists (maps: lists of entries) element by element, since
    pyarrow's ``equal`` has no kernel for nested types; a type without either is
    reported as differing."""
    a_null, b_null = _bools(a.is_null()), _bools(b.is_null())
    both = ~a_null & ~b_null
    kind = a.type
    if pa.types.is_struct(kind):
        inner = np.ones(len(a), dtype=bool)
        for i in range(kind.num_fields):
            inner &= _same_values(pc.struct_field(a, [i]), pc.struct_field(b, [i]))
        return (a_null & b_null) | (both & inner)
    if pa.types.is_map(kind):  # its entries, as a list of structs (nulls are known)
        a = pa.ListArray.from_arrays(a.offsets, a.values)
        b = pa.ListArray.from_arrays(b.offsets, b.values)
        kind = a.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        lengths_a = np.asarray(pc.fill_null(pc.list_value_length(a), 0))
        lengths_b = np.asarray(pc.fill_null(pc.list_value_length(b), 0))
        inner = np.zeros(len(a), dtype=bool)
        rows = np.flatnonzero(both & (lengths_a == lengths_b))
        if len(rows):
            some_a, some_b = a.take(pa.array(rows)), b.take(pa.array(rows))
            values_a, values_b = pc.list_flatten(some_a), pc.list_flatten(some_b)
            parents = np.asarray(pc.list_parent_indices(some_a))
            unequal = ~_same_values(values_a, values_b)
            inner[rows] = np.bincount(parents[unequal], minlength=len(rows)) == 0
        return (a_null & b_null) | inner
    try:
        equal = _bools(pc.fill_null(pc.equal(a, b), False))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        equal = np.zeros(len(a), dtype=bool)  # no equality kernel for this type
    if pa.types.is_floating(kind):
        # NaN written again as NaN is no change, though NaN != NaN.
        with contextlib.suppress(pa.ArrowNotImplementedError):  # float16 before pyarrow 17
            equal |= _bools(pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return (a_null & b_null) | (both & equal)
