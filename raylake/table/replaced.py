"""A data file or snapshot that vanished while an operation read it: a conflict, or a
real loss.

A merge or a compaction reads files live in the snapshot it started from. Where a
concurrent commit replaced one (an overwrite, another merge) and an expiration then
deleted it, or that snapshot itself, the read fails with ``FileNotFoundError`` or
``SnapshotNotFoundError``: that is the conflict the operation's commit would have found,
so it is raised as :class:`CommitConflictError` (the operation runs again on the new
state, or its caller re-runs it). A file missing while the latest snapshot still names
it is damage, and stays the error it was.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pyarrow.compute as pc

from raylake.errors import CommitConflictError, SnapshotNotFoundError
from raylake.format.manifest import ADD, live_files_of, read_entries
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.io import FileIO

T = TypeVar("T")

# Runs of a merge or a delete on a new state, after concurrent commits changed what it read.
ATTEMPTS = 5


def rerun_on_conflict(attempt: Callable[[], T], attempts: int = ATTEMPTS) -> tuple[T, int]:
    """``attempt()``'s result and the runs it took: run again after each
    :class:`CommitConflictError` (a concurrent commit changed what it read; each run
    reads the new latest state), up to ``attempts`` times, then the last one is raised."""
    for n in range(1, attempts + 1):
        try:
            return attempt(), n
        except CommitConflictError:
            if n == attempts:
                raise
    raise AssertionError("unreachable")


@contextmanager
def vanished_as_conflict(file_io: FileIO, ts: TableSchema, what: str) -> Iterator[None]:
    """A data file or snapshot that vanished while the block read it is raised as the
    conflict it is (:func:`conflict_if_replaced`); a real loss stays the error it was."""
    try:
        yield
    except (FileNotFoundError, SnapshotNotFoundError) as exc:
        conflict = conflict_if_replaced(file_io, ts, exc, what)
        if conflict is exc:
            raise
        raise conflict from exc


def conflict_if_replaced(
    file_io: FileIO, ts: TableSchema, exc: BaseException, what: str
) -> BaseException:
    """``exc`` as a conflict where it is a data file that the latest snapshot no longer
    names, or a snapshot expired meanwhile; otherwise ``exc`` itself."""
    if isinstance(exc, SnapshotNotFoundError):
        return _expired_meanwhile(file_io, exc, what)
    if not isinstance(exc, FileNotFoundError) or not exc.filename:
        return exc
    root = file_io.root.rstrip("/")
    missing = str(exc.filename)
    if not missing.startswith(root + "/"):
        return exc
    rel = posixpath.relpath(missing, root)
    latest = SnapshotManager(file_io).latest()
    if latest is None:
        return exc
    live = live_files_of(file_io, latest.base_manifests, ts, ()).column("path").to_pylist()
    if rel in set(live):
        return exc
    return CommitConflictError(
        f"{rel}, which this {what} read, was replaced by a concurrent commit (up to snapshot "
        f"{latest.id}) and expired meanwhile; re-run it",
        expected=None,
        actual=latest.id,
    )


def _expired_meanwhile(file_io: FileIO, exc: SnapshotNotFoundError, what: str) -> BaseException:
    earliest = SnapshotManager(file_io).earliest_id()
    if exc.snapshot_id is None or earliest is None or exc.snapshot_id >= earliest:
        return exc
    return CommitConflictError(
        f"snapshot {exc.snapshot_id}, which this {what} read, was expired meanwhile (after "
        f"later commits); re-run it",
        expected=exc.snapshot_id,
        actual=None,
    )


def check_files_kept(
    file_io: FileIO,
    ts: TableSchema,
    base: Snapshot | None,
    latest: Snapshot,
    paths: set[str],
    what: str,
) -> None:
    """A commit after ``base`` that removed a file the operation read: its rows may have
    moved (an overwrite, a merge, a delete, a compaction), so what the operation decided
    from them is stale. Run on each commit attempt (``CommitRequest.conflict_check``)."""
    from raylake.table.commit import snapshots_after

    manager = SnapshotManager(file_io)
    for snap in snapshots_after(manager, base.id if base else 0, latest, what):
        entries = read_entries(file_io, snap.delta_manifests, ts, ())
        removed = pc.filter(entries.column("path"), pc.not_equal(entries.column("kind"), ADD))
        hit = paths.intersection(removed.to_pylist())
        if hit:
            raise CommitConflictError(
                f"snapshot {snap.id} ({snap.commit_kind}) removed {len(hit)} file(s) the "
                f"{what} read, e.g. {sorted(hit)[0]}",
                expected=base.id if base else 0,
                actual=latest.id,
            )
