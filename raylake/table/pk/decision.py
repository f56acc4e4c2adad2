"""A section's winners as packed bitmasks, and the per-process cache of them (late.py).

A decision does not depend on a read's projection or filter, and data files never
change, so one is kept under its files' paths, bounded by the bytes of its masks: the
loader's counting read and its training read merge a section once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from raylake.caching import LruCache

# Bytes of packed winner masks kept per process (one bit per row version: 64 MiB
# cover 512M versions, so the whole decision of a 100M-row table stays cached).
DECISION_CACHE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Decision:
    """The winning rows of each file of one section (or part), as packed bitmasks."""

    order: tuple[int, ...]  # section file indices, in output order
    offsets: tuple[int, ...]  # position in its file of each mask's first row
    masks: tuple[np.ndarray, ...]  # packed bits, one per row read from the file
    rows: tuple[int, ...]  # rows read from each file
    winners: tuple[int, ...]  # winning rows of each file

    @property
    def total(self) -> int:
        return sum(self.winners)

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in self.masks)

    def positions(self, i: int) -> np.ndarray:
        """The winning row positions of file ``i`` (section order) in its file, ascending."""
        bits = np.unpackbits(self.masks[i], count=self.rows[i]).view(bool)
        return np.flatnonzero(bits) + self.offsets[i]


class DecisionCache:
    """Decisions by (table, files), bounded by the bytes of their masks; one larger than
    the whole budget is not kept."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._items: LruCache[tuple[object, ...], Decision] = LruCache(
            budget, weigh=lambda d: d.nbytes
        )
        self._lock = threading.Lock()  # the counters
        self.hits = 0
        self.misses = 0

    def peek(self, key: tuple[object, ...]) -> Decision | None:
        """The decision if cached, counted neither as a hit nor as a miss."""
        return self._items.peek(key)

    def get(self, key: tuple[object, ...]) -> Decision | None:
        found = self._items.get(key)
        with self._lock:
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
        return found

    def put(self, key: tuple[object, ...], decision: Decision) -> None:
        if decision.nbytes <= self.budget:
            self._items.put(key, decision)

    def clear(self) -> None:
        self._items.clear()
        with self._lock:
            self.hits = self.misses = 0

    def info(self) -> dict[str, int]:
        with self._lock:
            hits, misses = self.hits, self.misses
        return {
            "hits": hits,
            "misses": misses,
            "entries": len(self._items),
            "bytes": self._items.weight,
        }
