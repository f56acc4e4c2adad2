"""Read-ahead for the training loaders, on threads of the consuming process (issue 16).

The stages that keep a trainer fed without DataLoader worker processes (no IPC:
pyarrow, numpy and torch release the GIL while they decode, gather and copy;
docs/training.md, "Read-ahead and the GPU feed"):

- :class:`PieceWindow` keeps reads of the next pieces an epoch needs in flight on a
  thread pool, in the order they will be used: up to ``pieces`` of them, and no more
  estimated in-memory bytes than ``max_bytes`` (always at least one). On an object
  store each read waits on round trips; a window of them overlaps the waits.
- :class:`CpuSlots` caps the threads that do the loader's CPU work at once (decoding
  pieces, converting windows) at ``loader_threads`` when one is asked for (no cap by
  default), so that a trainer's thread that wakes finds a core free (docs/training.md,
  "The loader's share of the cores"). Each piece is then decoded on one thread
  (``use_threads=False``), never on pyarrow's process-wide pool, whose size is the
  user's and is left as it is.
- :func:`background` runs an iterator on one thread, at most ``depth`` items ahead of
  the consumer: the conversion of windows and their copy to the device
  (raylake/train/windows.py), and, with a transform, the making of batches. Items come out in order; an exception raised on the thread
  is raised again, the same object, in the consumer; closing the consumer (``break``,
  ``close()``, an exception, garbage collection) stops and joins the thread and
  closes the iterator.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from raylake.arguments import check_integer

T = TypeVar("T")

DEFAULT_PIECES = 8  # piece reads in flight
DEFAULT_BYTES = 256 << 20  # estimated in-memory bytes of the pieces in flight
DEFAULT_BATCHES = 2  # transformed batches made ahead of the trainer

_ITEM, _ERROR, _DONE = 0, 1, 2


def check_loader_threads(value: object) -> int:
    """``loader_threads``: None or 0 for no cap (pyarrow decodes on its process-wide pool),
    else the cap."""
    return 0 if value is None else check_integer("loader_threads", value)


class CpuSlots:
    """``with slots:`` around CPU work: at most ``threads`` such blocks run at once
    (0: no cap). Waits for reads or for other stages happen outside the block."""

    def __init__(self, threads: int) -> None:
        self.threads = check_integer("loader_threads", threads)
        self._slots = threading.BoundedSemaphore(self.threads) if self.threads else None

    def __enter__(self) -> None:
        if self._slots is not None:
            self._slots.acquire()

    def __exit__(self, *exc: object) -> None:
        if self._slots is not None:
            self._slots.release()


class PieceWindow(Generic[T]):
    """Reads of the pieces of ``plan`` (indices, in the order of use), a window ahead.

    ``take(i)`` returns piece ``i``: the read started ahead if there is one (waiting
    for it), otherwise a read on the calling thread. Each take tops the window up
    first, so the next reads start before this one is waited for. ``pieces=0`` reads
    nothing ahead. ``threads`` (default: ``pieces``) is the size of the pool the reads
    run on: reads planned beyond it wait in the pool's queue. With ``ramp``, the first
    piece is read alone until it is taken. Use it as a context
    manager, or call ``close()``: pending reads are cancelled and running ones are
    waited for, so no thread outlives it.
    """

    def __init__(
        self,
        read: Callable[[int], T],
        plan: Iterable[int],
        *,
        pieces: int = DEFAULT_PIECES,
        max_bytes: int = DEFAULT_BYTES,
        cost: Callable[[int], int] = lambda _: 0,
        name: str = "raylake-read-ahead",
        threads: int | None = None,
        observe: Callable[[float, bool], None] | None = None,
        ramp: bool = False,
    ) -> None:
        self.pieces = check_integer("read_ahead", pieces)
        # Until the first piece is taken only it is read: what the consumer waits for
        # first does not share the cores with the reads behind it.
        self._ramp = ramp
        self._observe = observe  # (share of the window in flight, piece already read)
        self.threads = (
            self.pieces if threads is None else check_integer("loader_threads", threads, 1)
        )
        self.max_bytes = check_integer("read_ahead_bytes", max_bytes)
        self._read = read
        self._plan = iter(plan)
        self._peeked: int | None = None
        self._cost = cost
        self._name = name
        self._ahead: OrderedDict[int, Future[T]] = OrderedDict()
        self._bytes = 0
        self._pool: ThreadPoolExecutor | None = None

    @property
    def in_flight(self) -> int:
        """Reads started ahead and not yet taken."""
        return len(self._ahead)

    @property
    def bytes_in_flight(self) -> int:
        return self._bytes

    def take(self, index: int) -> T:
        future: Future[T] | None = None
        if self._observe is not None and self.pieces:
            pending = self._ahead.get(index)
            self._observe(len(self._ahead) / self.pieces, pending is not None and pending.done())
        if index in self._ahead:
            while future is None:
                key, pending = self._ahead.popitem(last=False)
                self._bytes -= self._cost(key)
                if key == index:
                    future = pending
                else:  # planned before ``index``, and the consumer went past it
                    pending.cancel()
        if self._ramp and future is not None:
            self._ramp = False
            result = future.result()
            self.fill()
            return result
        self._ramp = False
        if future is None and self._peek() == index:
            self._peeked = None  # read here, now: not again ahead
        self.fill()
        return self._read(index) if future is None else future.result()

    def fill(self) -> None:
        """Start reads of the next planned pieces until the window is full."""
        while len(self._ahead) < (min(self.pieces, 1) if self._ramp else self.pieces):
            index = self._peek()
            if index is None:
                return
            cost = self._cost(index)
            if self._ahead and self._bytes + cost > self.max_bytes:
                return
            self._peeked = None
            if index in self._ahead:
                continue
            if self._pool is None:
                size = min(self.pieces, self.threads)
                self._pool = ThreadPoolExecutor(size, thread_name_prefix=self._name)
            self._ahead[index] = self._pool.submit(self._read, index)
            self._bytes += cost

    def harvest(self, index: int) -> T | None:
        """Piece ``index`` if its read was started ahead and never taken, waited for (a
        read still queued for a thread runs too: what a pass leaves for the next one
        does not depend on whether a thread picked it up in time). None if it was not
        started, or if it failed (whoever reads it next will see why)."""
        future = self._ahead.pop(index, None)
        if future is None:
            return None
        try:
            return future.result()
        except Exception:  # the next pass reads it again and raises there
            return None

    def _peek(self) -> int | None:
        if self._peeked is None:
            self._peeked = next(self._plan, None)
        return self._peeked

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._ahead.clear()
        self._bytes = 0

    def __enter__(self) -> PieceWindow[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def background(
    items: Iterator[T], depth: int, name: str = "raylake-prefetch"
) -> Generator[T, None, None]:
    """``items`` in order, produced on a thread at most ``depth`` items ahead.

    ``depth=0`` produces them on the calling thread, as they are asked for. At most
    ``depth`` items wait in the queue and one more is being produced.
    """
    depth = check_integer("prefetch", depth)
    if depth == 0:
        yield from items
        return
    slots: queue.Queue[tuple[int, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    thread = threading.Thread(target=_produce, args=(items, slots, stop), name=name, daemon=True)
    thread.start()
    try:
        while True:
            kind, value = slots.get()
            if kind == _DONE:
                return
            if kind == _ERROR:
                assert isinstance(value, BaseException)
                raise value
            yield value  # type: ignore[misc]
    finally:
        stop.set()
        _drain(slots)  # a producer blocked on a full queue gets its slot and sees ``stop``
        thread.join()
        _drain(slots)


def _produce(
    items: Iterator[T], slots: queue.Queue[tuple[int, object]], stop: threading.Event
) -> None:
    try:
        for item in items:
            slots.put((_ITEM, item))
            if stop.is_set():
                return
        slots.put((_DONE, None))
    except BaseException as exc:  # handed to the consumer, raised there
        slots.put((_ERROR, exc))
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


def _drain(slots: queue.Queue[tuple[int, object]]) -> None:
    while True:
        try:
            slots.get_nowait()
        except queue.Empty:
            return
