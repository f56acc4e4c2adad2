"""How often storage requests are tried, and which errors are worth another try.

One :class:`RetryPolicy` per FileIO, from the ``raylake_retry`` storage option
(docs/object-stores.md, "Retries"). Where the store's client retries by itself
(botocore's retry modes for s3fs, pyarrow's S3 retry strategy for data files), the
policy is handed to the client and FileIO tries once; elsewhere (local files,
memory://, other fsspec stores) FileIO's own loop retries. Either way, after the
bound the error names the operation, the object and the number of tries
(:class:`~raylake.errors.StorageRetriesExhaustedError`).
"""

from __future__ import annotations

import errno
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from raylake.arguments import integer, is_number
from raylake.errors import InvalidOptionError, StorageRetriesExhaustedError

T = TypeVar("T")
OPTION = "raylake_retry"
# Errors that another try cannot mend: the answer is final.
_FINAL = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
          PermissionError)  # fmt: skip
_FINAL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` tries of a request in all (the first included); between tries a
    random wait of up to ``backoff_s * 2**try``, at most ``max_backoff_s``."""

    max_attempts: int = 5
    backoff_s: float = 0.05
    max_backoff_s: float = 2.0

    def __post_init__(self) -> None:
        # numpy's numbers (a config read with numpy) as the Python ones they are.
        attempts = integer(self.max_attempts)
        if attempts is None or attempts < 1:
            raise InvalidOptionError(
                f"{OPTION}.max_attempts", self.max_attempts, "must be an int >= 1"
            )
        object.__setattr__(self, "max_attempts", attempts)
        for name in ("backoff_s", "max_backoff_s"):
            value = getattr(self, name)
            # NaN passed a "< 0" test and failed the first retry's sleep; infinity slept.
            if not is_number(value) or not 0 <= value < math.inf:
                raise InvalidOptionError(f"{OPTION}.{name}", value, "must be a finite number >= 0")
            object.__setattr__(self, name, float(value))

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> RetryPolicy:
        given = options.get(OPTION) or {}
        if not isinstance(given, Mapping):
            raise InvalidOptionError(OPTION, given, "must be a dict of retry settings")
        unknown = sorted(set(given) - {"max_attempts", "backoff_s", "max_backoff_s"})
        if unknown:
            raise InvalidOptionError(
                OPTION, given, f"unknown keys {unknown}; use max_attempts, backoff_s, max_backoff_s"
            )
        return cls(**given)

    def wait(self, attempt: int) -> None:
        """Sleep before try ``attempt + 1`` (full jitter, so retrying writers spread out)."""
        time.sleep(random.uniform(0, min(self.max_backoff_s, self.backoff_s * 2**attempt)))


def is_transient(exc: BaseException) -> bool:
    """Whether another try of the same request may succeed."""
    if isinstance(exc, _FINAL):
        return False
    if isinstance(exc, OSError) and exc.errno in _FINAL_ERRNOS:
        return False
    if isinstance(exc, (OSError, TimeoutError)):
        return True
    # botocore's connection errors and aiohttp's are not OSErrors; s3fs passes them on.
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & _CLIENT_TRANSIENT)


_CLIENT_TRANSIENT = frozenset(
    {"ConnectionError", "HTTPClientError", "ClientPayloadError", "ServerDisconnectedError",
     "ReadTimeoutError", "ConnectTimeoutError", "ResponseStreamingError"}
)  # fmt: skip


# An answer whose body was cut short (the connection dropped in the middle of it). A
# client that retries by itself retries the request until its answer's headers are in;
# the body is read after its retry loop, so a cut is not retried there (s3fs, botocore).
_CUT_SHORT = frozenset(
    {"ClientPayloadError", "IncompleteReadError", "ResponseStreamingError", "IncompleteRead"}
)  # fmt: skip


def is_cut_short(exc: BaseException) -> bool:
    """Whether ``exc`` is an answer cut short, which a store's own client does not retry."""
    return bool({cls.__name__ for cls in type(exc).__mro__} & _CUT_SHORT)


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    operation: str,
    path: str,
    attempts: int,
    retry_here: Callable[[BaseException], bool] = is_transient,
) -> T:
    """``fn()`` up to ``attempts`` times while it fails transiently with an error that
    ``retry_here`` says to retry here (the others the store's client retried already);
    after the last try a :class:`StorageRetriesExhaustedError` naming ``operation`` and
    ``path``, and ``policy.max_attempts`` tries (the client's own retries included)."""
    for attempt in range(attempts):
        try:
            return fn()
        except BaseException as exc:
            if not is_transient(exc) or isinstance(exc, StorageRetriesExhaustedError):
                raise
            if attempt == attempts - 1 or not retry_here(exc):
                raise StorageRetriesExhaustedError(
                    operation, path, policy.max_attempts, exc
                ) from exc
            policy.wait(attempt)
    raise AssertionError("unreachable")
