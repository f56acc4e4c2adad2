"""Copying a window's columns into its stacked features, on a few threads where the host
has cores to spare (docs/training.md, "Windows on the device").

On a GPU host the converting thread is what bounds an epoch: a window's features (16
float32 columns of 65,536 rows: 4 MB) are copied into the pinned slot at the rate one
core reads and writes memory, about 1.4 ms a window on a 16-core H200 host, most of
the window's time (docs/benchmarks.md, "Feeding a GPU"). numpy copies large arrays
without holding the interpreter's lock, so a few threads copy a window's columns (or
its row blocks, or a shuffled window's gathered rows) side by side. Each pass makes its
own pool and joins it when it ends (``fill_pool``); on hosts of fewer than 8 cores
there is none (``FILL_THREADS`` is 0) and everything runs on the converting thread as
before, since there the reads and the trainer need those cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

# Threads that copy a window's columns at once (0: on the converting thread alone).
# Tests set it to take the threaded path on a small machine.
FILL_THREADS = min(4, (os.cpu_count() or 1) // 4) if (os.cpu_count() or 1) >= 8 else 0
_MIN_PART_BYTES = 256 << 10  # smaller copies are not worth a hand-over to a thread

Source = tuple[int, list[tuple[int, np.ndarray]]]  # width, (first row, (width, rows) view)


@dataclass(frozen=True)
class Copiers:
    """One pass's threads for copies: ``threads`` parts of a copy run at once (one of
    them on the thread that asked)."""

    pool: Executor
    threads: int


@contextmanager
def fill_pool(threads: int | None = None) -> Iterator[Copiers | None]:
    """Threads for one pass's copies (None: none wanted), shut down and joined after."""
    threads = FILL_THREADS if threads is None else threads
    if threads < 2:
        yield None
        return
    pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="raylake-convert-fill")
    try:
        yield Copiers(pool, threads)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def fill(sources: Sequence[Source], dest: np.ndarray, r0: int) -> None:
    """Feature rows ``r0 ..`` into ``dest``, a (width, rows) array: a contiguous copy per
    column (per chunk where a block straddles chunks)."""
    j, m = 0, dest.shape[1]
    end = r0 + m
    for width, views in sources:
        rows = dest[j : j + width]
        if len(views) == 1:
            rows[:] = views[0][1][:, r0:end]
        else:  # a window of several pieces is not combined into one column first
            for start, values in views:
                lo, hi = max(r0, start), min(end, start + values.shape[1])
                if lo < hi:
                    rows[:, lo - r0 : hi - r0] = values[:, lo - start : hi - start]
        j += width


def fill_columns(
    sources: Sequence[Source], dest: np.ndarray, r0: int, copiers: Copiers | None
) -> None:
    """:func:`fill`, the columns split into one group per thread of ``copiers``."""
    if copiers is None or len(sources) < 2 or dest.nbytes < 2 * _MIN_PART_BYTES:
        fill(sources, dest, r0)
        return
    groups, per = [], -(-len(sources) // copiers.threads)
    j = 0
    for g in range(0, len(sources), per):
        part = sources[g : g + per]
        width = sum(w for w, _ in part)
        groups.append((part, j, j + width))
        j += width
    _all(copiers, [(fill, (part, dest[lo:hi], r0)) for part, lo, hi in groups])


def each(run: Callable[[int, int], None], n: int, step: int, copiers: Copiers | None) -> None:
    """``run(lo, hi)`` for the row ranges of ``n`` rows, ``step`` at a time."""
    ranges = [(lo, min(n, lo + step)) for lo in range(0, n, step)]
    if copiers is None or len(ranges) < 2:
        for lo, hi in ranges:
            run(lo, hi)
        return
    _all(copiers, [(run, r) for r in ranges])


def split_rows(n: int, copiers: Copiers | None, row_bytes: int) -> int:
    """Rows per part when ``n`` rows of ``row_bytes`` are split over the copiers."""
    if copiers is None:
        return max(n, 1)
    least = max(1, _MIN_PART_BYTES // max(row_bytes, 1))
    return max(least, -(-n // copiers.threads))


def _all(copiers: Copiers, calls: Iterable[tuple[Callable[..., None], tuple[object, ...]]]) -> None:
    """Every call, the first on this thread, the rest on the pool; all waited for (the
    first error is raised once they are done)."""
    calls = list(calls)
    futures = [copiers.pool.submit(fn, *args) for fn, args in calls[1:]]
    try:
        fn, args = calls[0]
        fn(*args)
    finally:
        for f in futures:
            f.result()
