"""Deduplicate decisions without a sort: files newest first, tested against the keys seen.

When a section's files never interleave in sequence (the usual case: each commit's
files get their own range, and compaction output precedes later commits), the
file with the higher sequences holds the newer version of every key two files
share. So a row survives unless a newer file of its section has its key: the
decision (late.py) reads the key column of the section's files newest first and
tests each file's keys against the keys already seen, a bitmap or binary-search
lookup over integer keys. It holds only the seen keys of the current section.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raylake.format.schema import TableSchema
from raylake.table.pk.bucket import integer_values
from raylake.table.pk.schema import MergeSpec

if TYPE_CHECKING:
    pass

# A key range this small always gets a bitmap, however few keys (16 MiB).
_BITMAP_FREE = 1 << 24


def newest_wins_by_file(spec: MergeSpec, section: Sequence[Any], ts: TableSchema) -> bool:
    """Whether a deduplicate section may be merged file by file, newest first.

    Needs one integer-like key column (so seen keys fit a bitmap or a sorted
    array) and files whose sequence ranges do not interleave.
    """
    if spec.engine != "deduplicate" or spec.sequence_field or len(spec.key) != 1:
        return False
    if integer_values(pa.array([], ts.arrow_schema.field(spec.key[0]).type)) is None:
        return False
    ranges = sorted((f.min_sequence, f.max_sequence) for f in section)
    return all(prev[1] < nxt[0] for prev, nxt in pairwise(ranges))


def unseen_in_newer(keys: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For integer key arrays newest first: which keys of each no earlier array holds.

    Dense keys share one bitmap over the range of all of them, set array by array
    (a gather and a scatter per key); sparse ones go through a KeySet.
    """
    present = [k for k in keys if len(k)]
    if not present:
        return [np.ones(len(k), dtype=bool) for k in keys]
    lo = min(int(k.min()) for k in present)
    hi = max(int(k.max()) for k in present)
    if hi - lo >= max(16 * sum(len(k) for k in present), _BITMAP_FREE):
        return _unseen_sorted(keys)
    # Non-negative signed keys index the bitmap as they are when that at most doubles
    # it (ids from 0): no array of offsets is made per file.
    direct = lo >= 0 and lo <= hi - lo and all(k.dtype.kind == "i" for k in present)
    base = 0 if direct else lo
    bitmap = np.zeros(hi - base + 1, dtype=bool)
    result = []
    last = max(i for i, k in enumerate(keys) if len(k))
    for i, k in enumerate(keys):
        offsets = k if direct else _offsets(k, base)
        if i > 0:  # nothing is seen before the newest array
            seen = bitmap[offsets]  # before setting: a key twice in one file is kept
            result.append(np.logical_not(seen, out=seen))
        else:
            result.append(np.ones(len(k), dtype=bool))
        if i < last:  # no older array tests the oldest one's keys
            bitmap[offsets] = True
    return result


def _unseen_sorted(keys: Sequence[np.ndarray]) -> list[np.ndarray]:
    seen = KeySet()
    result = []
    for k in keys:
        result.append(~seen.contains(k))
        seen.add(k)
    return result


class KeySet:
    """Integer keys seen so far, for vectorized membership tests.

    Dense keys (ids) become a bitmap over their range (one byte per slot, at most
    16 per key or 16 MiB);
    sparse ones a sorted array searched by bisection. The lookup structure is
    built once per set of added arrays, not per test.
    """

    def __init__(self) -> None:
        self._arrays: list[np.ndarray] = []
        self._lookup: tuple[str, int, np.ndarray] | None = None

    def add(self, keys: np.ndarray) -> None:
        if len(keys):
            self._arrays.append(keys)
            self._lookup = None

    def merge(self, other: KeySet) -> None:
        for keys in other._arrays:
            self.add(keys)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        if not self._arrays or not len(keys):
            return np.zeros(len(keys), dtype=bool)
        kind, lo, table = self._lookup or self._build()
        if kind == "bitmap":
            # Compare before subtracting, so that no key can wrap around into the range.
            inside = (keys >= lo) & (keys <= lo + len(table) - 1)
            found = np.zeros(len(keys), dtype=bool)
            found[inside] = table[_offsets(keys[inside], lo)]
            return found
        pos = np.searchsorted(table, keys)
        pos[pos == len(table)] = 0
        return table[pos] == keys

    def _build(self) -> tuple[str, int, np.ndarray]:
        lo = min(int(a.min()) for a in self._arrays)
        hi = max(int(a.max()) for a in self._arrays)
        total = sum(len(a) for a in self._arrays)
        if hi - lo < max(16 * total, _BITMAP_FREE):
            bitmap = np.zeros(hi - lo + 1, dtype=bool)
            for a in self._arrays:
                bitmap[_offsets(a, lo)] = True
            self._lookup = ("bitmap", lo, bitmap)
        else:
            self._lookup = ("sorted", lo, np.sort(np.concatenate(self._arrays)))
        return self._lookup


def _offsets(keys: np.ndarray, lo: int) -> np.ndarray:
    """``keys - lo`` as int64 bitmap positions, for keys known to be >= lo.

    Subtracting in the keys' own type would wrap for narrow types (int8/int16 keys
    spanning more than half their range), mapping unseen keys onto seen slots.
    uint64 keys above 2**63 do not fit int64, but their difference to ``lo`` does.
    """
    if keys.dtype == np.uint64:
        return (keys - np.uint64(lo)).astype(np.int64)
    return keys.astype(np.int64, copy=False) - np.int64(lo)
