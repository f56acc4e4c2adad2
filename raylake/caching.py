"""One small thread-safe LRU map for the per-process caches of immutable things.

Manifests, live file sets, Parquet footers and decoded training pieces never change
once written, so caching them per process is always correct; the bound keeps memory
flat. The bound counts entries, or with ``weigh`` the sum of the entries' weights
(bytes, say).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Clearable(Protocol):
    def clear(self) -> None: ...


C = TypeVar("C", bound=Clearable)
_process_caches: list[Clearable] = []


def process_cache(cache: C) -> C:
    """Register a cache kept for the whole process, so that :func:`clear_process_caches`
    (``raylake.table.clear_caches``) reaches it; returns it."""
    _process_caches.append(cache)
    return cache


def clear_process_caches() -> None:
    """Empty every registered per-process cache (cold-read benchmarks, tests)."""
    for cache in list(_process_caches):
        cache.clear()


# Every cache's lock is made anew in a forked child: a thread of the parent may have
# held it at the fork (a read's file opens take the mapped files' cache from pyarrow's
# threads), and no thread of the child would ever release it.
_caches: weakref.WeakSet[LruCache[Any, Any]] = weakref.WeakSet()


def _new_locks_in_child() -> None:
    for cache in list(_caches):
        cache._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)


class LruCache(Generic[K, V]):
    """A bounded least-recently-used map, safe to share between threads.

    Without ``weigh`` it holds at most ``limit`` entries. With ``weigh`` it holds
    entries whose weights sum to at most ``limit``, but always the newest one, even
    when that one alone weighs more.
    """

    def __init__(self, limit: int, weigh: Callable[[V], int] | None = None) -> None:
        least = 0 if weigh else 1
        if limit < least:
            raise ValueError(f"an LRU cache needs a limit >= {least}, got {limit}")
        self.limit = limit
        self._weigh = weigh
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()
        _caches.add(self)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def weight(self) -> int:
        """The entries' weights summed (their number without ``weigh``)."""
        return self._weight

    def cached_keys(self) -> list[K]:
        """The keys, oldest use first (a copy: the cache may change meanwhile)."""
        with self._lock:
            return list(self._items)

    def peek(self, key: K) -> V | None:
        """The value if cached, without counting as a use."""
        with self._lock:
            item = self._items.get(key)
            return None if item is None else item[0]

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: K, value: V) -> None:
        weight = 1 if self._weigh is None else self._weigh(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            self._items[key] = (value, weight)
            self._weight += weight
            while self._weight > self.limit and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self._weight -= dropped

    def discard(self, key: K) -> None:
        """Forget ``key`` if cached."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._weight -= old[1]

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value, or ``compute()`` stored. Computing happens outside the lock,
        so two threads may both compute a missing value; both results are equal."""
        value = self.get(key)
        if value is None:
            value = compute()
            self.put(key, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weight = 0


class ProcessLock:
    """A module's lock that a forked child makes anew: a thread of the parent may have
    held it at the fork (a DataLoader worker is forked while reads run), and no thread
    of the child would ever release it."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        if self._pid != os.getpid():
            self._pid, self._lock = os.getpid(), threading.Lock()
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class ProcessThreads:
    """A thread pool shared by the whole process, made on first use and made again in a
    forked child: the child's copy of the parent's pool counts the parent's threads,
    which do not exist there, so work given to it would never run."""

    def __init__(self, workers: int, prefix: str) -> None:
        self.workers = workers
        self.prefix = prefix
        self._pool: tuple[int, ThreadPoolExecutor] | None = None
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        pid = os.getpid()
        pool = self._pool
        if pool is not None and pool[0] == pid:
            return pool[1]
        if pool is not None:  # a forked child: the parent's lock may have been held
            self._lock = threading.Lock()
        with self._lock:
            if self._pool is None or self._pool[0] != pid:
                self._pool = (pid, ThreadPoolExecutor(self.workers, thread_name_prefix=self.prefix))
            return self._pool[1]
