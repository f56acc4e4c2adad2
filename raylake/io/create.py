"""Create-if-absent whose outcome is checked, and the local atomic writes under it.

A create may fail after the store carried it out: its answer lost (a 500 to a request
that was done, a dropped connection), or a client's own retry of it told "exists"
(botocore retries a 500 into S3's 412). Neither means another writer won. So where
the answer is an error, or "exists" from a client that retries by itself, the file is
read back, and holding exactly the bytes this call wrote means this call created it
(callers make the bytes unique: a snapshot holds its commit id). docs/format.md,
section 6.6.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable

from raylake.errors import CommitStateUnknownError, StorageRetriesExhaustedError
from raylake.io.retry import RetryPolicy, is_transient
from raylake.io.temp_names import temp_path

logger = logging.getLogger(__name__)

# What a read-back gives where the file could not be read (after the retry bound).
UNREADABLE = object()


def create_checked(
    create_once: Callable[[], bool],
    read_back: Callable[[], bytes | object | None],
    data: bytes,
    path: str,
    policy: RetryPolicy,
    *,
    final_exists: bool,
    gone_since: Callable[[], bool] | None = None,
    replaced_since: Callable[[bytes], bool] | None = None,
) -> bool:
    """True where the file holds ``data`` because of this call, False where another
    writer's file is there. ``create_once`` tries the create once (False: exists);
    ``read_back`` gives the bytes there, None (absent) or UNREADABLE. With
    ``final_exists``, a first "exists" is taken as is (no retry inside the client).
    ``gone_since``: whether a file found absent after a try that may have created it
    may have been created and deleted since (a snapshot file that an expiration
    removed): it is then neither created again, which would bring back a file the
    store deleted, nor taken as another writer's, and the outcome is unknown.
    ``replaced_since(held)``: the same where the file found holds another writer's bytes,
    which may have been created after this call's file was deleted (a slow commit's
    snapshot at an id that expiration freed).

    Raises StorageRetriesExhaustedError where every try failed and the file is absent
    (it was not created), CommitStateUnknownError where that cannot be told.
    """
    error: BaseException | None = None
    for attempt in range(policy.max_attempts):
        try:
            if create_once():
                return True
            if error is None and final_exists:
                return False  # no earlier try of ours, no retry inside the client
        except BaseException as exc:
            if not is_transient(exc):
                raise
            error = exc
            logger.info("create of %s failed (%r); reading it back", path, exc)
        held = read_back()
        if isinstance(held, bytes):
            return _held_is_ours(held, data, replaced_since, path, attempt + 1, error)
        if _may_be_gone(gone_since):  # a try again could bring a deleted file back
            raise CommitStateUnknownError(path, attempt + 1, error or FileExistsError(path))
        if held is UNREADABLE:
            error = error or OSError(f"could not read back {path}")
        elif error is None:  # told "exists", yet absent: deleted meanwhile (expired)
            return False
        policy.wait(attempt)
    if _is_timeout(error):  # a request still in flight may land after any look
        raise CommitStateUnknownError(path, policy.max_attempts, error)
    held = read_back()
    if held is None and _may_be_gone(gone_since):
        raise CommitStateUnknownError(path, policy.max_attempts, error)
    if held is None:
        assert error is not None
        raise StorageRetriesExhaustedError("create", path, policy.max_attempts, error)
    if not isinstance(held, bytes):  # UNREADABLE
        raise CommitStateUnknownError(path, policy.max_attempts, error)
    return _held_is_ours(held, data, replaced_since, path, policy.max_attempts, error)


def _held_is_ours(
    held: bytes,
    data: bytes,
    replaced_since: Callable[[bytes], bool] | None,
    path: str,
    attempts: int,
    error: BaseException | None,
) -> bool:
    """After a try that may have created the file: True where it holds ``data``, False
    where another writer's file is there; unknown where that one may have replaced ours."""
    if held == data:
        return True
    if replaced_since is not None and _may(lambda: replaced_since(held)):
        raise CommitStateUnknownError(path, attempts, error or FileExistsError(path))
    return False


def _may_be_gone(gone_since: Callable[[], bool] | None) -> bool:
    """``gone_since()``, True where it cannot be told (its look failed too)."""
    return gone_since is not None and _may(gone_since)


def _may(look: Callable[[], bool]) -> bool:
    """``look()``, True where it cannot be told (the look failed too)."""
    try:
        return look()
    except Exception:
        logger.info("could not tell whether the file was deleted since", exc_info=True)
        return True


def _is_timeout(error: BaseException | None) -> bool:
    return error is not None and any("Timeout" in cls.__name__ for cls in type(error).__mro__)


def replace_write(path: str, data: bytes) -> None:
    """Write then rename, so a reader never sees half a file (nor a failed write's tmp)."""
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def link_create(path: str, data: bytes) -> bool:
    """Create-if-absent on local files: a whole, synced temporary file hard-linked into
    place (the link fails if the name exists; a reader never sees a partial file)."""
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
