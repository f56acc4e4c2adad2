"""The files of commit messages that will never be committed: deleted, and remembered.

A commit that fails deletes the data files its messages name, so that nothing is left
half-written (docs/decisions.md). The messages themselves stay in the caller's hands,
and committing them again would make a snapshot of files that no longer exist: every
later read of the table would fail. So the paths deleted here are remembered for the
life of the process, and a commit of messages naming any of them is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from raylake.caching import LruCache
from raylake.errors import CommitFailedError
from raylake.format.manifest import DataFile
from raylake.io import FileIO
from raylake.table.writer import CommitMessage

# File names are unique (a UUID each), so a path names one file of one table. Failed
# commits are rare; the bound only keeps a process that fails forever from growing.
_deleted: LruCache[str, bool] = LruCache(1 << 16)


def _written(messages: Iterable[CommitMessage]) -> list[DataFile]:
    return [f for m in messages for f in (*m.new_files, *m.changelog_files)]


def abort_messages(file_io: FileIO, messages: Iterable[CommitMessage]) -> None:
    """Delete the files of commit messages that will never be committed."""
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
