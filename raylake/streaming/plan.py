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

The table kind plans the changes (``TableKind.plan_changes``, the mechanism behind
``Table.changes``); this module only chooses which range each plan covers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal

import pyarrow as pa

from raylake.arguments import check_choice
from raylake.errors import StreamArgumentError, StreamError
from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.streaming.options import ON_OVERWRITE as ON_OVERWRITE
from raylake.streaming.options import OnOverwrite as OnOverwrite
from raylake.streaming.shard import ShardSpec
from raylake.streaming.splits import InsertSplit, RemovedSplit, StreamReadContext, StreamSplit
from raylake.table.changes import ChangeRange
from raylake.table.kind import kind_of
from raylake.table.projection import follow_columns
from raylake.table.source import RaylakeSource, TableSource

PlanKind = Literal["full", "delta", "changelog", "diff", "refresh", "empty"]


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
        """The plan holds a whole new state (after an OVERWRITE, with
        ``on_overwrite="refresh"``): replace, don't add."""
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
        source: TableSource | None = None,
    ) -> None:
        check_choice("on_overwrite", on_overwrite, ON_OVERWRITE, StreamArgumentError)
        self.context = context
        self.source = RaylakeSource(context.file_io) if source is None else source
        self.shard = shard
        self.on_overwrite = on_overwrite
        self._kind = kind_of(context.table_schema)
        self._by_file = self._kind.shards_by_file

    @property
    def file_io(self) -> FileIO:
        return self.context.file_io

    @property
    def ts(self) -> TableSchema:
        return self.context.table_schema

    def follow_schema(self, snap: Snapshot) -> None:
        """Plan ``snap`` and later under its schema when the table changed its schema
        (docs/schema-evolution.md): new columns appear, renamed ones under new names."""
        if snap.schema_id <= self.ts.schema_id:
            return
        new = self.source.schema(snap.schema_id)
        columns, expr = follow_columns(self.ts, new, self.context.columns, self.context.filter)
        self.context = replace(self.context, table_schema=new, columns=columns, filter=expr)
        self._kind = kind_of(new)

    def full(self, snap: Snapshot, kind: PlanKind = "full") -> StreamPlan:
        self.follow_schema(snap)
        rng = self._range(None, snap)
        splits = rng.splits(snap.id, rng.live_after())
        return self._plan(snap, snap.id, kind, tuple(InsertSplit(s) for s in splits))

    def step(self, snap: Snapshot) -> StreamPlan:
        """The plan of one snapshot, right after its parent."""
        self.follow_schema(snap)
        if snap.commit_kind == "COMPACT" and not self._kind.changelog_at_compaction:
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
        parent = None
        if snap.parent_id is not None and self._kind.step_needs_parent():
            if self.source.keeps_step_parent:
                parent = self.source.get(snap.parent_id)
            else:  # perhaps expired: then the kind plans from the snapshot's own files
                parent = self.source.read_if_present(snap.parent_id)
        rng = self._range(parent, snap, step=True)
        splits = self._kind.plan_changes(rng)
        kind: PlanKind = "changelog" if rng.from_changelog else "delta"
        return self._plan(snap, snap.id, kind, splits)

    def catch_up(self, last_read: Snapshot, latest: Snapshot) -> StreamPlan | None:
        """One plan for everything after ``last_read`` up to ``latest``, or None when the
        snapshots must be read one by one so that ``on_overwrite`` decides: an append
        table lost files in between (in any shard: a compaction may write into this
        shard what it removed from another), or the table was overwritten in between
        and the stream skips or fails on overwrites (``refresh`` takes an overwrite of
        a primary-key table as the net changes it made).

        A stream that skipped an overwrite of a primary-key table holds rows the table
        no longer has, so the net changes of a later gap, the difference of the table's
        states, need not bring it to where its snapshots one by one would: a key
        inserted and deleted in the gap stays at the value it had before the overwrite.
        Such a stream catches up only where the table was never overwritten. An append
        table overwritten in the gap is read one by one where the stream skips
        overwrites or is sharded: an overwrite that removed only files added in the gap
        leaves no trace at its two ends, so a catch-up would drop their rows where
        ``skip`` keeps them, and would not refresh this shard where the other shards
        refresh (a compaction may have moved rows they held into this shard's files).
        (An unsharded stream that refreshes ends where its refresh would.)"""
        differences = self._kind.changes_are_state_differences
        if self.on_overwrite == "skip" and differences:
            if latest.last_overwrite_id != 0:  # (None: not known)
                return None
        elif self._steps_overwrites(differences) and self._overwritten(last_read, latest):
            return None
        # Read one by one (or planned again after a failure), the snapshots keep their
        # own schemas, not the latest one: a column deleted since would be missing.
        before = self.context, self._kind
        try:
            self.follow_schema(latest)
            rng = self._range(last_read, latest, use_changelog=False)
            splits = self._kind.plan_changes(rng)
        except BaseException:
            self.context, self._kind = before
            raise
        if rng.removed_any or any(isinstance(s, RemovedSplit) for s in splits):
            self.context, self._kind = before
            return None
        return self._plan(latest, last_read.id + 1, "diff", splits)

    # -- helpers -----------------------------------------------------------------------

    def _steps_overwrites(self, differences: bool) -> bool:
        """Whether an overwrite in a gap makes it read one snapshot at a time."""
        if self.on_overwrite == "fail":
            return True
        return not differences and (self.on_overwrite == "skip" or not self.shard.is_everything)

    def _overwritten(self, last_read: Snapshot, latest: Snapshot) -> bool:
        """Whether a snapshot after ``last_read`` up to ``latest`` is an OVERWRITE: from
        ``latest.last_overwrite_id``, or where that is unknown (a snapshot written
        before it, a Paimon table) from the commit kinds of the snapshots in between.
        One that expired meanwhile cannot tell and counts as no overwrite."""
        if latest.last_overwrite_id is not None:
            return latest.last_overwrite_id > last_read.id
        between = range(last_read.id + 1, latest.id + 1)
        # One small read per snapshot, side by side (an object store's latency each).
        with ThreadPoolExecutor(max(1, min(len(between), 16)), "raylake-kinds") as pool:
            return "OVERWRITE" in list(pool.map(self._commit_kind, between))

    def _commit_kind(self, snapshot_id: int) -> str | None:
        snap = self.source.read_if_present(snapshot_id)
        return None if snap is None else snap.commit_kind

    def _range(
        self,
        before: Snapshot | None,
        after: Snapshot,
        *,
        step: bool = False,
        use_changelog: bool = True,
    ) -> ChangeRange:
        columns = self.context.columns
        names = self.ts.column_names
        return ChangeRange(
            self.source,
            self.ts,
            before,
            after,
            take=None if self.shard.is_everything else self._takes,
            column_indices=None if columns is None else [names.index(c) for c in columns],
            step=step,
            use_changelog=use_changelog,
        )

    def _takes(self, f: DataFile) -> bool:
        return self.shard.takes_file(f.path, f.bucket, self._by_file)

    def _plan(
        self, snap: Snapshot, first: int, kind: PlanKind, splits: Sequence[StreamSplit]
    ) -> StreamPlan:
        return StreamPlan(snap.id, first, kind, snap.commit_kind, tuple(splits), self.context)
