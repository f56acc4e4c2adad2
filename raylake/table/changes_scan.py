"""``Table.changes``: a bounded incremental read, as a scan (docs/changes.md; issue 17).

What changed after snapshot ``start`` up to and including ``end``: planned by the table
kind from two snapshots (raylake/table/changes.py), read split by split like a scan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from raylake.arguments import refuse_unknown_keywords
from raylake.errors import InvalidArgumentError, SnapshotExpiredError
from raylake.expr import AlwaysTrue, Expr
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.table.args import is_int, snapshot_ref_arg
from raylake.table.changes import ChangeRange, ChangeReadContext, ChangeSplit
from raylake.table.kind import kind_of
from raylake.table.scan import TableScan, _to_millis
from raylake.table.scan_reads import ScanReads
from raylake.table.source import TableSource

SnapshotRef = int | datetime


@dataclass(frozen=True)
class ChangesScan(ScanReads):
    """The changes after ``start`` (None: the empty table) up to ``end`` (None: the table
    has no snapshot): ``plan()`` / ``read_split``, ``to_arrow``, ``to_batches``,
    ``to_arrow_reader`` and the Arrow stream interface, like ``TableScan``."""

    source: TableSource
    table_schema: TableSchema
    start: Snapshot | None
    end: Snapshot | None
    columns: tuple[str, ...] | None = None
    filter: Expr = field(default_factory=AlwaysTrue)
    include_row_kind: bool = False
    # The id of ``start`` where its snapshot is gone but the range is still readable
    # (a source whose ranges read only the snapshots after it); None: ``start``'s.
    start_id: int | None = None

    @property
    def file_io(self) -> FileIO:
        return self.source.file_io

    def __repr__(self) -> str:
        start = self.start_snapshot_id
        end = None if self.end is None else self.end.id
        return f"ChangesScan({self.file_io.uri!r}, after snapshot {start} up to {end})"

    @property
    def start_snapshot_id(self) -> int:
        if self.start_id is not None:
            return self.start_id
        return 0 if self.start is None else self.start.id

    @property
    def end_snapshot_id(self) -> int:
        return 0 if self.end is None else self.end.id

    def read_context(self) -> ChangeReadContext:
        return ChangeReadContext(
            self.file_io, self.table_schema, self.columns, self.filter, self.include_row_kind
        )

    @property
    def output_schema(self) -> pa.Schema:
        return self.read_context().output_schema

    @refuse_unknown_keywords
    def plan(self) -> list[ChangeSplit]:
        """The change splits: small, picklable, each read on its own (``read_split``)."""
        if self.end is None or self.start_snapshot_id == self.end.id:
            return []
        ts = self.table_schema
        kind = kind_of(ts)
        names = ts.column_names
        rng = ChangeRange(
            self.source,
            ts,
            self.start,
            self.end,
            pruning=kind.pruning_filter(self.filter),
            column_indices=None if self.columns is None else [names.index(c) for c in self.columns],
            load_snapshots=self._between,
        )
        return kind.plan_changes(rng)

    def _between(self) -> list[Snapshot] | None:
        """Snapshots start+1..end, or None if one of them is gone."""
        assert self.end is not None
        manager = self.source
        found = []
        for snapshot_id in range(self.start_snapshot_id + 1, self.end.id):
            snap = manager.read_if_present(snapshot_id)
            if snap is None:
                return None
            found.append(snap)
        return [*found, self.end]

    @refuse_unknown_keywords
    def read_split(self, split: ChangeSplit) -> Iterator[pa.RecordBatch]:
        return self.read_context().read(split)


def changes_scan(
    source: TableSource,
    ts: TableSchema,
    start: SnapshotRef,
    end: SnapshotRef | None,
    *,
    columns: Any = None,
    filter: Any = None,
    include_row_kind: Any = False,
) -> ChangesScan:
    """Check the arguments and resolve both ends, before any data is read."""
    row_kind_arg(include_row_kind)
    start, end = snapshot_ref_arg(start), snapshot_ref_arg(end)
    kind_of(ts).check_changes("changes()")
    scan = TableScan(source.file_io, ts, table_source=source).select(columns).where(filter)
    manager = source
    first = _resolve(manager, start, "start")
    if end is None:
        last = manager.latest()
        if last is None and first is not None:
            last = first
    else:
        if is_int(end) and end == 0:
            raise InvalidArgumentError("end", end, "a snapshot id >= 1, a datetime or None")
        last = _resolve(manager, end, "end")
    first_id = 0 if first is None else first.id
    if first is None and isinstance(start, int):  # gone, and the range does not read it
        first_id = start
    check_order(start, first_id, None if last is None else last.id)
    return ChangesScan(
        source, ts, first, last, scan.columns, scan.filter, include_row_kind, first_id
    )


def row_kind_arg(value: Any) -> bool:
    """``include_row_kind`` of a change read (raylake's or Paimon's)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError("include_row_kind", value, "a bool")
    return value


def check_order(start: Any, first_id: int, last_id: int | None) -> None:
    """The snapshot ``start`` resolved to (``first_id``) must not be after ``end``'s."""
    if last_id is not None and first_id > last_id:
        raise InvalidArgumentError(
            "start", start, f"at or before end (snapshot {last_id}); snapshot {first_id} is after"
        )


def _resolve(manager: TableSource, value: Any, name: str) -> Snapshot | None:
    """A snapshot id or a time -> the snapshot (None: before the first snapshot)."""
    if isinstance(value, datetime):
        millis = _to_millis(value, name)
        assert millis is not None
        if name == "end":
            return manager.as_of(millis)  # SnapshotNotFoundError: none that early
        ids = manager.snapshot_ids()
        for snapshot_id in reversed(ids):
            snap = manager.get(snapshot_id)
            if snap.time_millis <= millis:
                return snap
        if ids and ids[0] > 1:  # the state at that time was expired with its snapshot
            raise SnapshotExpiredError(ids[0] - 1, ids[0], manager.file_io.uri)
        return None
    if not is_int(value) or value < 0:
        raise InvalidArgumentError(name, value, "a snapshot id (an int >= 0) or a datetime")
    if value == 0:
        return None  # before the first commit: the empty table
    found = manager.read_if_present(value)
    if found is not None:
        return found
    earliest = manager.earliest_id()
    if earliest is not None and value < earliest:
        if name == "start" and not manager.changes_read_start and value + 1 == earliest:
            return None  # the range reads snapshots value+1.. only: all are there
        raise SnapshotExpiredError(value, earliest, manager.file_io.uri)
    return manager.get(value)  # SnapshotNotFoundError names what exists
