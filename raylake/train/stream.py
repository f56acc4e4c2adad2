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

    def _piece(self, index: int) -> pa.Table:
        return self._pieces.get_or_compute(index, lambda: self.source.read_piece(index))

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
            w_lo, w_hi = self.order.window_bounds(k)
            perm = self.order.permutation(k)
            assert perm is not None
            self._window = (k, self.convert(self._source_rows(w_lo, w_hi)), perm)
        _, block, perm = self._window
        base = k * self.order.window
        rows = perm[lo - base : hi - base]
        return {name: values[rows] for name, values in block.items()}

    def chunks(self, segments: Sequence[Interval]) -> Iterator[Block]:
        """The rows of ``segments`` (positions, in the order given), one window part at a time."""
        for lo, hi in segments:
            for _, a, b in self.order.split_by_window(lo, hi):
                yield self.read(a, b)


def segments_of(batches: Sequence[Batch]) -> list[Interval]:
    """The batches' positions in reading order, adjacent runs merged."""
    out: list[Interval] = []
    for batch in batches:
        for lo, hi in batch:
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    return out


def numpy_batches(reader: WindowReader, batches: Sequence[Batch]) -> Iterator[Block]:
    """The batches, converted: each the rows of its positions, in order."""
    return cut(reader.chunks(segments_of(batches)), [size(b) for b in batches])


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
