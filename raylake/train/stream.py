"""Reading positions of an epoch's global order, and cutting them into numpy batches.

A consumer (one rank's DataLoader worker, or one tf.data input pipeline) reads its
batches' positions window by window: the pieces behind a window are read once
(kept in a small cache, since a piece may straddle two windows) and converted to
numpy once; a shuffled window's rows are then put in the epoch's order with one
gather per array, and the batches are zero-copy slices of that (a batch that
straddles two chunks is the only other copy). Nothing here is per row in Python.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future

import numpy as np
import pyarrow as pa

from raylake.caching import LruCache
from raylake.train.convert import FEATURES_T, ORDER
from raylake.train.fill import Copiers, fill_pool
from raylake.train.prefetch import (
    DEFAULT_BYTES,
    DEFAULT_PIECES,
    CpuSlots,
    PieceWindow,
)
from raylake.train.sharding import Batch, EpochOrder, Interval, RankBatches, size
from raylake.train.source import LakeSource

Block = dict[str, np.ndarray]
# Local piece reads at once without a cap: one per two cores (one read decodes a piece's
# columns side by side on pyarrow's pool). On 2 cores one at a time: the pieces are
# ready one after the other and fewer are decoded in memory at once; 8 (read_ahead's
# default) from 16 cores, as before.
LOCAL_READS = max(1, (os.cpu_count() or 1) // 2)


class WindowReader:
    """The rows at positions [lo, hi) of one epoch's order, converted to numpy."""

    def __init__(
        self,
        source: LakeSource,
        order: EpochOrder,
        convert: Callable[[pa.Table], Block],
        cached_pieces: int = 4,
        read_ahead: int = DEFAULT_PIECES,
        read_ahead_bytes: int = DEFAULT_BYTES,
        loader_threads: int = 0,
        observe: Callable[[float, bool], None] | None = None,
        gather_late: bool = False,
        convert_once: Callable[[pa.Table], Block] | None = None,
        gather: Callable[[Block, np.ndarray, Copiers | None], Block] | None = None,
        carried: Carry | None = None,
    ) -> None:
        self.gather = _gather if gather is None else gather
        # Pieces read during the pass before for this one (its first), and where this
        # pass leaves the piece the next one starts with (see ``Carry``).
        self.carried = carried
        self.source = source
        # For rows converted for one use only (not kept for a later part of their
        # window): it may write them where the next stage wants them (a pinned slot).
        self.convert_once = convert if convert_once is None else convert_once
        # A whole shuffled window is handed on with its order (``ORDER``), for the feed
        # to gather where the window goes (on the device, fused with its transposition).
        self.gather_late = gather_late
        self.observe = observe  # told the read-ahead's fill at every piece taken
        self.order = order
        self.convert = convert
        self.read_ahead = read_ahead
        self.read_ahead_bytes = read_ahead_bytes
        # Decoding pieces and converting windows, at most this many at once (0: no cap,
        # pieces decoded on pyarrow's pool); docs/training.md, "The loader's share".
        self.loader_threads = loader_threads
        self._slots = CpuSlots(loader_threads)
        self._remote = source.context.file_io.is_remote
        self._pieces: LruCache[int, pa.Table] = LruCache(cached_pieces)
        self._cached = cached_pieces
        self._window: tuple[int, Block, np.ndarray] | None = None
        self._reads: PieceWindow[pa.Table] | None = None  # the reads ahead of ``chunks``
        # Threads that share a window's copies, during ``chunks`` (raylake/train/fill.py):
        # only without a cap on the loader's threads.
        self._copiers: Copiers | None = None
        self._following: dict[int, int] = {}  # shuffled window -> the one read after it
        self._next_order: tuple[int, Future[np.ndarray | None]] | None = None

    def _piece(self, index: int) -> pa.Table:
        table = self._pieces.get(index)
        if table is None and self.carried is not None:
            table = self.carried.take(index)
            if table is not None:
                self._pieces.put(index, table)
        if table is None:
            reads = self._reads
            table = self._read_piece(index) if reads is None else reads.take(index)
            self._pieces.put(index, table)
        return table

    def _read_piece(self, index: int) -> pa.Table:
        """One piece, decoded on this thread under the cap (on pyarrow's pool without)."""
        if not self.loader_threads:
            return self.source.read_piece(index)
        if self._remote:  # mostly waiting on round trips: no slot held while waiting
            return self.source.read_piece(index, use_threads=False)
        with self._slots:
            return self.source.read_piece(index, use_threads=False)

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
        copiers = self._copiers
        if not self.order.shuffle:
            rows = self._source_rows(lo, hi)  # pieces are waited for outside the cap
            with self._slots:
                return self._convert(self.convert_once, rows)
        k = lo // self.order.window
        if self._window is None or self._window[0] != k:
            self._window = None  # let the previous window go before reading the next
            perm = self._permutation(k)
            rows = self._source_rows(*source_range(self.order, lo, hi))
            if self.gather_late and hi - lo == len(perm):
                # A whole window, gathered later: its rows are used once, and no other
                # part of this consumer's reading lies in this window.
                with self._slots:
                    return {**self._convert(self.convert_once, rows), ORDER: perm}
            with self._slots:
                self._window = (k, self._convert(self.convert, rows), perm)
        _, block, perm = self._window
        base = k * self.order.window
        picked = perm[lo - base : hi - base]
        if self.gather_late and len(picked) == len(perm):  # a whole window: gathered later
            return {**block, ORDER: perm}
        with self._slots:
            return self.gather(block, picked, copiers)

    def _convert(self, convert: Callable[..., Block], rows: pa.Table) -> Block:
        if self._copiers is None:
            return convert(rows)
        return convert(rows, copiers=self._copiers)

    def _permutation(self, k: int) -> np.ndarray:
        """Window ``k``'s order; with copiers, the next window's is drawn on one of them
        while this one is converted (about half a millisecond for 65,536 rows)."""
        ahead, self._next_order = self._next_order, None
        perm = ahead[1].result() if ahead is not None and ahead[0] == k else None
        if perm is None:
            perm = self.order.permutation(k)
        assert perm is not None
        following = self._following.get(k)
        if self._copiers is not None and following is not None:
            future = self._copiers.pool.submit(self.order.permutation, following)
            self._next_order = (following, future)
        return perm

    def chunks(self, segments: Iterable[Interval]) -> Iterator[Block]:
        """The rows of ``segments`` (positions, in the order given), one window part at a time.

        While one part is converted and consumed, the pieces of the next ones are read on
        a window of threads (pyarrow and the merge release the GIL; docs/training.md,
        "Read-ahead"), at most ``read_ahead`` pieces and ``read_ahead_bytes`` ahead.
        """
        parts = window_parts(self.order, segments)
        source = self.source
        # Locally a read is CPU work: as many threads as the cap, and without a cap
        # LOCAL_READS: one read already decodes its columns on pyarrow's pool, and reads
        # side by side share the cores and finish late together while the converter
        # waits for the first (docs/benchmarks.md, "Third pass on the CPU epoch"). On an
        # object store a read mostly waits for round trips, which take no core: the
        # window keeps all its reads in flight, each decoding on its own thread once its
        # bytes are in. Locally the first piece is read alone (``ramp``): the first
        # window waited for all of them (first batch after 300-430 ms against 70-90 ms
        # here, the epoch no slower).
        local = self.loader_threads or LOCAL_READS
        plan = list(planned_pieces(self.order, parts))
        carry = self.carried
        ahead = None if carry is None else carry.next_first
        # The next pass's first piece is read last, while this pass's last windows are
        # taken, unless it is among the last pieces this pass takes (then still cached).
        read_ahead_next = (
            ahead is not None and self.read_ahead and ahead not in plan[-self._cached :]
        )
        # The first piece carried over from the pass before is not read again, and the
        # reads behind it need not wait for it (no ramp).
        first_carried = bool(plan) and carry is not None and carry.holds(plan[0])
        if first_carried:
            plan = plan[1:]
        if read_ahead_next and ahead is not None:
            plan.append(ahead)
        reads = PieceWindow(
            self._read_piece,
            plan,
            pieces=self.read_ahead,
            max_bytes=self.read_ahead_bytes,
            cost=lambda p: source.pieces[p].size_bytes,
            threads=None if self._remote else local,
            ramp=not self._remote and not first_carried,
            observe=self.observe,
        )
        self._reads = reads
        if self.order.shuffle:
            windows = list(dict.fromkeys(lo // self.order.window for lo, _ in parts))
            self._following = dict(itertools.pairwise(windows))
        finished = False
        # Copiers only where the loader may use threads at all: read-ahead on, no cap.
        wanted = 0 if self.loader_threads or not self.read_ahead else None
        with fill_pool(wanted) as copiers:
            self._copiers = copiers
            try:
                if not first_carried:
                    reads.fill()
                for i, part in enumerate(parts):
                    if first_carried and i == 1:
                        # The first window came from the carried piece: the reads start
                        # once it is out, so their decoding does not slow it down.
                        reads.fill()
                    yield self.read(*part)
                finished = True
            finally:
                self._reads = self._copiers = self._next_order = None
                if carry is not None and ahead is not None and finished:
                    table = self._pieces.get(ahead)
                    carry.keep(ahead, reads.harvest(ahead) if table is None else table)
                reads.close()


class Carry:
    """A piece read at the end of one pass for the next: a training loop's next epoch
    starts without waiting for its first read (docs/training.md, "Read-ahead").

    The loader predicts the piece the next pass of the same consumer reads first (the
    next epoch's order, from its start); the pass before reads it last, in its
    read-ahead, and leaves it here; the next pass takes it if it does start there. One
    piece is held between passes at most, and only after a pass that ran to its end.
    """

    def __init__(self, held: dict[int, pa.Table], next_first: int | None) -> None:
        self._held = held
        self.next_first = next_first
        self.left: dict[int, pa.Table] = {}  # for the next pass

    def holds(self, index: int) -> bool:
        return index in self._held

    def take(self, index: int) -> pa.Table | None:
        return self._held.pop(index, None)

    def keep(self, index: int, table: pa.Table | None) -> None:
        if table is not None:
            self.left[index] = table


def source_range(order: EpochOrder, lo: int, hi: int) -> tuple[int, int]:
    """The source rows that positions [lo, hi) (in one window) come from."""
    if not order.shuffle:
        return lo, hi
    return order.window_bounds(lo // order.window)


def planned_pieces(order: EpochOrder, parts: Iterable[Interval]) -> Iterator[int]:
    """The pieces that reading ``parts`` takes, in the order it takes them, each once in a
    row (a piece that straddles two parts is kept in the cache between them)."""
    last, window = None, None
    for lo, hi in parts:
        if order.shuffle:  # a shuffled window is read whole, once
            k = lo // order.window
            if k == window:
                continue
            window = k
        for p, _, _ in order.source_slices(*source_range(order, lo, hi)):
            if p != last:
                yield p
            last = p


def window_parts(order: EpochOrder, segments: Iterable[Interval]) -> list[Interval]:
    """``segments`` (positions) cut at the order's window boundaries."""
    return [(a, b) for lo, hi in segments for _, a, b in order.split_by_window(lo, hi)]


def _gather(block: Block, picked: np.ndarray, copiers: Copiers | None = None) -> Block:
    """The rows ``picked`` of a converted window (np.take: about 3x faster than
    ``values[picked]``), on this thread."""
    return {
        name: np.take(values, picked, axis=1 if name == FEATURES_T else 0)
        for name, values in block.items()
    }


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


def segments_and_sizes(batches: Sequence[Batch]) -> tuple[Iterator[Interval], Iterator[int]]:
    """The positions of ``batches`` in reading order (adjacent runs merged), and each
    batch's row count: what a consumer reads, and how it cuts what it read."""
    if isinstance(batches, RankBatches):  # whole runs: no per-batch Python (issue 16)
        return segments_of(batches.runs()), batches.sizes()
    return segments_of(batches), (size(b) for b in batches)


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
