"""The net change of what an OVERWRITE replaced, for ``PaimonTable.changes`` (docs/paimon.md).

An OVERWRITE snapshot's delta manifests name the files it removed and the files it
wrote, not the rows that changed, and it writes no changelog. So, as raylake's own
``Table.changes`` does (docs/changes.md), the buckets an OVERWRITE of the range touched
are compared at both ends of the range, each end read as a stream reads that snapshot
(deletion vectors applied; level 0 too where a batch read leaves it out until a COMPACT
that gives no changes; the levels left to a changelog written at compaction left out):

- primary-key tables: each bucket merged at both ends and compared (``diff_states``):
  ``+I`` new keys, ``-D`` removed keys, ``-U``/``+U`` changed keys; a key the overwrite
  wrote back unchanged gives nothing;
- append tables: the rows of files live only at the end (``+I``) and of files live
  only at the start (``-D``), as raylake's append tables give them.

Where keys can move between the buckets of a partition (a changed bucket count, the
dynamic bucket mode ``bucket = -1``) a whole partition is compared at once; where they
can move between partitions (a primary key without every partition key), everything
the overwrites touched is. Other buckets keep reading the range's delta or changelog
files (raylake/paimon/changes.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from raylake.errors import SnapshotExpiredError, UnsupportedPaimonError
from raylake.expr import filter_on_columns
from raylake.format.snapshot import Snapshot
from raylake.paimon.manifest import delta_manifests
from raylake.paimon.meta import PaimonFileSlice, PaimonTableSchema
from raylake.paimon.read import read_file, read_plan
from raylake.paimon.scan import DEFAULT_TARGET, decoder
from raylake.table.changes import DiffSplit
from raylake.table.kind import kind_of
from raylake.table.pk.changelog import diff_merged
from raylake.table.pk.read import ReadPlan
from raylake.table.pk.schema import DELETE, INSERT, KIND
from raylake.table.scan import ReadContext
from raylake.table.source import TableSource
from raylake.table.split import Split, bucket_order, by_bucket

# (partition, bucket) of the compared group; bucket -1: every bucket of the partition,
# partition (): every partition.
Group = tuple[tuple[Any, ...], int]
ALL_BUCKETS = -1


def group_of(ts: PaimonTableSchema, rescaled: bool) -> Callable[[tuple[Any, ...], int], Group]:
    """How buckets are grouped for comparing: the smallest group a key cannot leave."""
    keys = set(ts.primary_key)
    if keys and not set(ts.partition_keys) <= keys:
        return lambda partition, bucket: ((), ALL_BUCKETS)
    if keys and (rescaled or ts.info.options.bucket == -1):
        return lambda partition, bucket: (partition, ALL_BUCKETS)
    return lambda partition, bucket: (partition, bucket)


def bucket_counts(ts: PaimonTableSchema, snaps: Iterable[Snapshot]) -> set[str]:
    """The ``bucket`` options of the schemas the snapshots were committed with."""
    schemas = ts.info.schemas
    return {
        schemas[s.schema_id].options.get("bucket", "-1") if s.schema_id in schemas else "?"
        for s in snaps
    }


def rescaled_between(ts: PaimonTableSchema, files: Iterable[Any]) -> bool:
    """Whether ``files`` were written under several bucket counts (a rescale between
    them: keys moved between buckets), by their manifests' ``_TOTAL_BUCKETS`` (where
    recorded) and their schemas' ``bucket`` options."""
    schemas = ts.info.schemas
    counts = set()
    for f in files:
        schema = schemas.get(f.schema_id)
        counts.add(schema.options.get("bucket", "-1").strip() if schema is not None else "?")
        if f.total_buckets:
            counts.add(str(f.total_buckets))
    return len(counts) > 1


def overwritten(ctx: Any, snap: Snapshot, group: Callable[..., Group]) -> set[Group]:
    """The groups whose files the OVERWRITE ``snap`` removed or wrote."""
    info = ctx.table_schema.info
    entries = decoder(ctx.file_io, info).entries(delta_manifests(ctx.file_io, snap))
    return {group(f.partition, f.bucket) for _, f in entries}


