"""Reading positions of an epoch's global order, and cutting them into numpy batches.

A consumer (one rank's DataLoader worker, or one tf.data input pipeline) reads its
batches' positions window by window: the pieces behind a window are read once
(kept in a small cache, since a piece may straddle two windows) and converted to
numpy once; a shuffled window's rows are then put in the epoch's order with one
gather per array, and the batches are zero-copy slices of that (a batch that
straddles two chunks is the only other copy). Nothing here is per row in Python.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from raylake.caching import LruCache
from raylake.train.sharding import Batch, EpochOrder, Interval, size
from raylake.train.source import LakeSource

Block = dict[str, np.ndarray]


class WindowReader:
    """The rows at positions [lo, hi) of one epoch's order, converted to numpy."""

    def __init__(
        self,
        source: LakeSource,
        order: EpochOrder,
        convert: Callable[[pa.Table], Block],
        cached_pieces: int = 4,
    ) -> None:
        self.source = source
        self.order = order
        self.convert = convert
        self._pieces: LruCache[int, pa.Table] = LruCache(cached_pieces)
        self._window: tuple[int, Block, np.ndarray] | None = None
        self._ahead: dict[int, Future[pa.Table]] = {}  # pieces being read in the background

    def _piece(self, index: int) -> pa.Table:
        future = self._ahead.pop(index, None)
        if future is not None:
            table = future.result()
            self._pieces.put(index, table)
            return table
        return self._pieces.get_or_compute(index, lambda: self.source.read_piece(index))

    def _source_range(self, lo: int, hi: int) -> tuple[int, int]:
        """The source rows that positions [lo, hi) (in one window) come from."""
        if not self.order.shuffle:
            return lo, hi
        return self.order.window_bounds(lo // self.order.window)

    def _read_ahead(self, pool: ThreadPoolExecutor, lo: int, hi: int) -> None:
        """Start reading the pieces behind positions [lo, hi) that are not at hand."""
        for p, _, _ in self.order.source_slices(*self._source_range(lo, hi)):
            if p not in self._ahead and self._pieces.get(p) is None:
                self._ahead[p] = pool.submit(self.source.read_piece, p)

    def _source_rows(self, lo: int, hi: int) -> pa.Table:
        parts = [self._piece(p).slice(b, e - b) for p, b, e in self.order.source_slices(lo, hi)]
        if not parts:
            return self.source.schema.empty_table()
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def read(self, lo: int, hi: int) -> Block:
        """Positions [lo, hi), which must lie in one window, in epoch order.

        A shuffled window is converted once, then permuted in numpy: gathering whole
        rows of the stacked features is cheaper than gathering every Arrow column.
        """
        if not self.order.shuffle:
            return self.convert(self._source_rows(lo, hi))
        k = lo // self.order.window
        if self._window is None or self._window[0] != k:
            self._window = None  # let the previous window go before reading the next
            perm = self.order.permutation(k)
            assert perm is not None
            self._window = (k, self.convert(self._source_rows(*self._source_range(lo, hi))), perm)
        _, block, perm = self._window
        base = k * self.order.window
        rows = perm[lo - base : hi - base]
        return {name: values[rows] for name, values in block.items()}

    def chunks(self, segments: Iterable[Interval]) -> Iterator[Block]:
        """The rows of ``segments`` (positions, in the order given), one window part at a time.

        While one part is converted and consumed, the pieces of the next are read on a
        background thread (pyarrow and the merge release the GIL).
        """
        parts = ((a, b) for lo, hi in segments for _, a, b in self.order.split_by_window(lo, hi))
        with ThreadPoolExecutor(1, thread_name_prefix="raylake-read-ahead") as pool:
            current = next(parts, None)
            while current is not None:
                following = next(parts, None)
                if following is not None:
                    self._read_ahead(pool, *following)
                yield self.read(*current)
                current = following
            self._ahead.clear()


def segments_of(batches: Iterable[Batch]) -> Iterator[Interval]:
    """The batches' positions in reading order, adjacent runs merged."""
    run: Interval | None = None
    for batch in batches:
        for lo, hi in batch:
            if run is not None and run[1] == lo:
                run = (run[0], hi)
                continue
            if run is not None:
                yield run
            run = (lo, hi)
    if run is not None:
        yield run


def numpy_batches(reader: WindowReader, batches: Sequence[Batch]) -> Iterator[Block]:
    """The batches, converted: each the rows of its positions, in order."""
    return cut(reader.chunks(segments_of(batches)), (size(b) for b in batches))


def cut(blocks: Iterable[Block], sizes: Iterable[int]) -> Iterator[Block]:
    """Re-cut a stream of blocks into batches of the given sizes (views where possible).

    When the blocks run out, the rows left form one last, smaller batch.
    """
    blocks = iter(blocks)
    queue: deque[tuple[Block, int, int]] = deque()  # block, offset, rows
    have = 0
    for want in sizes:
        while have < want:
            block = next(blocks, None)
            if block is None:
                break
            n = _rows(block)
            if n:
                queue.append((block, 0, n))
                have += n
        want = min(want, have)
        if want == 0:
            return
        parts: list[Block] = []
        need = want
        while need:
            block, offset, n = queue[0]
            take = min(need, n - offset)
            parts.append({k: v[offset : offset + take] for k, v in block.items()})
            need -= take
            if offset + take == n:
                queue.popleft()
            else:
                queue[0] = (block, offset + take, n)
        have -= want
        if len(parts) == 1:
            yield parts[0]
        else:
            yield {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _rows(block: Block) -> int:
    return len(next(iter(block.values()))) if block else 0
