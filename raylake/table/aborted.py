"""The files of commit messages that will never be committed: deleted, and remembered.

A commit that fails deletes the data files its messages name, so that nothing is left
half-written (docs/decisions.md). The messages themselves stay in the caller's hands,
and committing them again would make a snapshot of files that no longer exist: every
later read of the table would fail. So the paths deleted here are remembered for the
life of the process, and a commit of messages naming any of them is refused.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable

from raylake.caching import LruCache
from raylake.errors import CommitFailedError, CommitStateUnknownError, StorageFullError
from raylake.format.manifest import DataFile
from raylake.io import FileIO
from raylake.table.writer import CommitMessage

# File names are unique (a UUID each), so a path names one file of one table. Failed
# commits are rare; the bound only keeps a process that fails forever from growing.
_deleted: LruCache[str, bool] = LruCache(1 << 16)


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
    paths = [f.path for f in _written(messages)]
    file_io.delete_quietly(paths)
    for path in paths:
        _deleted.put(path, True)


def check_not_aborted(messages: Iterable[CommitMessage]) -> None:
    """Refuse messages whose files a failed commit deleted (before anything is written)."""
    gone = [f.path for f in _written(messages) if _deleted.peek(f.path)]
    if gone:
        raise CommitFailedError(
            f"{len(gone)} data file(s) of these commit messages, e.g. {gone[0]!r}, were "
            "deleted when an earlier commit of them failed; write the data again and commit "
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
