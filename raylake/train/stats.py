"""How well a loader fed its trainer: waits, rows, bytes, windows, copies (``ds.stats()``).

The question users ask is "is my GPU starved by the loader?". :class:`FeedStats`
answers it for one pass: how long the trainer waited inside ``next()`` (in all, and
per batch at the median and the 99th percentile), what it received, how many windows
were converted and copied to the device, the most pinned host and device memory the
loader held, and how full the read-ahead was when a piece was needed.

Recording is a few additions per batch and a bucket of a fixed histogram (no system
call, nothing kept per batch): percentiles are read from 1/8-octave buckets, so they
are exact to about 9%.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

_PER_OCTAVE = 8
_BUCKETS = 40 * _PER_OCTAVE  # 2^-30 s (1 ns) .. 2^10 s
_LOW = -30


@dataclass(frozen=True)
class FeedStats:
    """One pass of a loader, as the trainer saw it (docs/training.md, "Is the GPU starved?").

    ``wait_s`` is the time the trainer spent inside the loader's ``next()`` (blocked on
    data, cutting the batch, the transform); ``elapsed_s`` runs from the first ``next()``
    to the last, so ``wait_fraction`` near 0 means the trainer never waited and near 1
    that it did little else. ``first_wait_s`` is the wait for the first batch (the
    pass's start-up: its first pieces read and its first window made). ``read_ahead_fill`` is the mean share of the read-ahead
    window in flight when a piece was taken; ``pieces_ready`` the share of pieces
    already read by then. ``packed_bytes`` is what the host copied into pinned memory
    for the device copies (the stacked features are written there in place where a
    window is used once, so mostly the other columns).
    """

    batches: int = 0
    rows: int = 0
    bytes: int = 0
    wait_s: float = 0.0
    wait_p50_s: float = 0.0
    wait_p99_s: float = 0.0
    wait_max_s: float = 0.0
    first_wait_s: float = 0.0
    elapsed_s: float = 0.0
    windows: int = 0
    device_copies: int = 0
    pinned_bytes_peak: int = 0
    device_bytes_peak: int = 0
    packed_bytes: int = 0
    read_ahead_fill: float = 0.0
    pieces_ready: float = 0.0

    @property
    def wait_fraction(self) -> float:
        return self.wait_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["wait_fraction"] = self.wait_fraction
        out["rows_per_s"] = self.rows_per_s
        return out

    def __str__(self) -> str:
        return (
            f"{self.batches} batches, {self.rows:,} rows, {self.bytes / 1e6:.1f} MB in "
            f"{self.elapsed_s:.3f}s; waited {self.wait_s:.3f}s ({self.wait_fraction:.1%}), "
            f"per batch p50 {self.wait_p50_s * 1e6:.1f} us, p99 {self.wait_p99_s * 1e6:.1f} us, "
            f"first {self.first_wait_s * 1e3:.1f} ms; "
            f"{self.windows} windows, {self.device_copies} device copies, peak pinned "
            f"{self.pinned_bytes_peak / 1e6:.1f} MB, device {self.device_bytes_peak / 1e6:.1f} MB; "
            f"read-ahead {self.read_ahead_fill:.0%} full, {self.pieces_ready:.0%} of pieces ready"
        )


class FeedRecorder:
    """The counters of one pass (written by the loader's threads, read by ``stats()``)."""

    def __init__(self) -> None:
        self.batches = 0
        self.rows = 0
        self.bytes = 0
        # Bytes of a row of the batches handed over (0 where a feed counts its blocks'
        # bytes itself): bytes count as the trainer takes its batches, not as a window
        # is cut, so that a pass stopped early or a batch drop_last drops is not counted.
        self.row_bytes = 0
        self.wait = 0.0
        self.wait_max = 0.0
        self.first: float | None = None
        self.first_wait = 0.0
        self.last = 0.0
        self.histogram = [0] * _BUCKETS
        self.windows = 0
        self.device_copies = 0
        self.pinned = 0
        self.pinned_peak = 0
        self.device = 0
        self.device_peak = 0
        self.packed_bytes = 0
        self.takes = 0
        self.in_flight = 0.0  # sum over takes of the read-ahead's fill
        self.ready = 0
        self._lock = threading.Lock()  # memory is held on one thread, let go on another

    def __reduce__(self) -> tuple[type[FeedRecorder], tuple[()]]:
        return FeedRecorder, ()  # a copy (for a DataLoader worker) counts its own passes

    def waited(self, start: float, rows: int) -> None:
        """A batch of ``rows`` handed over; the trainer asked for it at ``start``."""
        now = time.perf_counter()
        dt = now - start
        if self.first is None:
            self.first = start
            self.first_wait = dt
        self.last = now
        self.batches += 1
        self.rows += rows
        self.bytes += rows * self.row_bytes
        self.wait += dt
        if dt > self.wait_max:
            self.wait_max = dt
        if dt > 0:
            i = int((math.log2(dt) - _LOW) * _PER_OCTAVE)
            self.histogram[min(max(i, 0), _BUCKETS - 1)] += 1
        else:
            self.histogram[0] += 1

    def window(self) -> None:
        self.windows += 1

    def copied(self) -> None:
        self.device_copies += 1

    def packed(self, nbytes: int) -> None:
        self.packed_bytes += nbytes

    def delivered(self, nbytes: int) -> None:
        self.bytes += nbytes

    def hold_pinned(self, nbytes: int) -> None:
        with self._lock:
            self.pinned += nbytes
            self.pinned_peak = max(self.pinned_peak, self.pinned)

    def hold_device(self, nbytes: int) -> None:
        with self._lock:
            self.device += nbytes
            self.device_peak = max(self.device_peak, self.device)

    def piece_taken(self, fill: float, ready: bool) -> None:
        self.takes += 1
        self.in_flight += fill
        self.ready += ready

    def snapshot(self) -> FeedStats:
        counts = np.asarray(self.histogram)
        return FeedStats(
            batches=self.batches,
            rows=self.rows,
            bytes=self.bytes,
            wait_s=self.wait,
            wait_p50_s=_quantile(counts, 0.5),
            wait_p99_s=_quantile(counts, 0.99),
            wait_max_s=self.wait_max,
            first_wait_s=self.first_wait,
            elapsed_s=0.0 if self.first is None else self.last - self.first,
            windows=self.windows,
            device_copies=self.device_copies,
            pinned_bytes_peak=self.pinned_peak,
            device_bytes_peak=self.device_peak,
            packed_bytes=self.packed_bytes,
            read_ahead_fill=self.in_flight / self.takes if self.takes else 0.0,
            pieces_ready=self.ready / self.takes if self.takes else 0.0,
        )


def _quantile(counts: np.ndarray, q: float) -> float:
    total = int(counts.sum())
    if not total:
        return 0.0
    i = int(np.searchsorted(np.cumsum(counts), q * total, side="left"))
    return float(2.0 ** ((i + 0.5) / _PER_OCTAVE + _LOW))  # the bucket's middle
