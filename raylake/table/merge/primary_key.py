"""MERGE into primary-key tables, merge-on-read: with ``on`` = the primary key, the
target rows are looked up by key (only the buckets the source's keys hash to are
read); otherwise the table is read. Changed rows are written as ``-D``/``+U``/``+I``
rows with the primary-key writer, one commit; a commit since the base that changed a
bucket the merge read makes it run again (docs/merge.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import CommitConflictError, RaylakeError, SchemaMismatchError
from raylake.expr import AlwaysTrue, And, Compare, Expr, In, bind
from raylake.format.manifest import data_files_from_table, read_entries
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.pyvalues import exact_py, exact_pylist
from raylake.table.commit import snapshots_after
from raylake.table.conform import conform
from raylake.table.merge.builder import MergeResult
from raylake.table.merge.plan import (
    BY_SOURCE,
    Clause,
    JoinOn,
    decide,
    target_columns,
)
from raylake.table.writer import CommitMessage, writing

if TYPE_CHECKING:
    from raylake.format.schema import TableSchema
    from raylake.table.table import Table

from raylake.table.merge.commit import check_schema_current, commit_merge, unchanged

# Partition values listed in the pruning filter up to this many; beyond, only key ranges.
_MAX_IN_VALUES = 1000


@dataclass(frozen=True)
class PrimaryKeyPart:
    """What one merge of (part of) a source into a primary-key table wrote: picklable,
    so that Ray tasks return it and the driver commits all parts as one snapshot."""

    messages: tuple[CommitMessage, ...]
    inserted: int
    updated: int
    deleted: int
    buckets: frozenset[tuple[tuple[Any, ...], int]] | None  # read; None: the whole table


def source_bucket_ids(
    ts: TableSchema, rows: pa.Table | pa.RecordBatch, key_names: Sequence[str]
) -> pa.Array:
    """The bucket each source row of a distributed merge (Ray, Spark) is sent to, by the
    hash the table's writer uses; ``key_names``: the source columns of the key columns,
    in ``ts.primary_key``'s order. A row with a null key matches nothing: bucket 0 (an
    insert of one fails there, on the key's null constraint, as in ``Table.merge``). A
    key that does not fit its column (``2**40`` for int32): every row to bucket 0, where
    the merge task raises the error ``Table.merge`` raises; raised here, in the engine's
    map of the source, it would come wrapped (Ray's UserCodeException, Spark's
    PythonException after its retries)."""
    from raylake.table.kind import kind_of

    keys = pa.table({k: rows.column(s) for k, s in zip(ts.primary_key, key_names)})
    valid = np.ones(rows.num_rows, dtype=bool)
    for column in keys.columns:
        valid &= pc.is_valid(column).to_numpy(zero_copy_only=False)
    ids = np.zeros(rows.num_rows, dtype=np.int32)
    try:
        if valid.any():
            picked = keys.filter(pa.array(valid))
            ids[valid] = kind_of(ts).bucket_ids(picked).to_numpy(zero_copy_only=False)
    except RaylakeError:
        ids[:] = 0
    return pa.array(ids)


def by_key_lookup(ts: Any, on: JoinOn, clauses: tuple[Clause, ...]) -> bool:
    """Whether target rows are found by key lookup (``on`` = the primary key)."""
    return (
        set(on.target_keys) == set(ts.primary_key)
        and on.residual is None
        and not any(c.group == BY_SOURCE for c in clauses)
    )


def primary_key_part(
    tbl: Table,
    snap: Snapshot | None,
    source: pa.Table,
    on: JoinOn,
    clauses: tuple[Clause, ...],
    *,
    file_prefix: str = "data",
) -> PrimaryKeyPart:
    """Decide and write (not commit) the merge of ``source`` against snapshot ``snap``."""
    from raylake.table.pk.delete import write_deletes
    from raylake.table.pk.schema import INSERT, UPDATE_AFTER
    from raylake.table.pk.write import PrimaryKeyTableWriter

    ts = tbl.table_schema
    schema = ts.arrow_schema
    buckets: frozenset[tuple[tuple[Any, ...], int]] | None = None
    if snap is None:
        target = schema.empty_table()
    elif by_key_lookup(ts, on, clauses):
        columns = target_columns(clauses, list(ts.primary_key), schema)
        target, wanted = _lookup(tbl, snap, source, on, columns)
        buckets = frozenset(wanted)
    else:
        everything = any(c.group == BY_SOURCE for c in clauses)
        pruning = AlwaysTrue() if everything else key_pruning(on, source, ts)
        target = tbl.scan(filter=pruning).at(snap.id).to_arrow()
    outcome = decide(target, source, on, clauses, schema, ts.primary_key)
    if outcome.changes_nothing:
        return PrimaryKeyPart((), 0, 0, 0, buckets)
    with writing(PrimaryKeyTableWriter(tbl.file_io, ts, file_prefix=file_prefix)) as writer:
        # Deletes carry the whole before-image (changelogs, sequence fields), like delete().
        if len(outcome.deleted):
            write_deletes(writer, [target.take(pa.array(outcome.deleted))])
        for rows, kind in ((outcome.updated_rows, UPDATE_AFTER), (outcome.inserted_rows, INSERT)):
            if rows.num_rows:
                kinds = pa.array(np.full(rows.num_rows, kind, dtype=np.int8))
                writer.write_arrow(conform(rows, schema, ts.primary_key), kinds)
        messages = writer.prepare_commit()
    return PrimaryKeyPart(
        tuple(messages),
        outcome.inserted_rows.num_rows,
        len(outcome.updated),
        len(outcome.deleted),
        buckets,
    )


def commit_primary_key_parts(
    tbl: Table, snap: Snapshot | None, parts: Sequence[PrimaryKeyPart]
) -> MergeResult:
    """Commit the parts of one merge as one snapshot, or raise CommitConflictError (and
    delete their files) if a commit after ``snap`` wrote to a bucket one of them read."""
    messages = [m for p in parts for m in p.messages]
    if all(m.is_empty for m in messages):
        return unchanged(snap)
    buckets: set[tuple[tuple[Any, ...], int]] | None = set()
    for part in parts:
        if part.buckets is None or buckets is None:
            buckets = None
        else:
            buckets |= part.buckets

    def check(latest: Snapshot) -> None:
        _check_buckets_unchanged(tbl, snap, latest, buckets)

    return commit_merge(tbl, messages, snap, "APPEND", check, parts)


def _merge_primary_key(
    tbl: Table, source: pa.Table, on: JoinOn, clauses: tuple[Clause, ...]
) -> MergeResult:
    snap = SnapshotManager(tbl.file_io).latest()
    check_schema_current(tbl, snap)
    part = primary_key_part(tbl, snap, source, on, clauses)
    return commit_primary_key_parts(tbl, snap, [part])


def _lookup(
    tbl: Table, snap: Snapshot, source: pa.Table, on: JoinOn, columns: list[str] | None
) -> tuple[pa.Table, set[tuple[tuple[Any, ...], int]]]:
    """The current rows of the source's keys: only the buckets those keys hash to are
    read (merged; only ``columns`` where not None), then narrowed to the keys by a
    semi join."""
    from raylake.table.pk.bucket import bucket_ids
    from raylake.table.pk.keyjoin import rows_with_keys
    from raylake.table.pk.write import BUCKET_COLUMN
    from raylake.table.writer import split_by_partition

    ts = tbl.table_schema
    names = {t: s for t, s in on.pairs}
    keys = pa.table({k: source.column(names[k]) for k in ts.primary_key})
    # and_ takes two arrays: a key of three columns or more is folded pairwise.
    keys = keys.filter(reduce(pc.and_, [pc.is_valid(c) for c in keys.columns]))
    schema = ts.arrow_schema
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    if not keys.num_rows:
        return schema.empty_table(), set()
    ids = pa.array(bucket_ids([keys.column(k) for k in ts.primary_key], ts.buckets))
    grouping = (*ts.partition_keys, BUCKET_COLUMN)
    wanted = {
        (tuple(values[:-1]), int(values[-1]))
        for values, _ in split_by_partition(
            keys.select(list(ts.partition_keys)).append_column(BUCKET_COLUMN, ids), grouping
        )
    }
    scan = tbl.scan(columns=columns, filter=key_pruning(on, source, ts)).at(snap.id)
    splits = [s for s in scan.plan() if (s.partition, s.bucket) in wanted]
    current = scan.read_context().read_table(splits) if splits else schema.empty_table()
    current = rows_with_keys(current, keys, ts.primary_key)
    return current, wanted


def _check_buckets_unchanged(
    tbl: Table,
    base: Snapshot | None,
    latest: Snapshot,
    buckets: set[tuple[tuple[Any, ...], int]] | frozenset[tuple[tuple[Any, ...], int]] | None,
) -> None:
    """A commit after ``base`` that wrote to a bucket the merge read (a compaction
    changes no row, so it does not count): the merge's decisions may be stale."""
    manager = SnapshotManager(tbl.file_io)
    for snap in snapshots_after(manager, base.id if base else 0, latest, "merge"):
        if snap.commit_kind == "COMPACT":
            continue
        if buckets is not None:
            entries = read_entries(tbl.file_io, snap.delta_manifests, tbl.table_schema, ())
            added = data_files_from_table(entries, tbl.table_schema)
            touched = {(f.partition, f.bucket) for f in added}
            if not touched & buckets:
                continue
        raise CommitConflictError(
            f"snapshot {snap.id} ({snap.commit_kind}) changed rows the merge read",
            expected=base.id if base else 0,
            actual=latest.id,
        )


