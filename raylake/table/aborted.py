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
time on a remote store), beside the write of the file itself; :class:`FilesCheck` runs
them while the committer reads the latest snapshot and writes its manifests, and the
commit waits for them only before its create, so that on an object store they add
round trips only where they outlast that work (docs/benchmarks.md). Commits of files
written in the same call (``Table.write``, ``delete``, merges, compaction) skip it: no
failure or abort can have come between the write and the commit.

Not covered: a commit that races the failing commit's own cleanup (two processes
committing the same messages at the same moment), which no check before the snapshot
is created can see.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from raylake.errors import (
    CommitFailedError,
    CommitStateUnknownError,
    RaylakeError,
    StorageFullError,
)
from raylake.format.manifest import DataFile
from raylake.io import FileIO
from raylake.io.read_errors import retries_exhausted
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


class FilesCheck:
    """Refuses messages whose files are gone, deleted when an earlier commit of them
    failed (in any process) or by an abort (before anything is written): the existence
    checks start at once, in threads of their own, and :meth:`wait` raises the refusal
    (``CommitFailedError``). The files of refused messages are left alone: the caller
    may commit the messages among them that are whole."""

    def __init__(self, file_io: FileIO, messages: Iterable[CommitMessage]) -> None:
        self._paths = [f.path for f in _written(messages)]
        threads = min(_CHECKS_IN_FLIGHT if file_io.is_remote else 1, len(self._paths))
        self._pool = ThreadPoolExecutor(max(threads, 1), thread_name_prefix="raylake-exists")
        self._present = [self._pool.submit(file_io.exists, p) for p in self._paths]
        self._pool.shutdown(wait=False)  # the threads end once the checks are done
        self._done = False
        self._error: BaseException | None = None

    def error(self) -> BaseException | None:
        """Once every check is done: the refusal, or the error a check raised (the store
        could not be asked); None where every file exists. The same object each call."""
        if not self._done:
            self._error, self._done = self._outcome(), True
        return self._error

    def _outcome(self) -> BaseException | None:
        try:
            gone = [p for p, here in zip(self._paths, self._present) if not here.result()]
        except Exception as exc:
            return exc
        if not gone:
            return None
        return CommitFailedError(
            f"{len(gone)} data file(s) of these commit messages, e.g. {gone[0]!r}, do not "
            "exist: they were deleted when an earlier commit of them failed (or by the "
            "writer's abort(), or by remove_orphan_files); write the data again and commit "
            "the new messages"
        )

    def wait(self) -> None:
        error = self.error()
        if error is not None:
            raise error


def outcome_unknown(error: BaseException | None) -> bool:
    """Whether a commit that raised ``error`` may have been committed all the same."""
    return isinstance(error, CommitStateUnknownError)


def raise_named(file_io: FileIO, error: BaseException) -> None:
    """Raise ``error`` as raylake names it, if it is a store's failure that pyarrow's
    client raised as a bare ``OSError``: :class:`StorageFullError` for "no space left"
    (a full disk, a quota), :class:`StorageRetriesExhaustedError` for a data file upload
    or read that failed past the retry bound. Called once the written files are deleted."""
    if isinstance(error, RaylakeError) or not isinstance(error, OSError):
        return
    if error.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(error):
        raise StorageFullError(file_io.uri, error) from error
    named = retries_exhausted(error, file_io.retry_policy.max_attempts)
    if named is not None:
        raise named from error
