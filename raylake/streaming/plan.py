"""Stream planning: what a consumer reads for a snapshot, or for a run of snapshots.

- a **full** plan: the whole state at a snapshot (where a new stream starts);
- a **delta** plan per APPEND snapshot: an append table's added files, or a
  primary-key table's changelog (or, without one, the diff of the buckets it touched);
- nothing for COMPACT snapshots (same rows, new files);
- OVERWRITE snapshots as ``on_overwrite`` says: ``refresh`` (a full plan of the new
  state, flagged ``is_refresh``), ``skip`` or ``fail``;
- a **catch-up** plan when the reader is far behind: the difference of the live files
  of two snapshots. For a primary-key table, the buckets whose files differ are
  merged at both snapshots and compared (net changes; compactions in between add
  nothing). For an append table, the files added in between, when none was removed
  (else the snapshots are read one by one).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import StreamError
from raylake.format.manifest import (
    ADD,
    DataFile,
    data_files_from_table,
    live_data_files,
    read_entries,
)
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.streaming.shard import ShardSpec
from raylake.streaming.splits import (
    ChangelogSplit,
    DiffSplit,
    InsertSplit,
    StreamReadContext,
    StreamSplit,
)
from raylake.table.kind import kind_of
from raylake.table.split import partition_sort_key

PlanKind = Literal["full", "delta", "changelog", "diff", "refresh", "empty"]
OnOverwrite = Literal["refresh", "skip", "fail"]
ON_OVERWRITE: tuple[str, ...] = ("refresh", "skip", "fail")


@dataclass(frozen=True)
class StreamPlan:
    """The rows a stream delivers for snapshots ``first_snapshot_id..snapshot_id``."""

    snapshot_id: int
    first_snapshot_id: int
    kind: PlanKind
    commit_kind: str
    splits: tuple[StreamSplit, ...]
    context: StreamReadContext

    @property
    def next_snapshot_id(self) -> int:
        """Where the stream continues after this plan."""
        return self.snapshot_id + 1

    @property
    def is_refresh(self) -> bool:
        """The plan holds a whole new state (after an OVERWRITE): replace, don't add."""
        return self.kind == "refresh"

    @property
    def row_count_estimate(self) -> int:
        """Rows in the files the plan reads (before filters and merging)."""
        return sum(s.row_count for s in self.splits)

    @property
    def schema(self) -> pa.Schema:
        return self.context.output_schema

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        return self.context.read_all(self.splits)

    def to_arrow(self) -> pa.Table:
        return self.context.read_table(self.splits)

    def __repr__(self) -> str:
        span = (
            f"{self.snapshot_id}"
            if self.first_snapshot_id == self.snapshot_id
            else f"{self.first_snapshot_id}..{self.snapshot_id}"
        )
        return (
            f"StreamPlan(snapshot {span}, {self.kind}, {self.commit_kind}, "
            f"{len(self.splits)} splits, ~{self.row_count_estimate} rows)"
        )


