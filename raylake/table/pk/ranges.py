"""Key ranges: cut a merge section into parts that are merged one at a time.

Files are sorted by key, so a part of a section is a key range ``[lo, hi)`` read
from every file the section spans (issue 20): memory follows the part, not the
bucket. Planning (manifests only) decides how many parts a section gets; the
reader of part ``j`` of ``m`` finds the cut keys itself, the same way in every
process: it takes the first key of every row group of the section's files (one
small read per group, cached per process), orders the groups by it, and cuts
where the running row count crosses ``j * rows / m``. A file's rows in a range
come from the row groups that can hold it (a group's keys lie between its first
key and the next group's), then a vectorized search inside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raylake.caching import LruCache, process_cache
from raylake.io import FileIO
from raylake.io.read_errors import reading
from raylake.table.fragments import parquet_fragment
from raylake.table.pk.schema import SEQ
from raylake.table.split import FileSlice, KeyRange

# Bounds of a part: a one-row table of the key columns, or None for an open end.
Bound: TypeAlias = "pa.Table | None"


@dataclass(frozen=True)
class FileGroups:
    """Row-group layout of one file: first key of each group and where each starts."""

    firsts: pa.Table  # one row per group: the key columns of its first row
    starts: np.ndarray  # row offset of each group, then the file's row count


_layouts: LruCache[tuple[str, str], FileGroups] = process_cache(LruCache(4096))
_cuts: LruCache[tuple[object, ...], tuple[Bound, ...]] = process_cache(LruCache(256))


def file_groups(file_io: FileIO, path: str, key: Sequence[str]) -> FileGroups:
    """The first key of every row group of a data file (cached: files never change)."""

    def compute() -> FileGroups:
        metadata = parquet_fragment(file_io, path).metadata
        sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        firsts = []
        full = file_io.full_path(path)
        with reading(full), file_io.arrow_filesystem().open_input_file(full) as source:
            reader = pq.ParquetFile(source, metadata=metadata)
            for g, n in enumerate(sizes):
                if n:
                    batch = next(reader.iter_batches(batch_size=1, row_groups=[g], columns=key))
                    firsts.append(pa.Table.from_batches([batch]).slice(0, 1))
        starts = np.cumsum([0, *[n for n in sizes if n]])
        return FileGroups(pa.concat_tables(firsts), starts)

    return _layouts.get_or_compute((file_io.uri, path), compute)


def bounds(
    file_io: FileIO, key: Sequence[str], section: Sequence[FileSlice], part: KeyRange
) -> tuple[Bound, Bound]:
    """The keys ``[lo, hi)`` of part ``part.index`` of ``part.count`` of a section."""
    cache_key = (file_io.uri, tuple(f.path for f in section), part.count)
    cuts = _cuts.get_or_compute(cache_key, lambda: _cut_keys(file_io, key, section, part.count))
    return cuts[part.index], cuts[part.index + 1]


def _cut_keys(
    file_io: FileIO, key: Sequence[str], section: Sequence[FileSlice], parts: int
) -> tuple[Bound, ...]:
    layouts = [file_groups(file_io, f.path, key) for f in section]
    firsts = pa.concat_tables([g.firsts for g in layouts])
    rows = np.concatenate([np.diff(g.starts) for g in layouts])
    order = np.asarray(
        pc.sort_indices(firsts, sort_keys=[(k, "ascending") for k in key]).to_numpy()
    ).astype(np.int64)
    before = np.cumsum(rows[order]) - rows[order]  # rows in groups that start earlier
    total = int(rows.sum())
    cuts: list[Bound] = [None]
    for j in range(1, parts):
        at = int(np.searchsorted(before, j * total / parts))
        # Past the last group's first key: the parts left are empty ranges.
        cuts.append(firsts.slice(int(order[min(at, len(order) - 1)]), 1))
    cuts.append(None)
    return tuple(cuts)


def less_than(rows: pa.Table, bound: pa.Table, key: Sequence[str]) -> np.ndarray:
    """Whether each row's key sorts before ``bound`` (lexicographic over the key columns)."""
    less = np.zeros(rows.num_rows, dtype=bool)
    equal = np.ones(rows.num_rows, dtype=bool)
    for name in key:
        column, value = rows.column(name), bound.column(name)[0]
        less |= equal & _numpy(pc.less(column, value))
        equal &= _numpy(pc.equal(column, value))
    return less


def _numpy(mask: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def read_range(
    file_io: FileIO,
    f: FileSlice,
    columns: Sequence[str],
    key: Sequence[str],
    lo: Bound,
    hi: Bound,
) -> tuple[pa.Table | None, int]:
    """A file's rows with keys in ``[lo, hi)``, and the position of the first of them.

    Reads only the row groups that can hold such keys; ``_rl_seq`` is made effective.
    """
    layout = file_groups(file_io, f.path, key)
    groups = len(layout.starts) - 1
    if groups == 0:
        return None, 0
    candidates = np.ones(groups, dtype=bool)
    if hi is not None:
        candidates &= less_than(layout.firsts, hi, key)
    if lo is not None:
        # Group g's keys lie in [first(g), first(g + 1)], so it matters if first(g + 1) >= lo.
        next_below = less_than(layout.firsts, lo, key)[1:]
        candidates[:-1] &= ~next_below
    picked = np.flatnonzero(candidates)
    if not len(picked):
        return None, 0
    metadata = parquet_fragment(file_io, f.path, file_size=f.file_size).metadata
    full = file_io.full_path(f.path)
    with reading(full), file_io.arrow_filesystem().open_input_file(full) as source:
        reader = pq.ParquetFile(source, metadata=metadata)
        rows = reader.read_row_groups([int(g) for g in picked], columns=list(columns))
    first = int(layout.starts[picked[0]])  # picked groups are contiguous
    inside = np.ones(rows.num_rows, dtype=bool)
    if lo is not None:
        inside &= ~less_than(rows, lo, key)
    if hi is not None:
        inside &= less_than(rows, hi, key)
    hits = np.flatnonzero(inside)  # contiguous: the file is sorted by key
    if not len(hits):
        return None, 0
    rows = rows.slice(int(hits[0]), int(hits[-1]) - int(hits[0]) + 1)
    if f.sequence_base and SEQ in rows.column_names:
        i = rows.column_names.index(SEQ)
        shifted = pc.add(rows.column(i), pa.scalar(f.sequence_base, pa.int64()))
        rows = rows.set_column(i, rows.schema.field(i), shifted)
    return rows, first + int(hits[0])
