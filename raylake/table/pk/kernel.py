"""The merge-on-read kernel of both formats: versioned rows in, winners out.

A deduplicate or first-row merge picks whole rows, so which rows of a section (files
of a bucket whose keys overlap, or a key-range part of one) win depends only on the
key, the sequence field, ``_rl_seq`` and ``_rl_kind``. :func:`decide` takes a
section's files and a reader of their *versions* (those columns, in raylake's row
kinds, one table per file) and returns a :class:`Decision`: per file, a packed bitmask
of the rows that win (in Arrow's bit order, so a filter reads the bits in place).
Each format reads its own files: raylake's tables through
late.py (which then decodes only the winners' values), Paimon's through
raylake/paimon/read.py (which maps ``_SEQUENCE_NUMBER``/``_VALUE_KIND`` and its merge
engine's treatment of retracts onto these columns). Engines that compute rows
(partial-update, aggregation) merge every version of every column (engines.merge).

Two ways to decide:

- **Newest file first, no sort** (dedupe.py): a deduplicate section of one integer
  key whose files' sequence ranges do not interleave, each file holding a key once in
  key order (checked: a raylake writer guarantees it, Paimon's writer too, but another
  writer's files are only trusted once looked at). A row wins unless a newer file
  holds its key; ``_rl_seq`` is never read.
- **By sort** (engines.merge_positions): every other section.

Rows of kind ``-U`` are no version: they neither win nor hide an older version
(raylake never stores them in data files; Paimon's ``ignore-delete`` and first-row
retracts become them). A ``-D`` is the newest version of its key and removes it.

A decision does not depend on a read's projection or filter (key filters select whole
keys; the rest applies to the merged rows), and data files never change, so it is
kept per process under the key its format names (the files' paths and what else
decides): a loader's counting read and its training read decide a section once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from raylake.caching import LruCache, process_cache
from raylake.format.schema import TableSchema
from raylake.table.pk.bucket import integer_values
from raylake.table.pk.dedupe import newest_wins_by_file, unseen_in_newer
from raylake.table.pk.engines import merge_positions
from raylake.table.pk.schema import DELETE, KIND, SEQ, UPDATE_BEFORE, MergeSpec

# Bytes of packed winner masks kept per process (one bit per row version: 64 MiB
# cover 512M versions, so the whole decision of a 100M-row table stays cached).
DECISION_CACHE_BYTES = 64 * 1024 * 1024

# Each file's rows of the asked columns (current names, raylake's row kinds; a reader
# may add ``_rl_kind`` unasked, where its metadata cannot say a file has no -D row),
# and the position in its file of the first.
Versions = Callable[[Sequence[str]], Sequence[tuple[pa.Table, int]]]


@dataclass(frozen=True)
class Decision:
    """The winning rows of each file of one section (or part), as packed bitmasks."""

    order: tuple[int, ...]  # section file indices, in output order
    offsets: tuple[int, ...]  # position in its file of each mask's first row
    masks: tuple[np.ndarray, ...]  # packed bits (Arrow's order), one per row read from the file
    rows: tuple[int, ...]  # rows read from each file
    winners: tuple[int, ...]  # winning rows of each file
    newest_first: bool = False  # decided without a sort

    @property
    def total(self) -> int:
        return sum(self.winners)

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in self.masks)

    def mask(self, i: int) -> np.ndarray:
        """Which rows read from file ``i`` (section order) win."""
        return np.unpackbits(self.masks[i], count=self.rows[i], bitorder="little").view(bool)

    def selection(
        self, i: int, start: int | None = None, stop: int | None = None
    ) -> pa.BooleanArray:
        """Which rows ``[start, stop)`` of file ``i`` (positions in the file; default:
        the rows read) win, as a filter's mask; rows the decision did not read are False.

        Where the decision read all of those rows the mask is its own bits, not a copy:
        a row group's filter then costs no unpacking of bits and no packing them again.
        """
        offset, n = self.offsets[i], self.rows[i]
        lo = 0 if start is None else start - offset
        hi = n if stop is None else stop - offset
        if lo >= 0 and hi <= n:
            bits = pa.py_buffer(self.masks[i])
            return pa.Array.from_buffers(pa.bool_(), hi - lo, [None, bits], 0, lo)
        mask = np.zeros(hi - lo, dtype=bool)
        a, b = max(lo, 0), min(hi, n)
        if a < b:  # unpack only the bytes that hold bits a .. b
            first = a // 8
            bits = np.unpackbits(self.masks[i][first : -(-b // 8)], bitorder="little")
            mask[a - lo : b - lo] = bits[a - first * 8 : b - first * 8].view(bool)
        return pa.array(mask)

    def positions(self, i: int) -> np.ndarray:
        """The winning row positions of file ``i`` (section order) in its file, ascending."""
        return np.flatnonzero(self.mask(i)) + self.offsets[i]


class DecisionCache:
    """Decisions by their format's key, bounded by the bytes of their masks; one larger
    than the whole budget is not kept."""

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
        """Hits, misses, entries and mask bytes; ``newest_first``: entries decided so."""
        with self._lock:
            hits, misses = self.hits, self.misses
        kept = [self._items.peek(k) for k in self._items.cached_keys()]
        return {
            "hits": hits,
            "misses": misses,
            "entries": len(self._items),
            "bytes": self._items.weight,
            "newest_first": sum(1 for d in kept if d is not None and d.newest_first),
        }


decisions = process_cache(DecisionCache(DECISION_CACHE_BYTES))


def picks_rows(spec: MergeSpec | None) -> bool:
    """Whether the engine picks whole rows (so a section is decided from its keys)."""
    return spec is not None and spec.engine in ("deduplicate", "first-row")


def decision_columns(spec: MergeSpec) -> list[str]:
    """The columns a decision by sort reads."""
    return [*spec.key, *([spec.sequence_field] if spec.sequence_field else []), SEQ, KIND]


def decide(
    key: tuple[object, ...] | None,
    spec: MergeSpec,
    section: Sequence[Any],
    ts: TableSchema,
    versions: Versions,
) -> Decision:
    """The winners of a deduplicate or first-row section (or part), kept under ``key``
    (None: not kept). ``section``: its files, with their sequence ranges."""
    found = None if key is None else decisions.get(key)
    if found is not None:
        return found
    decision = None
    if newest_wins_by_file(spec, section, ts):
        decision = _decide_newest_first(spec, section, versions)
    if decision is None:
        decision = _decide_by_sort(spec, versions(decision_columns(spec)))
    if key is not None:
        decisions.put(key, decision)
    return decision


def _decide_newest_first(
    spec: MergeSpec, section: Sequence[Any], versions: Versions
) -> Decision | None:
    """Files newest first: a row wins unless a newer file holds its key (no sort).
    None where a file holds a key twice or out of key order (only a sort decides)."""
    order = sorted(range(len(section)), key=lambda i: section[i].max_sequence, reverse=True)
    deletes = any(f.delete_row_count for f in section)
    found = versions([spec.key[0], KIND] if deletes else [spec.key[0]])
    keys, kinds = [], []
    for rows, _ in found:
        values = integer_values(rows.column(spec.key[0]))
        if values is None or not bool(np.all(values[1:] > values[:-1])):
            return None  # another key type (an older schema's), or not one key a row
        kind = None
        if KIND in rows.column_names:
            kind = np.asarray(rows.column(KIND).to_numpy())
        keys.append(values)
        kinds.append(kind)
    # -U rows are no version: they leave the keys a newer file hides.
    ignored = [
        None if k is None or not (k == UPDATE_BEFORE).any() else k != UPDATE_BEFORE for k in kinds
    ]
    tested = [k if v is None else k[v] for k, v in zip(keys, ignored)]
    masks: list[np.ndarray] = [np.zeros(0, np.uint8)] * len(found)
    winners = [0] * len(found)
    for i, unseen in zip(order, unseen_in_newer([tested[i] for i in order])):
        keep = unseen
        if ignored[i] is not None:
            keep = np.zeros(len(keys[i]), dtype=bool)
            keep[ignored[i]] = unseen
        if kinds[i] is not None:
            keep &= kinds[i] != DELETE
        masks[i] = np.packbits(keep, bitorder="little")
        winners[i] = int(np.count_nonzero(keep))
    return Decision(
        tuple(order),
        tuple(first for _, first in found),
        tuple(masks),
        tuple(rows.num_rows for rows, _ in found),
        tuple(winners),
        newest_first=True,
    )


def _decide_by_sort(spec: MergeSpec, found: Sequence[tuple[pa.Table, int]]) -> Decision:
    """Sort the decision columns of every file once and pick rows (engines.merge_positions)."""
    rows = [t.num_rows for t, _ in found]
    keep = np.zeros(sum(rows), dtype=bool)
    if sum(rows):
        every = pa.concat_tables([t.select(decision_columns(spec)) for t, _ in found])
        kinds = np.asarray(every.column(KIND).to_numpy())
        versions = np.flatnonzero(kinds != UPDATE_BEFORE)  # -U rows are no version
        if len(versions) < len(kinds):
            every = every.take(pa.array(versions))
        if every.num_rows:
            chosen = merge_positions(every, spec)
            assert chosen is not None
            picked = chosen.astype(np.int64, copy=False)  # pyarrow's sort indices are uint64
            keep[picked if len(versions) == len(kinds) else versions[picked]] = True
    offsets = np.cumsum([0, *rows])
    masks = [
        np.packbits(keep[offsets[i] : offsets[i + 1]], bitorder="little") for i in range(len(rows))
    ]
    winners = [int(np.count_nonzero(keep[offsets[i] : offsets[i + 1]])) for i in range(len(rows))]
    return Decision(
        tuple(range(len(found))),
        tuple(first for _, first in found),
        tuple(masks),
        tuple(rows),
        tuple(winners),
    )


def clear_decisions() -> None:
    """Forget this process's decisions (benchmarks of cold reads, tests)."""
    decisions.clear()


def decision_cache_info() -> dict[str, int]:
    """Hits, misses, entries (and those decided newest first) and mask bytes of this
    process's decision cache."""
    return decisions.info()