class StreamPlanner:
    """Plans the snapshots of one table for one shard and one projection."""

    def __init__(
        self,
        context: StreamReadContext,
        shard: ShardSpec,
        on_overwrite: OnOverwrite = "refresh",
    ) -> None:
        if on_overwrite not in ON_OVERWRITE:
            raise StreamError(
                f"on_overwrite must be one of {list(ON_OVERWRITE)}, got {on_overwrite!r}"
            )
        self.context = context
        self.shard = shard
        self.on_overwrite = on_overwrite
        ts = context.table_schema
        self._is_pk = ts.is_primary_key_table
        self._by_file = not self._is_pk and ts.buckets == 1

    @property
    def file_io(self) -> FileIO:
        return self.context.file_io

    @property
    def ts(self) -> TableSchema:
        return self.context.table_schema

    def full(self, snap: Snapshot, kind: PlanKind = "full") -> StreamPlan:
        files = self._mine(live_data_files(self.file_io, snap.base_manifests, self.ts))
        return self._plan(snap, snap.id, kind, self._insert_splits(snap.id, files))

    def step(self, snap: Snapshot) -> StreamPlan:
        """The plan of one snapshot, right after its parent."""
        if snap.commit_kind == "COMPACT":
            return self._plan(snap, snap.id, "empty", ())
        if snap.commit_kind == "OVERWRITE":
            if self.on_overwrite == "fail":
                raise StreamError(
                    f"snapshot {snap.id} of {self.file_io.uri} overwrites the table and the "
                    "stream was opened with on_overwrite='fail'"
                )
            if self.on_overwrite == "skip":
                return self._plan(snap, snap.id, "empty", ())
            return self.full(snap, kind="refresh")
        if not self._is_pk:
            added = self._mine(self._added_files(snap))
            return self._plan(snap, snap.id, "delta", self._insert_splits(snap.id, added))
        if self.ts.table_options.changelog_producer != "none":
            return self._plan(snap, snap.id, "changelog", self._changelog_splits(snap))
        touched = {(f.partition, f.bucket): f for f in self._mine(self._added_files(snap))}
        splits = tuple(
            DiffSplit(snap.parent_id, snap.id, p, b, f.row_count) for (p, b), f in touched.items()
        )
        return self._plan(snap, snap.id, "delta", splits)

    def catch_up(self, last_read: Snapshot, latest: Snapshot) -> StreamPlan | None:
        """One plan for everything after ``last_read`` up to ``latest``, or None when the
        snapshots must be read one by one (an append table lost files in between)."""
        before = self._mine(live_data_files(self.file_io, last_read.base_manifests, self.ts))
        after = self._mine(live_data_files(self.file_io, latest.base_manifests, self.ts))
        before_paths = {f.path for f in before}
        after_paths = {f.path for f in after}
        first = last_read.id + 1
        if not self._is_pk:
            if not before_paths <= after_paths:
                return None
            added = [f for f in after if f.path not in before_paths]
            return self._plan(latest, first, "diff", self._insert_splits(latest.id, added))
        old = _paths_by_bucket(before)
        new = _paths_by_bucket(after)
        rows = _rows_by_bucket(after)
        splits = tuple(
            DiffSplit(last_read.id, latest.id, p, b, rows.get((p, b), 0))
            for (p, b) in sorted(old.keys() | new.keys(), key=_bucket_key)
            if old.get((p, b)) != new.get((p, b))
        )
        return self._plan(latest, first, "diff", splits)

    # -- helpers -----------------------------------------------------------------------

    def _plan(
        self, snap: Snapshot, first: int, kind: PlanKind, splits: Sequence[StreamSplit]
    ) -> StreamPlan:
        return StreamPlan(snap.id, first, kind, snap.commit_kind, tuple(splits), self.context)

    def _mine(self, files: Sequence[DataFile]) -> list[DataFile]:
        if self.shard.is_everything:
            return list(files)
        return [f for f in files if self.shard.takes_file(f.path, f.bucket, self._by_file)]

    def _added_files(self, snap: Snapshot) -> list[DataFile]:
        entries = read_entries(self.file_io, snap.delta_manifests, self.ts, ())
        added = entries.filter(pc.equal(entries.column("kind"), ADD))
        return data_files_from_table(added, self.ts)

    def _insert_splits(self, snapshot_id: int, files: list[DataFile]) -> tuple[InsertSplit, ...]:
        if not files:
            return ()
        columns = self.context.columns
        indices = None if columns is None else [self.ts.column_names.index(c) for c in columns]
        target = self.ts.table_options.split_target_size
        splits = kind_of(self.ts).plan_splits(snapshot_id, files, indices, target)
        return tuple(InsertSplit(s) for s in splits)

    def _changelog_splits(self, snap: Snapshot) -> tuple[ChangelogSplit, ...]:
        entries = read_entries(self.file_io, snap.changelog_manifests, self.ts, ())
        groups: dict[tuple[tuple[Any, ...], int], list[DataFile]] = {}
        for f in self._mine(data_files_from_table(entries, self.ts)):
            groups.setdefault((f.partition, f.bucket), []).append(f)
        return tuple(
            ChangelogSplit(snap.id, p, b, tuple(files))
            for (p, b), files in sorted(groups.items(), key=lambda kv: _bucket_key(kv[0]))
        )


def _paths_by_bucket(
    files: Sequence[DataFile],
) -> dict[tuple[tuple[Any, ...], int], frozenset[str]]:
    groups: dict[tuple[tuple[Any, ...], int], set[str]] = {}
    for f in files:
        groups.setdefault((f.partition, f.bucket), set()).add(f.path)
    return {k: frozenset(v) for k, v in groups.items()}


def _rows_by_bucket(files: Sequence[DataFile]) -> dict[tuple[tuple[Any, ...], int], int]:
    rows: dict[tuple[tuple[Any, ...], int], int] = {}
    for f in files:
        rows[(f.partition, f.bucket)] = rows.get((f.partition, f.bucket), 0) + f.row_count
    return rows


def _bucket_key(key: tuple[tuple[Any, ...], int]) -> tuple[Any, ...]:
    partition, bucket = key
    return (partition_sort_key(partition), bucket)
