"""One small thread-safe LRU map for the per-process caches of immutable things.

Manifests, live file sets and Parquet footers never change once written, so
caching them per process is always correct; the bound keeps memory flat.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A bounded least-recently-used map, safe to share between threads."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an LRU cache needs a limit >= 1, got {limit}")
        self.limit = limit
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            if len(self._items) > self.limit:
                self._items.popitem(last=False)

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
