"""Deduplicate merge-on-read without a sort: one ordered, parallel scan, newest file first.

When a section's files never interleave in sequence (the usual case: each commit's
files get their own range, and compaction output precedes later commits), the
file with the higher sequences holds the newer version of every key two files
share. So a row survives unless a newer file of its section has its key: the
scan reads the section's files newest first and tests each batch's keys against
the keys already seen, a bitmap or binary-search lookup over integer keys.

This path reads like a plain scan (pyarrow decodes several files and row groups
in parallel, batches stream in order) and holds only the seen keys of the
current section in memory, never its rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.fragments import fragments_dataset, parquet_fragment
from raylake.table.pk.bucket import integer_values
from raylake.table.pk.schema import DELETE, KIND, SEQ, MergeSpec, file_schema
from raylake.table.split import FileSlice

if TYPE_CHECKING:
    from raylake.table.pk.read import ReadPlan

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


def scan_newest_first(
    file_io: FileIO,
    ts: TableSchema,
    plan: ReadPlan,
    sections: Sequence[Sequence[FileSlice]],
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    """The current rows of deduplicate sections, as filtered, projected batches."""
    ordered: list[FileSlice] = []
    section_of: dict[str, int] = {}
    for i, section in enumerate(sections):
        for f in sorted(section, key=lambda f: f.max_sequence, reverse=True):
            ordered.append(f)
            section_of[f.path] = i
    fragments = [parquet_fragment(file_io, f.path, file_size=f.file_size) for f in ordered]
    dataset = fragments_dataset(file_io, file_schema(ts), fragments)
    paths = {file_io.full_path(f.path): f.path for f in ordered}
    # Without -D rows the row kinds decide nothing: do not even decode them.
    deletes = any(f.delete_row_count for f in ordered)
    scanner = dataset.scanner(
        columns=[c for c in plan.merge_columns if c != SEQ and (deletes or c != KIND)],
        filter=plan.key_filter,
        batch_size=batch_size,
    )
    key = plan.spec.key[0]
    seen, current = KeySet(), KeySet()
    current_path, current_section = None, -1
    for tagged in scanner.scan_batches():  # batches in fragment order
        path = paths[tagged.fragment.path]
        if path != current_path:
            seen.merge(current)
            current = KeySet()
            if section_of[path] != current_section:
                seen, current_section = KeySet(), section_of[path]
            current_path = path
        batch = tagged.record_batch
        if batch.num_rows == 0:
            continue
        keys = integer_values(batch.column(key))
        assert keys is not None
        keep = ~seen.contains(keys)
        if deletes:
            keep &= np.asarray(batch.column(KIND).to_numpy(zero_copy_only=False)) != DELETE
        current.add(keys)
        if not keep.all():  # the newest file of a section keeps every row: no copy
            batch = batch.filter(pa.array(keep))
        yield from _finish(batch, plan)


def _finish(batch: pa.RecordBatch, plan: ReadPlan) -> Iterator[pa.RecordBatch]:
    if plan.residual is not None:
        batch = batch.filter(plan.residual)
    if batch.num_rows:
        yield batch.select(list(plan.output))


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
    return keys.astype(np.int64) - np.int64(lo)
