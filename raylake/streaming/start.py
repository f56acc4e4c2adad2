"""Where a stream reader without progress starts: the snapshot its ``start`` names, and
whether it reads that snapshot whole or as a change (docs/streaming.md)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from raylake.streaming.options import StartPosition, StreamPosition
from raylake.streaming.reach import check_reachable

if TYPE_CHECKING:
    from raylake.table.source import TableSource
    from raylake.table.table import Table


def start_position(
    table: Table, start: StartPosition, check_not_expired: Callable[[int], None]
) -> tuple[int, bool]:
    """The snapshot a reader of ``table`` reads first, and whether it reads it whole;
    ``check_not_expired`` raises the reader's error for a position that expired."""
    snapshots: TableSource = table.source
    if isinstance(start, StreamPosition):
        at = start.next_snapshot_id
        why = "a position of another table, or of this one before it was created again"
        if at <= check_reachable(snapshots, table.uri, at, "the position", why):
            check_not_expired(at)
        return at, start.full
    if isinstance(start, str):  # a name, an int or a datetime: checked by StreamOptions
        if start == "earliest":
            earliest = snapshots.earliest_id()
            return (1, False) if earliest is None else (earliest, True)
        newest = snapshots.latest_id()
        if newest is None:
            return 1, False  # the first snapshot's changes are the whole table
        return (newest + 1, False) if start == "latest-new" else (newest, True)
    if isinstance(start, datetime):
        return table.scan(as_of=start).snapshot().id, True  # type: ignore[union-attr]
    if snapshots.read_if_present(start) is None:
        check_not_expired(start)
        snapshots.get(start)  # SnapshotNotFoundError names what exists
    return start, snapshots.start_id_reads_whole
