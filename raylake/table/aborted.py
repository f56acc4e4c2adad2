"""The files of commit messages that will never be committed: deleted, and refused.

A commit that fails deletes the data files its messages name, so that nothing is left
half-written (docs/decisions.md). The messages themselves stay in the caller's hands
(pickled, in Ray's object store, in another process), and committing them again would
make a snapshot of files that no longer exist: every later read of the table would
fail. So a commit of messages checks that every file they add exists, in whatever
process it runs and however long after the failure: the deleted files are the record,
and no cache of this process can forget it. It used to be a per-process LRU of 65,536
deleted paths, which another process, or the same one after enough failures, did not
see. The check also refuses messages whose files ``writer.abort()`` or
``remove_orphan_files`` deleted. It costs one existence check per added file (16 at a
time on a remote store), beside the write of the file itself.

Not covered: a commit that races the failing commit's own cleanup (two processes
committing the same messages at the same moment), which no check before the snapshot
is created can see.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from raylake.errors import CommitFailedError, CommitStateUnknownError, StorageFullError
from raylake.format.manifest import DataFile
from raylake.io import FileIO
from raylake.table.writer import CommitMessage

# Existence checks in flight at once on a remote store (one request each).
_CHECKS_IN_FLIGHT = 16


def _written(messages: Iterable[CommitMessage]) -> list[DataFile]:
    return [f for m in messages for f in (*m.new_files, *m.changelog_files)]


def abort_messages(
    file_io: FileIO, messages: Iterable[CommitMessage], error: BaseException | None = None
) -> None:
    """Delete the files of commit messages that will never be committed; nothing where
    ``error`` (the commit's failure) leaves it unknown whether they were committed: a
    visible snapshot may name them (docs/reliability.md)."""
    if outcome_unknown(error):
        return
    file_io.delete_quietly([f.path for f in _written(messages)])


def check_not_aborted(file_io: FileIO, messages: Iterable[CommitMessage]) -> None:
    """Refuse messages whose files are gone, deleted when an earlier commit of them
    failed (in any process) or by an abort (before anything is written)."""
    paths = [f.path for f in _written(messages)]
    if file_io.is_remote and len(paths) > 1:
        with ThreadPoolExecutor(min(_CHECKS_IN_FLIGHT, len(paths))) as pool:
            present = list(pool.map(file_io.exists, paths))
    else:
        present = [file_io.exists(p) for p in paths]
    gone = [p for p, here in zip(paths, present) if not here]
    if gone:
        raise CommitFailedError(
            f"{len(gone)} data file(s) of these commit messages, e.g. {gone[0]!r}, do not "
            "exist: they were deleted when an earlier commit of them failed (or by the "
            "writer's abort(), or by remove_orphan_files); write the data again and commit "
            "the new messages"
        )


def outcome_unknown(error: BaseException | None) -> bool:
    """Whether a commit that raised ``error`` may have been committed all the same."""
    return isinstance(error, CommitStateUnknownError)


def raise_if_full(uri: str, error: BaseException) -> None:
    """Raise :class:`StorageFullError` for ``error`` if it is the store's "no space left"
    (a full disk, a quota): called once the written files are deleted."""
    if isinstance(error, StorageFullError) or not isinstance(error, OSError):
        return
    if error.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(error):
        raise StorageFullError(uri, error) from error
