"""Idempotent commits: a retry that names its commit (``commit_user`` and
``commit_identifier``) finds the snapshot that committed it, instead of committing its
files a second time (docs/format.md, section 6.4)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from raylake.format.manifest import live_files_of, read_entries
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.io import FileIO

if TYPE_CHECKING:
    from raylake.table.commit import CommitRequest

logger = logging.getLogger(__name__)


def already_committed(
    snapshots: SnapshotManager,
    ts: TableSchema,
    request: CommitRequest,
    user: str,
    latest: Snapshot | None,
) -> Snapshot | None:
    """The snapshot after the request's base that holds a commit of the same user and
    identifier, if any: in the history of ``latest`` only, as a slow commit's stray
    snapshot holds its user and identifier while its rows are in no snapshot of the
    table (the retry must commit them, not return it).

    Where an expiration removed snapshots after the base, the commit may be one of them:
    it happened if a file it adds is live in the oldest snapshot left (file names are
    unique), and that snapshot, which holds it, is returned. SnapshotExpiredError where
    that snapshot is expired too before its files are read."""
    if request.commit_identifier is None or latest is None:
        return None
    base = request.base_snapshot_id or 0
    oldest = latest
    for snap in snapshots.history(latest, base):
        if snap.commit_user == user and snap.commit_identifier == request.commit_identifier:
            return snap
        oldest = snap
    added = {f.path for m in request.messages for f in m.new_files}
    if oldest.id == base + 1 or not added:
        return None  # every snapshot after the base looked at (or nothing to look for)
    # An expiration can remove it, and its manifests, once newer snapshots land:
    # SnapshotExpiredError, and the committer looks again from the latest.
    with snapshots.reading(oldest.id):
        live = live_files_of(snapshots.file_io, oldest.base_manifests, ts, ())
    if added.isdisjoint(live.column("path").to_pylist()):
        return None
    logger.info(
        "commit %s/%s is in snapshot %d (the snapshot that made it was expired)",
        user, request.commit_identifier, oldest.id,
    )  # fmt: skip
    return oldest


def drop_unused_files(
    file_io: FileIO, ts: TableSchema, request: CommitRequest, user: str, done: Snapshot
) -> None:
    """An idempotent retry found its commit done: delete the files this attempt wrote
    that the committed snapshot does not name (a retry that rewrote its data), at once
    rather than leaving them to orphan removal. Where the snapshot found holds the
    commit but did not make it (that one was expired), nothing is deleted: its delta
    does not name the commit's files, which are live."""
    attempt = {f.path for m in request.messages for f in (*m.new_files, *m.changelog_files)}
    made_it = done.commit_user == user and done.commit_identifier == request.commit_identifier
    if not attempt or not made_it:
        return
    metas = [*done.delta_manifests, *done.changelog_manifests]
    try:
        entries = read_entries(file_io, metas, ts, ())
    except Exception as exc:
        # The commit is done: a cleanup that cannot read what it named (an expiration
        # removed the snapshot since) must not fail it, which would delete its files.
        logger.info(
            "commit %s/%s is already snapshot %d; the files of this attempt are left to "
            "orphan removal (%s)", done.commit_user, done.commit_identifier, done.id, exc,
        )  # fmt: skip
        return
    unused = sorted(attempt - set(entries.column("path").to_pylist()))
    if unused:
        logger.info(
            "commit %s/%s is already snapshot %d; deleting %d files of this attempt",
            done.commit_user, done.commit_identifier, done.id, len(unused),
        )  # fmt: skip
        file_io.delete_quietly(unused)
