"""``PaimonTable.changes(start, end)``: what changed after snapshot ``start`` up to and
including ``end``, as Paimon's ``incremental-between`` read (scan mode ``auto``) sees it.

The rows come from the snapshots ``start+1..end`` read as a Paimon stream reads them
(raylake/paimon/changes.py), gathered per bucket:

- a table with a changelog producer: the changelog files of the range, in commit and
  sequence order, with the row kinds they recorded;
- otherwise: the delta files of the range's APPEND snapshots, an append table's rows
  as inserts, a primary-key bucket's files merged into each key's last version in the
  range (a ``-D`` kept as a delete).

COMPACT snapshots contribute nothing (or their changelog, where a producer writes one
at compaction). The buckets an OVERWRITE of the range touched give their net change
instead, their states at both ends compared (raylake/paimon/changes_diff.py): an
overwrite's delta files do not say which rows changed, and skipping it (as a stream
does by default) would give stale rows. A ``filter`` prunes partitions and files from
the manifests, as a scan does, before any data file is read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from raylake.errors import InvalidArgumentError, SnapshotExpiredError, UnsupportedPaimonError
from raylake.format.snapshot import Snapshot
from raylake.paimon.changes import changed_files, read_changes
from raylake.paimon.changes_diff import (
    Group,
    PaimonDiffSplit,
    bucket_counts,
    diff_splits,
    group_of,
    overwritten,
    read_diff,
)
from raylake.paimon.manifest import PaimonFile
from raylake.paimon.meta import PaimonTableSchema
from raylake.paimon.scan import prune_files
from raylake.paimon.snapshot import PaimonSnapshots, read_snapshot
from raylake.table.args import is_int
from raylake.table.changes import with_row_kind
from raylake.table.changes_scan import check_order, row_kind_arg
from raylake.table.kind import kind_of
from raylake.table.scan import ReadContext, _to_millis
from raylake.table.scan_reads import ScanReads
from raylake.table.split import partition_sort_key


@dataclass(frozen=True)
class PaimonChangeSplit:
    """One bucket's changed files over the range: ``source`` is ``"changelog"`` or
    ``"delta"`` (read as raylake/paimon/changes.py reads a snapshot's)."""

    source: str
    partition: tuple[Any, ...]
    bucket: int
    files: tuple[PaimonFile, ...]

    @property
    def row_count(self) -> int:
        """Rows in the files, before merging: an estimate."""
        return sum(f.row_count for f in self.files)


@dataclass(frozen=True)
class PaimonChangeReader:
    """Reads change splits: picklable, no table object."""

    context: ReadContext
    include_row_kind: bool = False

    @property
    def output_schema(self) -> pa.Schema:
        return with_row_kind(self.context.output_schema, self.include_row_kind)

    def read(self, split: PaimonChangeSplit | PaimonDiffSplit) -> Iterator[pa.RecordBatch]:
        if isinstance(split, PaimonDiffSplit):
            rows = read_diff(self.context, split, self.include_row_kind)
        else:
            rows = read_changes(self.context, split.source, split.files, self.include_row_kind)
        yield from rows.to_batches(max_chunksize=self.context.batch_size)

    def read_all(
        self, splits: Sequence[PaimonChangeSplit | PaimonDiffSplit]
    ) -> Iterator[pa.RecordBatch]:
        for split in splits:
            yield from self.read(split)

    def read_table(self, splits: Sequence[PaimonChangeSplit | PaimonDiffSplit]) -> pa.Table:
        return pa.Table.from_batches(list(self.read_all(splits)), schema=self.output_schema)


@dataclass(frozen=True)
class PaimonChangesScan(ScanReads):
    """The changes of snapshots ``start+1..end``: ``plan()``/``read_split``, ``to_arrow``,
    ``to_batches``, ``to_arrow_reader`` and the Arrow stream interface."""

    reader: PaimonChangeReader
    start_snapshot_id: int
    end_snapshot_id: int

    def __repr__(self) -> str:
        uri = self.reader.context.file_io.uri
        return (
            f"PaimonChangesScan({uri!r}, after snapshot {self.start_snapshot_id} "
            f"up to {self.end_snapshot_id})"
        )

    @property
    def output_schema(self) -> pa.Schema:
        return self.reader.output_schema

    def read_context(self) -> PaimonChangeReader:
        return self.reader

    def read_split(self, split: PaimonChangeSplit | PaimonDiffSplit) -> Iterator[pa.RecordBatch]:
        return self.reader.read(split)

    def plan(self) -> list[PaimonChangeSplit | PaimonDiffSplit]:
        """One split per bucket that changed, in partition and bucket order, pruned by
        the filter's partition (and key or value statistics) before any data file is
        read; the buckets an OVERWRITE touched are compared at both ends
        (raylake/paimon/changes_diff.py)."""
        ctx = self.reader.context
        ts = ctx.table_schema
        assert isinstance(ts, PaimonTableSchema)
        snaps = self._snapshots()
        overwrites = [s for s in snaps if s.commit_kind == "OVERWRITE"]
        group = group_of(ts, bool(overwrites) and self._rescaled(ts, snaps))
        compared: set[Group] = set()
        for snap in overwrites:
            compared |= overwritten(ctx, snap, group)
        pruning = kind_of(ts).pruning_filter(ctx.filter)
        sources: set[str] = set()
        by_bucket: dict[tuple[bytes, int], list[PaimonFile]] = {}
        for snap in snaps:
            if snap.commit_kind == "OVERWRITE":
                continue
            source, files = changed_files(ctx, snap, lambda bucket: True)
            if source == "none":
                continue  # a COMPACT snapshot without changelog changes no row
            sources.add(source)
            for f in prune_files(files, ts, pruning):
                if group(f.partition, f.bucket) not in compared:
                    by_bucket.setdefault((f.partition_bytes, f.bucket), []).append(f)
        if len(sources) > 1:
            raise UnsupportedPaimonError(
                ctx.file_io.uri,
                "changes() over a range whose snapshots mix changelog and delta files",
            )
        source = next(iter(sources), "delta")
        splits: list[PaimonChangeSplit | PaimonDiffSplit] = [
            PaimonChangeSplit(source, fs[0].partition, fs[0].bucket, tuple(fs))
            for fs in by_bucket.values()
        ]
        splits += diff_splits(ctx, self.start_snapshot_id, self.end_snapshot_id, compared, group)
        return sorted(splits, key=lambda s: (partition_sort_key(s.partition), s.bucket))

    def _snapshots(self) -> list[Snapshot]:
        """Snapshots ``start+1..end``; a missing one is expired (or never existed)."""
        file_io = self.reader.context.file_io
        found = []
        for sid in range(self.start_snapshot_id + 1, self.end_snapshot_id + 1):
            snap = read_snapshot(file_io, sid)
            if snap is None:
                ids = PaimonSnapshots(file_io).ids()
                if not ids or sid > ids[-1]:
                    PaimonSnapshots(file_io).get(sid)  # SnapshotNotFoundError names what exists
                raise SnapshotExpiredError(sid, ids[0], file_io.uri)
            found.append(snap)
        return found

    def _rescaled(self, ts: PaimonTableSchema, snaps: list[Snapshot]) -> bool:
        """Whether the bucket count changed over the range (keys may change bucket)."""
        file_io = self.reader.context.file_io
        first = read_snapshot(file_io, self.start_snapshot_id) if self.start_snapshot_id else None
        ends = [] if first is None else [first]
        return len(bucket_counts(ts, [*ends, *snaps])) > 1


def paimon_changes(
    table: Any,
    start: Any,
    end: Any,
    *,
    columns: Any = None,
    filter: Any = None,
    include_row_kind: Any = False,
) -> PaimonChangesScan:
    """Check the arguments and resolve both ends, before any data is read."""
    row_kind_arg(include_row_kind)
    snapshots = PaimonSnapshots(table.file_io)
    first = _resolve_start(snapshots, start)
    if end is None:
        latest = snapshots.latest_id()
        last = first if latest is None else latest
    elif isinstance(end, datetime):
        last = _as_of(snapshots, end).id
    elif not is_int(end) or end < 1:
        raise InvalidArgumentError("end", end, "a snapshot id >= 1, a datetime or None")
    else:
        last = snapshots.get(end).id  # SnapshotNotFoundError names what exists
    check_order(start, first, last)
    context = table.scan(
        columns=columns, filter=filter, snapshot_id=last if last else None
    ).read_context()
    return PaimonChangesScan(PaimonChangeReader(context, include_row_kind), first, last)


def _resolve_start(snapshots: PaimonSnapshots, start: Any) -> int:
    """The snapshot id after which changes count (0: before the first commit)."""
    ids = snapshots.ids()
    if isinstance(start, datetime):
        millis = _to_millis(start)
        before = [s for s in snapshots.all() if s.time_millis <= (millis or 0)]
        if before:
            return before[-1].id
        if ids and ids[0] > 1:  # the state at that time was expired with its snapshot
            raise SnapshotExpiredError(ids[0] - 1, ids[0], snapshots.file_io.uri)
        return 0
    if not is_int(start) or start < 0:
        raise InvalidArgumentError("start", start, "a snapshot id (an int >= 0) or a datetime")
    if ids and start + 1 < ids[0]:  # a snapshot of the range is gone
        raise SnapshotExpiredError(start, ids[0], snapshots.file_io.uri)
    if start and start not in ids and (not ids or start > ids[-1]):
        snapshots.get(start)  # SnapshotNotFoundError names what exists
    return int(start)


def _as_of(snapshots: PaimonSnapshots, when: datetime) -> Snapshot:
    millis = _to_millis(when)
    assert millis is not None
    return snapshots.as_of(millis)
