"""How far ahead a stream may be placed: at most the next snapshot its table makes.

A reader placed past it would wait for that snapshot and then read on from there,
skipping every row committed before it; so a start position (``StreamPosition``) and a
``seek`` past it are refused where they are made.
"""

from __future__ import annotations

from raylake.errors import SnapshotNotFoundError
from raylake.table.source import TableSource


def check_reachable(
    source: TableSource, uri: str, next_snapshot_id: int, name: str, why: str
) -> int:
    """The table's latest snapshot id (0: none), or SnapshotNotFoundError where
    ``next_snapshot_id`` (``name``: what holds it) is past the next one (``why``: how
    it could be)."""
    latest = source.latest_id() or 0
    if next_snapshot_id > latest + 1:
        raise SnapshotNotFoundError(
            f"{name} {next_snapshot_id} is past snapshot {latest + 1}, the next one {uri} "
            f"makes: {why}",
            snapshot_id=next_snapshot_id,
        )
    return latest
