"""After its create, is a new snapshot in the table's history? (docs/format.md, 6.6)

A writer slow between reading the latest snapshot (N-1) and creating N can find N free
because another writer made N and later ones and an expiration then deleted N: the
create succeeds, yet the snapshot is a stray below the table's latest, in no later
snapshot's history. Two facts tell the cases apart: expiration deletes the oldest
snapshot first and never the latest, so (1) while a snapshot exists every newer one
made on the history does too, and (2) a snapshot newer than N existed at a stray's
create and one always will. One read where the parent is still there; more only where
it is gone.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Sequence

from raylake.commit_errors import (
    CommitLineageUnknownError,
    CommitStateUnknownError,
)
from raylake.format.snapshot import Snapshot, SnapshotManager, snapshot_path

logger = logging.getLogger(__name__)


class _Verdict(enum.Enum):
    KEPT = "kept"  # in the history
    BEHIND = "behind"  # in the history, newer snapshots made on it already
    STRAY = "stray"  # below the latest, in no snapshot's history: nothing committed
    EXPIRED_STRAY = "expired stray"  # a stray, and an expiration removed it already
    UNKNOWN = "unknown"


def check_lineage(snapshots: SnapshotManager, snap: Snapshot) -> bool | None:
    """Whether the created ``snap`` is in the table's history: True, or None where newer
    snapshots were made on it already (the LATEST hint must not name it then: it may be
    a create made again after its snapshot expired). A stray is deleted and False
    returned: nothing was committed, and the commit tries again on the latest snapshot,
    as when another writer took the id (expiration leaves a stray's data files alone,
    :func:`strays`). Where it cannot be told, CommitLineageUnknownError, and nothing is
    deleted."""
    file_io = snapshots.file_io
    path = file_io.full_path(snapshot_path(snap.id))
    try:
        verdict, parent = _verdict(snapshots, snap)
    except Exception as exc:
        # The snapshot is there and may be the table's: a failed look must not have
        # the commit taken for failed, and what it wrote deleted.
        raise CommitStateUnknownError(path, file_io.retry_policy.max_attempts, exc) from exc
    if verdict is _Verdict.KEPT:
        return True
    if verdict is _Verdict.BEHIND:
        return None
    if verdict is _Verdict.STRAY:
        try:
            # Before its manifests (the committer deletes those): a reader that lists it
            # must not find it naming missing ones.
            file_io.delete(snapshot_path(snap.id))
        except Exception as exc:
            raise CommitLineageUnknownError(path, snap.id - 1, replaced=parent) from exc
    if verdict is not _Verdict.UNKNOWN:
        logger.info("snapshot %d of %s was made outside the history; retrying", snap.id, path)
        return False
    raise CommitLineageUnknownError(path, snap.id - 1, replaced=parent)


def strays(snaps: Sequence[Snapshot]) -> set[int]:
    """The ids among ``snaps`` (listed and read, oldest first, up to the latest) of
    snapshots outside the history: the next one is not the next id (it was expired,
    which removes the older ones first) or was made on another commit. Expiration does
    not delete their data files: a committer that made one retries with the same files.
    A snapshot read just before a concurrent expiration removed the next may be counted
    too; that expiration deletes its files."""
    out = set()
    for snap, after in itertools.pairwise(snaps):
        other_parent = after.parent_commit_id not in ("", snap.commit_id)
        if after.id != snap.id + 1 or (snap.commit_id and other_parent):
            out.add(snap.id)
    return out


def _verdict(snapshots: SnapshotManager, snap: Snapshot) -> tuple[_Verdict, bool]:
    """The verdict, and whether the parent's id holds another commit (for the message)."""
    replaced = False
    if snap.parent_id is not None:
        parent = snapshots.read_if_present(snap.parent_id)
        # A parent that exists was not expired, so neither was N before the create; it
        # must be the parent read (another slow writer may have re-created its id), told
        # by its commit id (a parent written without one is checked for existence only).
        if parent is not None and parent.commit_id == snap.parent_commit_id:
            return _Verdict.KEPT, False
        replaced = parent is not None
    # The listing comes first: a snapshot newer than N seen after the create is either
    # one made on N (read next) or proof that N was taken before.
    if max(snapshots.snapshot_ids(), default=snap.id) <= snap.id:
        return _Verdict.KEPT, replaced
    child = snapshots.read_if_present(snap.id + 1)
    if child is not None and child.parent_commit_id == snap.commit_id:
        return _Verdict.BEHIND, replaced
    # N+1 is gone or made on another commit. Only snapshots made on N name the
    # manifests it wrote (its delta, or the merged base it made) among their base
    # manifests, until a merge folds them in: each snapshot's base is its parent's and
    # its delta, or one merged manifest. (N may still be there and in the history: a
    # create that the store carried out, answered with an error, and whose read back
    # found N expired already, was made again.)
    latest = snapshots.latest()
    if latest is None:
        return _Verdict.UNKNOWN, replaced
    delta = snap.delta_manifests[-1].path
    wrote = {delta, snap.base_manifests[-1].path} if snap.base_manifests else {delta}
    if wrote & {m.path for m in latest.base_manifests}:
        return _Verdict.BEHIND, replaced
    if len(latest.base_manifests) <= latest.id - snap.id:  # a merge after N may hide them
        return _Verdict.UNKNOWN, replaced
    mine = snapshots.read_if_present(snap.id)
    if mine is not None and mine.commit_id == snap.commit_id:
        return _Verdict.STRAY, replaced
    return _Verdict.EXPIRED_STRAY, replaced
    delta = snap.delta_manifests[-1].path
    wrote = {delta, snap.base_manifests[-1].path} if snap.base_manifests else {delta}
    if wrote & {m.path for m in latest.base_manifests}:
        return _Verdict.BEHIND, replaced
    if len(latest.base_manifests) > latest.id - snap.id:  # no merge after N hides them
        return _Verdict.EXPIRED_STRAY, replaced
    return _Verdict.UNKNOWN, replaced
