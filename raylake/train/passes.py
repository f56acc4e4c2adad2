"""One consumer's pass over its batches, and the feeds that make them (raylake/train/loader.py).

A feed turns the numpy windows a consumer reads (raylake/train/stream.py) into the
batches its framework wants: on the converting thread it makes windows (torch:
tensors, copied to the device once per window, raylake/train/windows.py), on the
trainer's thread it cuts them into batches. :class:`Pass` is the iterator the trainer
holds: it counts the batches taken (the position), times the trainer's waits
(raylake/train/stats.py) and closes every stage when it is closed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from raylake.train.stats import FeedRecorder, FeedStats
from raylake.train.stream import Block, cut


class Feed(Protocol):
    """How a framework turns one consumer's numpy windows into its batches."""

    recorder: FeedRecorder
    # Whether windows come columns first (Converter.columns_first) and shuffled windows
    # ungathered (with their ORDER): what a feed that copies to a device does itself.
    device_layout: bool

    def windows(self, blocks: Iterator[Block]) -> Iterator[Any]:
        """Windows made from converted blocks, on the converting thread; closing it
        closes ``blocks``."""
        ...

    def batches(self, windows: Iterator[Any], sizes: Iterator[int]) -> Iterator[tuple[Any, int]]:
        """Batches of the given sizes (and their row counts), on the trainer's thread."""
        ...


class NumpyFeed:
    """Batches as numpy blocks: views of the windows (to_tf_dataset's feed)."""

    def __init__(self) -> None:
        self.recorder = FeedRecorder()
        self.device_layout = False

    def windows(self, blocks: Iterator[Block]) -> Iterator[Block]:
        try:
            for block in blocks:
                self.recorder.window()
                yield block
        finally:
            close(blocks)

    def batches(
        self, windows: Iterator[Block], sizes: Iterator[int]
    ) -> Iterator[tuple[Block, int]]:
        recorder = self.recorder
        for block in cut(windows, sizes):
            rows = len(next(iter(block.values()))) if block else 0
            recorder.delivered(sum(a.nbytes for a in block.values()))
            yield block, rows


class NumpyRunFeed(NumpyFeed):
    """Batches as runs (to_tf_dataset's feed): the batches of one size that lie in one
    window as one block of shape ``(k, size, ...)``, a view of the window; a batch that
    straddles two windows, or of another size, as a run of one. The consumer takes a
    run as one element and splits it (``tf.data``'s ``unbatch``), so the conversion to
    its tensors is per run, not per batch. The row count of a run is its rows."""

    def batches(
        self, windows: Iterator[Block], sizes: Iterator[int]
    ) -> Iterator[tuple[Block, int]]:
        recorder = self.recorder
        for block, rows in runs(windows, sizes):
            recorder.delivered(sum(a.nbytes for a in block.values()))
            yield block, rows


def runs(windows: Iterable[Block], sizes: Iterable[int]) -> Iterator[tuple[Block, int]]:
    """Runs of batches of the given sizes, cut from the windows (NumpyRunFeed). When
    the windows run out, the rows left form one last, smaller batch."""
    source, sizes = iter(windows), iter(sizes)
    cur: Block = {}
    off = n = 0
    want = next(sizes, None)
    while want is not None:
        if off + want <= n:  # the batches of this size that lie in this window
            k, following = 1, None
            for following in sizes:
                if following != want or off + (k + 1) * want > n:
                    break
                k += 1
            else:
                following = None
            end = off + k * want
            yield (
                {key: v[off:end].reshape(k, want, *v.shape[1:]) for key, v in cur.items()},
                (k * want),
            )
            off, want = end, following
            continue
        parts = [{key: v[off:n] for key, v in cur.items()}] if off < n else []
        need = want - (n - off)
        while need > 0:
            block = next(source, None)
            if block is None:
                cur, off, n = {}, 0, 0
                break
            cur, n = block, _rows(block)
            off = min(need, n)
            if off:
                parts.append({key: v[:off] for key, v in cur.items()})
            need -= off
        got = want - need
        if got == 0:
            return
        one = (
            parts[0]
            if len(parts) == 1
            else {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        )
        yield {key: v.reshape(1, got, *v.shape[1:]) for key, v in one.items()}, got
        want = next(sizes, None)


def _rows(block: Block) -> int:
    return len(next(iter(block.values()))) if block else 0


def close(it: object) -> None:
    """Close an iterator that can be closed (a generator, a stage)."""
    method = getattr(it, "close", None)
    if method is not None:
        method()


class Taken:
    """Batches a consumer took in a pass (the loader keeps this, not the pass itself,
    so that a pass the trainer drops is collected and closed)."""

    __slots__ = ("batches",)

    def __init__(self) -> None:
        self.batches = 0


class Pass(Iterator[Any]):
    """One consumer's batches of one pass: what ``iter(dataset)`` returns.

    ``close()`` (also on ``break``, an exception, or garbage collection) closes every
    stage explicitly, in order, so each thread is stopped and joined at once. Closing
    only the outermost generator used to leave that to reference counting, and on
    Python 3.12 before 3.12.4 ``generator.close()`` of a generator with no ``try``
    block can keep its locals (CPython gh-118272): the stages it held, and their
    threads, lived on (the GPU host's Python 3.12.3).
    """

    def __init__(
        self,
        batches: Iterator[tuple[Any, int]],
        stages: list[object],
        recorder: FeedRecorder,
    ) -> None:
        self.taken = Taken()
        self._batches = batches
        self._stages = [batches, *stages]  # outermost first
        self._recorder = recorder

    def __iter__(self) -> Pass:
        return self

    def __next__(self) -> Any:
        start = time.perf_counter()
        try:
            batch, rows = next(self._batches)
        except BaseException:
            self.close()
            raise
        self.taken.batches += 1  # counted before the caller has it, as StatefulDataLoader expects
        self._recorder.waited(start, rows)
        return batch

    def stats(self) -> FeedStats:
        """How this pass fed its consumer so far (raylake/train/stats.py)."""
        return self._recorder.snapshot()

    def close(self) -> None:
        stages, self._stages = self._stages, []
        for stage in stages:
            close(stage)

    def __del__(self) -> None:
        self.close()


STATE_KEY = "raylake_train_state"
STATE_VERSION = 1