# -- both -----------------------------------------------------------------------------


def key_pruning(on: JoinOn, source: pa.Table, ts: Any) -> Expr:
    """A filter no target row matching a source key can fail: each key column within
    the source's range, each partition key among the source's values."""
    if not source.num_rows:
        return AlwaysTrue()
    conjuncts: list[Expr] = []
    for t, s in on.pairs:
        try:
            conjuncts += _key_bounds(t, source.column(s), t in ts.partition_keys)
        except SchemaMismatchError:
            continue  # a date beyond Python's: no bound to prune by
    if not conjuncts:
        return AlwaysTrue()
    expr: Expr = conjuncts[0]
    for c in conjuncts[1:]:
        expr = And(expr, c)
    return bind(expr, ts.arrow_schema)


def _key_bounds(t: str, column: pa.ChunkedArray, partition: bool) -> list[Expr]:
    """Column ``t`` among ``column``'s values (a partition key with few) or within their
    range; nothing where they have no order."""
    if partition:
        values = pc.unique(column.drop_null())
        if 0 < len(values) <= _MAX_IN_VALUES:
            return [In(t, tuple(exact_pylist(values, t)))]
    if pa.types.is_duration(column.type):  # pyarrow's min_max has no duration kernel
        return []
    bounds = pc.min_max(column)
    low, high = exact_py(bounds["min"], t), exact_py(bounds["max"], t)
    if low is None or isinstance(low, bool | bytes | list | dict):
        return []
    return [Compare(">=", t, low), Compare("<=", t, high)]