def diff_splits(
    ctx: Any,
    source: TableSource,
    start: int,
    end: int,
    groups: set[Group],
    group: Callable[..., Group],
) -> list[DiffSplit]:
    """The splits of ``groups`` at snapshots ``start`` (0: the empty table) and ``end``,
    pruned by the filter as a scan of each is; groups whose files are the same at both
    ends are left out. Each end is the files a stream has delivered by then
    (PaimonSource.stream_files)."""
    if not groups:
        return []
    before = _by_group(_end_splits(ctx, source, start) if start else [], groups, group)
    after = _by_group(_end_splits(ctx, source, end), groups, group)
    splits = []
    for key in sorted(before.keys() | after.keys(), key=bucket_order):
        old, new = tuple(before.get(key, ())), tuple(after.get(key, ()))
        if _identities(old) != _identities(new):
            splits.append(DiffSplit(key[0], key[1], old, new))
    return splits


def _end_splits(ctx: Any, source: TableSource, snapshot_id: int) -> list[Split]:
    ts: PaimonTableSchema = ctx.table_schema
    kind = kind_of(ts)
    snap = source.read_if_present(snapshot_id)
    if snap is None:  # a range's start (read only here: sequence.field, an overwrite)
        raise SnapshotExpiredError(snapshot_id, source.earliest_id() or 0, source.file_io.uri)
    files = source.stream_files(ts, snap, kind.pruning_filter(ctx.filter))
    return kind.plan_splits(snapshot_id, files, None, DEFAULT_TARGET)


def _by_group(
    splits: Sequence[Split], groups: set[Group], group: Callable[..., Group]
) -> dict[Group, list[Split]]:
    return {k: v for k, v in by_bucket(splits, group).items() if k in groups}


def _identities(splits: Sequence[Split]) -> set[tuple[str, Any]]:
    return {(f.path, getattr(f, "deletion", None)) for s in splits for f in s.files}


# -- reading ---------------------------------------------------------------------------


def read_diff(ctx: Any, split: DiffSplit) -> pa.Table:
    """The change rows of one group, with an int8 ``_rl_kind``."""
    ts: PaimonTableSchema = ctx.table_schema
    if ts.primary_key:
        return _key_diff(ctx, split)
    return _file_diff(ctx, split, read_plan(ts, ctx.columns, ctx.filter))


def _key_diff(ctx: Any, split: DiffSplit) -> pa.Table:
    """Both ends merged (every column; key filters only, so no key is half read) and
    compared key by key."""
    ts: PaimonTableSchema = ctx.table_schema
    keyish = filter_on_columns(ctx.filter, {*ts.primary_key, *ts.partition_keys})
    state = ReadContext(ctx.file_io, ts, None, keyish)
    return diff_merged(state.read_table(split.before), state.read_table(split.after), ts)


def _file_diff(ctx: Any, split: DiffSplit, plan: ReadPlan) -> pa.Table:
    """Append files are independent: gone files' rows are deletes, new files' inserts.
    An overwrite removes every file of the partitions it replaces, so no file of a
    compared bucket lives at both ends with other deleted rows."""
    columns = plan.table_columns
    old = {f.path: f for s in split.before for f in _slices(s)}
    new = {f.path: f for s in split.after for f in _slices(s)}
    for path in old.keys() & new.keys():
        if old[path].deletion != new[path].deletion:
            raise UnsupportedPaimonError(
                ctx.file_io.uri,
                f"changes() over an OVERWRITE that kept data file {path} with other "
                "deleted rows (a deletion vector changed in the range)",
            )
    parts = [_tagged(read_file(ctx, f, columns), DELETE) for p, f in old.items() if p not in new]
    parts += [_tagged(read_file(ctx, f, columns), INSERT) for p, f in new.items() if p not in old]
    if not parts:
        schema = ctx.table_schema.arrow_schema
        return _tagged(pa.schema([schema.field(c) for c in columns]).empty_table(), INSERT)
    return pa.concat_tables(parts)


def _slices(split: Split) -> list[PaimonFileSlice]:
    return [f for f in split.files if isinstance(f, PaimonFileSlice)]


def _tagged(rows: pa.Table, kind: int) -> pa.Table:
    kinds = pa.array(np.full(rows.num_rows, kind, dtype=np.int8))
    return rows.append_column(pa.field(KIND, pa.int8(), nullable=False), kinds)
