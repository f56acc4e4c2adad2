"""Reading many splits with a window of reads in flight, in order, in bounded memory.

On an object store each split's read waits on round trips (a footer, then its row
groups); reading splits one after another adds those waits up. :func:`read_ahead`
keeps up to ``window`` split reads in flight on threads (pyarrow's reads and decoding
release the GIL) and yields each split's rows in the order given, as soon as it and
every split before it are read. At most ``window`` splits are read and not yet taken
by the consumer, so memory holds a window, never the whole plan (issue 16).

The training loaders and any other consumer of pieces (``LakeSource.read_piece``)
use it with ``FileIO.files_in_flight`` as the window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from raylake.errors import InvalidArgumentError

T = TypeVar("T")
R = TypeVar("R")
_END = object()


def read_ahead(read: Callable[[T], R], items: Iterable[T], window: int) -> Iterator[R]:
    """``read(item)`` for each item, in order, up to ``window`` of them in flight.

    Closing the iterator early (``break``, an exception) cancels reads not yet started
    and waits for running ones, so no thread outlives it. A read's exception is raised
    when its result is reached.
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidArgumentError("window", window, "an int >= 1")
    todo = iter(items)
    if window == 1:
        yield from map(read, todo)
        return
    pool = ThreadPoolExecutor(window, thread_name_prefix="raylake-read-ahead")
    pending: deque[Future[R]] = deque()
    try:
        for item in todo:
            pending.append(pool.submit(read, item))
            if len(pending) == window:
                break
        while pending:
            first = pending.popleft()
            following = next(todo, _END)
            if following is not _END:
                pending.append(pool.submit(read, following))  # type: ignore[arg-type]
            yield first.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
