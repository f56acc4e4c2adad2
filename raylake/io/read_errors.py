"""Data reads (and uploads) whose store kept failing, named as raylake names them.

On S3, data files are read by pyarrow's own S3 client, which retries transient errors
itself up to the retry bound (raylake/io/native.py). After the bound it raises a bare
``OSError`` whose message holds the object and the AWS error code: here that becomes a
:class:`~raylake.errors.StorageRetriesExhaustedError` naming the operation, the object
and the tries, as every other storage request says it. Errors that are not transient
(a missing object, a denied request, a corrupt file) pass through unchanged.

On stores pyarrow reads through fsspec (:class:`RetriedReads`), the opens of data files
and the reads of their bytes are tried up to the bound as FileIO tries metadata reads,
and raise the named error after it themselves; so do uploads through s3fs, whose
requests botocore retried.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from raylake.errors import RaylakeError, StorageAccessDeniedError, StorageRetriesExhaustedError
from raylake.io.arrow_held import held_by_arrow
from raylake.io.retry import RetryPolicy, call_with_retries

T = TypeVar("T")

# The AWS SDK's error codes (as pyarrow prints them) that its retry strategy retries.
_TRANSIENT = frozenset(
    {"SLOW_DOWN", "INTERNAL_FAILURE", "SERVICE_UNAVAILABLE", "THROTTLING",
     "REQUEST_TIMEOUT", "NETWORK_CONNECTION"}
)  # fmt: skip
# The AWS SDK's error codes for a request the store refused: credentials it does not
# know, or a policy that denies it (an answer without a body: its status, 403).
_DENIED = frozenset(
    {"ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "EXPIRED_TOKEN"}
)
# The requests of pyarrow's uploads of data files (a file opened for writing).
_UPLOADS = frozenset(
    {"PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"}
)  # fmt: skip
# The AWS SDK's error codes for an object that is not there (a GET's answer: NoSuchKey; a
# HEAD's, without a body: its status, 404).
_MISSING = frozenset({"NO_SUCH_KEY", "RESOURCE_NOT_FOUND"})
_AWS = re.compile(
    r"AWS Error (?P<code>[A-Z_]+)(?: \(HTTP status (?P<status>\d+)\))? during (?P<operation>\w+)"
    r" operation"
)
# pyarrow names the object as 'bucket/key' (opening a file) or as key and bucket.
_QUOTED = re.compile(r"'([^']+)'")
_KEY_IN_BUCKET = re.compile(r"key '(?P<key>[^']*)' in bucket '(?P<bucket>[^']*)'")


_PATH_MARK = "raylake_data_file"


@contextmanager
def reading(path: str) -> Iterator[None]:
    """Mark an OSError raised while reading the data file ``path`` with it, for the
    error that names the file (:func:`named_store_errors`, outside the reads' retries,
    which must see pyarrow's error as it is). pyarrow's errors of a read of an open
    file (a ranged GET answered 500) do not name it."""
    try:
        yield
    except OSError as exc:
        if getattr(exc, _PATH_MARK, None) is None:
            setattr(exc, _PATH_MARK, path)
        raise


def _marked(exc: BaseException, path: str | None) -> str | None:
    return getattr(exc, _PATH_MARK, None) or path


def retries_exhausted(
    exc: BaseException, attempts: int, path: str | None = None
) -> StorageRetriesExhaustedError | StorageAccessDeniedError | None:
    """The named error for pyarrow's ``exc`` after ``attempts`` tries, or None where
    ``exc`` is neither a transient store error nor a refusal (it is then raised as it
    is). ``path``: the object being read, where pyarrow's message may not name it (a
    read of an open file)."""
    if type(exc) is not OSError:  # FileNotFoundError, PermissionError, ...: final
        return None
    message = str(exc)
    aws = _AWS.search(message)
    if aws is None:
        return None
    path = _marked(exc, path)
    denied = _denied(aws["code"], aws["status"])
    if not denied and not _transient(aws["code"], aws["status"]):
        return None
    before = message[: aws.start()]
    in_bucket = _KEY_IN_BUCKET.search(before)
    quoted = _QUOTED.findall(before)
    if in_bucket is not None:
        path = f"{in_bucket['bucket']}/{in_bucket['key']}"
    else:
        path = quoted[-1] if quoted else path or "a data file"
    operation = f"{'write' if aws['operation'] in _UPLOADS else 'read'} ({aws['operation']})"
    if denied:  # a PermissionError, as s3fs raises it for metadata requests
        return StorageAccessDeniedError(operation, path, exc)
    if _OVERFLOWED in message:  # the SDK's words blame its buffer, not the store's answer
        exc = OSError(f"{message} (the store answered a small ranged read with an error)")
    return StorageRetriesExhaustedError(operation, path, attempts, exc)


# The AWS SDK writes the body of every answer into the buffer of a ranged read, an error's
# too: an error's XML (a 503 SlowDown, a 500) larger than a small range (a column chunk of
# a few dozen bytes) overflows it, and the SDK reports INTERNAL_FAILURE "Failed to flush
# response stream", a failure of its own that its retry strategy does not retry. One
# transient answer then failed the read at once.
_OVERFLOWED = "Failed to flush response stream"


def _overflowed(exc: OSError) -> bool:
    """Whether pyarrow's S3 client failed a request on an answer that overflowed its
    buffer: the failure its own retry strategy does not retry."""
    return type(exc) is OSError and _OVERFLOWED in str(exc)


def reads_retried(fn: Callable[[], T], policy: RetryPolicy) -> T:
    """``fn()`` (a read of whole data files, which a retry repeats harmlessly), tried again
    up to ``policy.max_attempts`` times where pyarrow's S3 client failed it on an error
    answer that overflowed its buffer (the request the client did not retry)."""
    for attempt in range(policy.max_attempts):
        try:
            return fn()
        except OSError as exc:
            if not _overflowed(exc):
                raise
            if attempt == policy.max_attempts - 1:
                raise
        policy.wait(attempt)
    raise AssertionError("unreachable")


def batches_retried(
    read: Callable[[], Iterator[pa.RecordBatch]], policy: RetryPolicy
) -> Iterator[pa.RecordBatch]:
    """The batches of ``read()`` (a read of data files, whose rows come in the same order
    each time), read again from the start up to ``policy.max_attempts`` times where
    pyarrow's S3 client failed a request without retrying it (:func:`reads_retried`);
    the rows already handed out are skipped, so none is repeated or lost. Streamed
    reads (``to_batches``, Ray read tasks, stream plans, a delete by keys) failed at
    once on one such answer, which whole-table reads already retried."""
    handed = 0
    for attempt in range(policy.max_attempts):
        batches: Iterator[pa.RecordBatch] | None = None
        try:
            batches = read()  # a read may start at once (the first pieces, read ahead)
            skip = handed
            for batch in batches:
                if skip and skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                batch = batch.slice(skip) if skip else batch
                skip = 0
                yield batch
                handed += batch.num_rows
            return
        except OSError as exc:
            if not _overflowed(exc):
                raise
            if attempt == policy.max_attempts - 1:
                raise
        finally:
            close = None if batches is None else getattr(batches, "close", None)
            if close is not None:  # stopped early or failed: its files and threads go now
                close()
        policy.wait(attempt)


def _denied(code: str, status: str | None) -> bool:
    return code in _DENIED or (code == "UNKNOWN" and status == "403")


def _transient(code: str, status: str | None) -> bool:
    """Whether the AWS SDK's error is one its retry strategy retries. An answer without a
    body (to a HEAD: the status alone) has no code: the SDK retries a 5xx of it too."""
    return code in _TRANSIENT or (code == "UNKNOWN" and status is not None and status[0] == "5")


def missing_object(exc: BaseException, path: str | None = None) -> FileNotFoundError | None:
    """pyarrow's error for a data file that is not on the store as a FileNotFoundError
    whose ``filename`` is the file (``bucket/key`` on S3), as a missing local file is, or
    None for any other error. pyarrow's S3 client raises a bare ``OSError`` ("AWS Error
    NO_SUCH_KEY during GetObject operation") or a FileNotFoundError without a filename:
    the code that takes a file gone meanwhile for a concurrent commit's (an expiration
    of replaced files) looks for both."""
    if isinstance(exc, RaylakeError) or (
        isinstance(exc, FileNotFoundError) and exc.filename is not None
    ):
        return None
    path = _marked(exc, path)
    message = str(exc)
    if type(exc) is OSError:
        aws = _AWS.search(message)
        if aws is None or not (
            aws["code"] in _MISSING or (aws["code"] == "UNKNOWN" and aws["status"] == "404")
        ):
            return None
        before = message[: aws.start()]
    elif isinstance(exc, FileNotFoundError):
        before = message
    else:
        return None
    in_bucket = _KEY_IN_BUCKET.search(before)
    quoted = _QUOTED.findall(before)
    if in_bucket is not None:
        path = f"{in_bucket['bucket']}/{in_bucket['key']}"
    elif quoted:
        path = quoted[0]
    if path is None:
        return None
    return FileNotFoundError(errno.ENOENT, f"{path!r} is not on the store ({message})", path)


@contextmanager
def access_denied_named(operation: str, path: str) -> Iterator[None]:
    """A request the store refused (s3fs's PermissionError) as StorageAccessDeniedError
    naming the operation and the object."""
    try:
        yield
    except PermissionError as exc:
        if isinstance(exc, RaylakeError):  # MissingCredentialsError: named already
            raise
        raise StorageAccessDeniedError(operation, path, exc) from exc


@contextmanager
def named_store_errors(attempts: int, path: str | None = None) -> Iterator[None]:
    """Raise pyarrow's transient store errors inside (reads and uploads of data files) as
    StorageRetriesExhaustedError, and a missing data file as a FileNotFoundError naming
    it (:func:`missing_object`); ``path`` names the file where pyarrow does not."""
    try:
        yield
    except OSError as exc:
        named: OSError | None = retries_exhausted(exc, attempts, path)
        if named is None:
            named = missing_object(exc, path)
        if named is None:
            raise
        raise named from exc


def named_batches(batches: Iterator[T], attempts: int) -> Iterator[T]:
    """``batches``, with pyarrow's transient store errors named (see named_store_errors)."""
    with named_store_errors(attempts):
        yield from batches


class RetriedReads(pafs.FSSpecHandler):  # type: ignore[misc]
    """An fsspec filesystem served to pyarrow whose reads of files are tried as FileIO
    tries metadata reads: the opens, and each read of bytes from an open file, up to
    ``policy.max_attempts`` times while they fail with an error that ``retry_here``
    says the client did not retry itself (every transient error, or only an answer cut
    short where the client retries by itself: s3fs reads a body after botocore's
    retries); then StorageRetriesExhaustedError naming the read, the file and the
    tries. A read tried again starts from the position the failed one started from, so
    a retry never skips or repeats bytes."""

    def __init__(
        self,
        fs: Any,
        policy: RetryPolicy,
        retry_here: Callable[[BaseException], bool],
        client_retries: bool = False,
    ) -> None:
        super().__init__(fs)
        self.policy = policy
        self.retry_here = retry_here
        self.client_retries = client_retries

    def _retried(self, fn: Callable[[], T], path: str) -> T:
        policy = self.policy
        with access_denied_named("read", path):
            return call_with_retries(fn, policy, "read", path, policy.max_attempts, self.retry_here)

    def open_input_file(self, path: str) -> Any:
        # No isfile() first, as pyarrow's handler asks: opening to read looks the file up
        # (its size), and raises FileNotFoundError where it is missing; a second request
        # per data file would cost a round trip on an object store.
        opened = self._retried(lambda: self.fs.open(path, mode="rb"), path)
        # pyarrow may let go of the file on one of its threads (raylake/io/arrow_held.py).
        return pa.PythonFile(held_by_arrow(_RetriedFile(opened, self, path), keep=opened), mode="r")

    def open_input_stream(self, path: str) -> Any:
        return self.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any = None) -> Any:
        file = self.fs.open(path, mode="wb")
        if not self.client_retries:  # FileIO never retries a data file's write
            return pa.PythonFile(file, mode="w")
        return pa.PythonFile(_NamedUpload(file, self.policy, path), mode="w")


