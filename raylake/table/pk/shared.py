"""Row groups that several key-range parts need, decoded once for all of them.

A part of a merge section reads whole row groups of every file it spans
(ranges.py), so a group that a cut key falls inside holds rows of two parts (or
more, for small files): each part decoded it, and the loaders, which cut sections
as finely as their row groups allow, decoded a fifth more row versions than the
files hold (issue 20: 17.1M for 14M at bench/pk_train.py's 8M rows). The first
part to need such a group decodes it, takes every sharing part's winners out of
it, and leaves the others' here; a part that arrives while it is being decoded
waits for it instead of decoding it again.

What is left for parts not read yet is bounded by ``SHARED_GROUP_BYTES`` (the
oldest goes first); a part that finds nothing left (evicted, or the decoding
failed) decodes the group itself, so this only ever saves work. Leftovers for a
part that this process never reads (another worker reads it) stay until evicted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future

import pyarrow as pa

# Winners decoded for parts that have not taken them yet (a few row groups' worth).
SHARED_GROUP_BYTES = 64 * 1024 * 1024

Compute = Callable[[], Mapping[int, pa.Table]]


class _Entry:
    def __init__(self) -> None:
        self.done: Future[None] = Future()
        self.left: dict[int, pa.Table] = {}
        self.nbytes = 0


class SharedGroups:
    """Each shared group's winners by part, until every part has taken its own."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._items: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.decoded = 0  # groups decoded for several parts
        self.shared = 0  # takes served from another part's decoding

    def take(self, key: Hashable, part: int, compute: Compute) -> pa.Table:
        """Part ``part``'s winners of the group ``key``: decoded by ``compute`` (every
        sharing part's winners, by part) unless another part already did or is doing it."""
        with self._lock:
            entry = self._items.get(key)
            owner = entry is None
            if entry is None:
                entry = _Entry()
                self._items[key] = entry
        if owner:
            return self._decode(key, entry, part, compute)
        try:
            entry.done.result()
        except Exception:
            return compute()[part]  # the owner failed: this part decodes (and raises) itself
        with self._lock:
            found = entry.left.pop(part, None)
            if found is not None:
                self.shared += 1
                entry.nbytes -= found.nbytes
                self._bytes -= found.nbytes
                if not entry.left and self._items.get(key) is entry:
                    del self._items[key]
        return compute()[part] if found is None else found

    def _decode(self, key: Hashable, entry: _Entry, part: int, compute: Compute) -> pa.Table:
        try:
            result = dict(compute())
        except BaseException as exc:
            with self._lock:
                if self._items.get(key) is entry:
                    del self._items[key]
            entry.done.set_exception(exc)
            raise
        mine = result.pop(part)
        with self._lock:
            self.decoded += 1
            if result and self._items.get(key) is entry:
                entry.left = result
                entry.nbytes = sum(t.nbytes for t in result.values())
                self._bytes += entry.nbytes
                self._evict()
            elif self._items.get(key) is entry:
                del self._items[key]
        entry.done.set_result(None)
        return mine

    def _evict(self) -> None:
        """Drop the oldest leftovers while over budget (entries being decoded hold none)."""
        for key in list(self._items):
            if self._bytes <= self.budget:
                return
            entry = self._items[key]
            if entry.done.done() or entry.left:
                del self._items[key]
                self._bytes -= entry.nbytes
                entry.left, entry.nbytes = {}, 0

    def clear(self) -> None:
        with self._lock:
            for entry in self._items.values():
                entry.left, entry.nbytes = {}, 0
            self._items.clear()
            self._bytes = 0
            self.decoded = self.shared = 0

    def info(self) -> dict[str, int]:
        with self._lock:
            return {
                "decoded": self.decoded,
                "shared": self.shared,
                "entries": len(self._items),
                "bytes": self._bytes,
            }
