"""The committer's check after its create: is the new snapshot in the table's history?

A writer slow between reading the latest snapshot (N-1) and creating N can find N free
because another writer made N and later ones, and expiration then deleted N: the create
succeeds, yet the snapshot is a stray below the table's latest, its rows in no snapshot
of the history (docs/format.md 6.6). The commit is then not acknowledged.
"""

from __future__ import annotations

from raylake.errors import CommitLineageUnknownError, CommitStateUnknownError
from raylake.format.manifest import ADD, live_files_of, read_entries
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot, SnapshotManager, snapshot_path


def check_lineage(snapshots: SnapshotManager, ts: TableSchema, snap: Snapshot) -> bool:
    """Raise CommitLineageUnknownError where ``snap``, just created, may not be in the
    table's history; True where it is the latest snapshot, False where it is in the
    history below newer ones (the LATEST hint must not name it).

    Where the store's client retries a create by itself (S3), a try of it can land
    after an expiration deleted the snapshot the first try made: brought back, it is a
    parent that passes the check below for a slow writer's stray made on it. There the
    listing decides: a snapshot with none newer is the latest (a stray lies below a
    newer snapshot, which expiration keeps), one below newer ones is the table's where
    :func:`_followed` says so.

    Expiration deletes the oldest snapshot first, so a parent that still exists after
    the create proves that N was never taken before it, if it is the parent this commit
    read: another slow writer may have re-created N-1 in the same way, and that stranger
    is told apart by its commit id (a parent written without one is checked for
    existence only). One read a commit; where the parent is gone (a table's first
    commit has none), the snapshot is the table's all the same where nothing is newer,
    the next one was made on it, or the files it adds are live in the latest snapshot
    (an expiration removed it, its parent and its child since: others went on from it).
    Otherwise the outcome is reported unknown rather than acknowledged."""
    file_io = snapshots.file_io
    path = file_io.full_path(snapshot_path(snap.id))
    try:
        parent = None
        if snap.parent_id is not None and not file_io.client_retries:
            parent = snapshots.read_if_present(snap.parent_id)
        if parent is None:
            if max(snapshots.snapshot_ids(), default=snap.id) <= snap.id:
                return True  # the latest: a stray lies below a newer snapshot
            if _followed(snapshots, ts, snap):
                return False
    except Exception as exc:
        # The snapshot is there and may be the table's: a failed look must not have
        # the commit taken for failed, and what it wrote deleted.
        raise CommitStateUnknownError(path, file_io.retry_policy.max_attempts, exc) from exc
    if parent is not None and parent.commit_id == snap.parent_commit_id:
        return True
    raise CommitLineageUnknownError(path, snap.parent_id, replaced=parent is not None)


def _followed(snapshots: SnapshotManager, ts: TableSchema, snap: Snapshot) -> bool:
    """Whether ``snap``, below newer snapshots and without its parent, is in the table's
    history all the same: an expiration that ran just after the create removed the
    parent. So it is where the next snapshot was made on this commit, or where a file
    it adds is live in the latest snapshot (file names are unique, and a stray's files
    are in no snapshot of the history)."""
    child = snapshots.read_if_present(snap.id + 1)
    if child is not None:
        return child.parent_commit_id == snap.commit_id
    return held_by_latest(snapshots, ts, snap)


def held_by_latest(snapshots: SnapshotManager, ts: TableSchema, snap: Snapshot) -> bool:
    """Whether a file that ``snap`` adds is live in the latest snapshot: then ``snap`` is
    in the table's history, though it may be gone (data file names are unique, and a
    stray's files are in no snapshot of the history). False where it adds none."""
    delta = read_entries(snapshots.file_io, snap.delta_manifests, ts, ())
    added = delta.filter(delta.column("kind").to_numpy(zero_copy_only=False) == ADD)
    if added.num_rows == 0:
        return False  # nothing of its own to look for
    # The listing's newest, not the hint's: a stray lies below a newer snapshot, while
    # the hint, or a snapshot made again, can lead to one (docs/format.md 6.6).
    latest = snapshots.listed_latest()
    if latest is None:
        return False
    live = live_files_of(snapshots.file_io, latest.base_manifests, ts, ())
    return bool(set(added.column("path").to_pylist()) & set(live.column("path").to_pylist()))


def held_after_unknown(snapshots: SnapshotManager, ts: TableSchema, snap: Snapshot) -> bool:
    """Whether a commit whose create's outcome is unknown is in the table all the same
    (:func:`held_by_latest`), where that can be read; False where it cannot."""
    try:
        return held_by_latest(snapshots, ts, snap)
    except Exception:  # the create's own error is the one to raise
        return False