class _RetriedFile:
    """An open fsspec file whose reads are retried from where they started."""

    def __init__(self, file: Any, handler: RetriedReads, path: str) -> None:
        self._file = file
        self._handler = handler
        self._path = path

    def read(self, size: int = -1) -> memoryview:
        start = self._file.tell()

        def once() -> bytes:
            self._file.seek(start)
            data: bytes = self._file.read(size)
            return data

        # A view, which a weak reference can count: pyarrow keeps the bytes as a buffer
        # and may give it back on one of its threads (raylake/io/arrow_held.py).
        return held_by_arrow(memoryview(self._handler._retried(once, self._path)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class _NamedUpload:
    """An fsspec file being uploaded by a client that retried each of its requests up to
    the bound (s3fs): a transient error after that is StorageRetriesExhaustedError naming
    the upload, the file and the tries, as pyarrow's own uploads are named, not s3fs's
    bare ``OSError`` ("[Errno 121] We encountered an internal error")."""

    def __init__(self, file: Any, policy: RetryPolicy, path: str) -> None:
        self._file = file
        self._policy = policy
        self._path = path

    def _named(self, fn: Callable[[], T]) -> T:
        with access_denied_named("write", self._path):
            return call_with_retries(fn, self._policy, "write", self._path, 1)

    def write(self, data: Any) -> int:
        written: int = self._named(lambda: self._file.write(data))
        return written

    def flush(self) -> None:
        self._named(self._file.flush)

    def close(self) -> None:
        self._named(self._file.close)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)
