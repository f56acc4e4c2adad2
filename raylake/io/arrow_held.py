"""Python objects that pyarrow's threads hold, and the interpreter's exit waiting for them.

pyarrow reads a file of an fsspec store (``memory://``, S3 through s3fs, GCS...) through
the Python file object it is given (raylake/io/read_errors.py): each read returns Python
bytes that pyarrow keeps as a buffer, and gives back under the GIL whenever its last
holder lets go. A scan's state is often let go on one of pyarrow's threads just after the
scan has returned (a Parquet reader's cache of read ranges, torn down with the scan's
generators). Where the interpreter has begun to exit by then, that thread cannot take the
GIL: Python ends it with ``pthread_exit``, whose unwinding through pyarrow's C++ aborts
the process ("terminate called without an active exception"). A script that read 16
files of a ``memory://`` table on four threads and exited aborted about once in 60 runs,
with pyarrow alone as well as through raylake.

So every file object and every read's bytes handed to pyarrow are counted while they
live (:func:`held_by_arrow`, a weak reference each), and the interpreter's exit waits
until pyarrow has given them all back (an ``atexit`` hook, which runs after the threads
of ``concurrent.futures`` pools, the scans' own, have been joined). Two details keep a
thread of pyarrow from running Python code once the count reached zero:

- the count is taken down by a C function (``SimpleQueue.put``), not Python code that
  could hand the GIL to the exiting thread in its middle;
- what a counted object holds whose release runs Python code (an fsspec file's
  ``__del__``) is kept here, and let go by a Python thread later (``keep=``).

Objects that Python code itself still holds at the exit (an iterator of a read kept in a
global) are not given back until the interpreter clears them: the wait collects garbage
first, and gives up after :data:`EXIT_WAIT_SECONDS`; the interpreter then lets them go on
its own thread, which is safe.
"""

from __future__ import annotations

import atexit
import gc
import time
import weakref
from queue import Empty, SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

# The longest the exit waits for objects Python code holds (module docstring): pyarrow's
# threads give theirs back within microseconds of a scan's end.
EXIT_WAIT_SECONDS = 2.0

# id of the weak reference -> it, and what the object holds that must be let go on a
# Python thread (or None). By id: a weak reference hashes as its object, and a view of
# bytes hashes its contents.
_held: dict[int, tuple[weakref.ref[Any], Any]] = {}
# The weak references of objects let go, put there by a C function (module docstring).
_released: SimpleQueue[weakref.ref[Any]] = SimpleQueue()


def held_by_arrow(obj: T, keep: Any = None) -> T:
    """``obj``, counted until it is let go; ``keep`` stays alive until then and is let
    go by a Python thread (the next call here, or the exit's wait)."""
    _forget_released()
    ref = weakref.ref(obj, _released.put)
    _held[id(ref)] = (ref, keep)
    return obj


def objects_held() -> int:
    """How many counted objects are still alive (tests)."""
    _forget_released()
    return len(_held)


def _forget_released() -> None:
    while True:
        try:
            ref = _released.get_nowait()
        except Empty:
            return
        _held.pop(id(ref), None)


def wait_until_released(timeout: float) -> bool:
    """Wait until every counted object was let go, at most ``timeout`` seconds; whether
    they all were. The GIL is free while it waits, for the threads that let them go."""
    deadline = time.monotonic() + timeout
    _forget_released()
    while _held:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            ref = _released.get(timeout=left)
        except Empty:
            return False
        _held.pop(id(ref), None)
        _forget_released()
    return True


def _wait_at_exit() -> None:
    if objects_held():
        gc.collect()  # iterators of reads abandoned in reference cycles let go of files
        wait_until_released(EXIT_WAIT_SECONDS)


atexit.register(_wait_at_exit)
