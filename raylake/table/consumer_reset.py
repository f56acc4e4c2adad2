"""Moving a table's consumer: what ``Table.reset_consumer`` does."""

from __future__ import annotations

from raylake.errors import StreamPositionExpiredError
from raylake.format.consumer import (
    STREAM_MODE,
    ConsumerManager,
    ConsumerProgress,
    validate_consumer_id,
    validate_next_snapshot_id,
)
from raylake.io import FileIO
from raylake.table.args import snapshot_ref_arg
from raylake.table.source import TableSource


def reset_consumer(
    source: TableSource, file_io: FileIO, consumer_id: str, snapshot_id: int
) -> ConsumerProgress:
    """Register ``consumer_id``, or move it, so that it reads ``snapshot_id`` next."""
    snapshot_id = validate_next_snapshot_id(
        validate_consumer_id(consumer_id), snapshot_ref_arg(snapshot_id)
    )
    latest = source.latest_id() or 0
    if snapshot_id != latest + 1:
        source.get(snapshot_id)  # SnapshotNotFoundError names what exists
    # A stream reads its next snapshot as a change against the one before it; where
    # that one is gone (a reset past a gap), it reads the snapshot whole instead.
    gap = _after_gap(source, snapshot_id)
    # The consumer's other properties stay: a StreamingJob shard's sink snapshot
    # bounds its search for its own commits, which must not undo the reset.
    current = source.consumer(consumer_id)
    kept = {} if current is None else dict(current.properties)
    properties = {**kept, STREAM_MODE: "full" if gap else "delta"}
    try:
        progress = source.register_consumer(consumer_id, snapshot_id, properties)
    except StreamPositionExpiredError:  # an expiration won the race: it kept the old needs
        if current is not None:
            ConsumerManager(file_io).reset(consumer_id, current.next_snapshot_id, kept)
        raise
    if not gap and _after_gap(source, snapshot_id):
        # An expiration that read the consumers before this one registered removed the
        # snapshot before: read as a change against it, ``snapshot_id`` would fail. The
        # consumer now keeps ``snapshot_id`` itself, so it is read whole, as after a gap.
        progress = source.register_consumer(consumer_id, snapshot_id, {**kept, STREAM_MODE: "full"})
    return progress


def _after_gap(source: TableSource, snapshot_id: int) -> bool:
    """Whether the snapshot before ``snapshot_id`` is gone (expired)."""
    return snapshot_id > 1 and source.read_if_present(snapshot_id - 1) is None
