"""Windows: the unit of conversion and of host-to-device copy (docs/training.md,
"Windows on the device").

A window is a run of rows in the epoch's order (a part of a shuffle window, thousands
of batches). It is converted once into one tensor per column group (the stacked
features, each named column, the label); on the way to a device it is packed into
one pinned host slot and copied with one host-to-device copy, and the device
transposes the features (the host fills them column by column) and applies a
shuffled window's permutation, in one gather. Batches are views of it: a batch costs
a slice per column group, never a conversion, a pin or a copy.

:class:`Stager` runs where windows are made (the loader's converting thread). With a
device it owns a ring of three pinned slots of at most a quarter of ``feed_bytes``
each (a window larger than a slot is staged in parts); a slot is written again only
after the host has seen its last copy finish, and with three the converter is rarely
held by that wait (the copy two windows back). Where a window is used once (not
shuffled, or a whole shuffle window gathered on the device), the converter writes its
stacked features straight into the next slot (``features_out``): the host packs only
the other columns. Device windows alive at once are the one being copied, the one
waiting in the hand-over queue and the one the trainer cuts: three quarters of
``feed_bytes`` at most, so pinned host memory and device memory held by the loader
each stay within ``feed_bytes``.

:func:`cut_windows` runs on the trainer's thread. When it takes the first batch of a
window, the trainer's stream waits for that window's copy and the window's tensors are
marked as used by it (raylake/train/device.py); batches that straddle two windows are
the only ones copied (``torch.cat``). A batch is a view, so a window's memory lives as
long as any of its batches does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from raylake.train.convert import FEATURES, FEATURES_T, ORDER
from raylake.train.device import Backend, pin
from raylake.train.prefetch import background
from raylake.train.stats import FeedRecorder

Tensors = dict[str, torch.Tensor]
DEFAULT_FEED_BYTES = 256 << 20
RING = 3  # pinned slots, each at most a quarter of feed_bytes
_ALIGN = 256  # bytes: every column group of a packed window starts on this boundary


@dataclass(frozen=True)
class Window:
    """A window's column groups (on the device when it was copied there)."""

    tensors: Tensors
    rows: int
    row_bytes: int
    held: int = 0  # device bytes it holds (0: not copied)
    marker: Any = None  # the end of its copy


def rows_of(tensors: Tensors) -> int:
    for key, t in tensors.items():
        return int(t.shape[1]) if key == FEATURES_T else len(t)
    return 0


def _row_bytes(tensors: Tensors) -> int:
    """Bytes of one row of the batches (the gather order is not handed out)."""
    if not rows_of(tensors):
        return 0
    return sum(
        (t[:, :1] if k == FEATURES_T else t[:1]).nbytes for k, t in tensors.items() if k != ORDER
    )


def on_host(tensors: Tensors) -> Tensors:
    """A window in the batches' layout, made on the host: features row-major, rows in
    the epoch's order (for a window that cannot go to the device in one copy)."""
    tensors = dict(tensors)
    columns = tensors.pop(FEATURES_T, None)
    order = tensors.pop(ORDER, None)
    if columns is not None:
        tensors = {FEATURES: columns.t(), **tensors}
    if order is not None:
        return {k: _gathered(t, order) for k, t in tensors.items()}
    if columns is not None:
        tensors[FEATURES] = tensors[FEATURES].contiguous()
    return tensors


# torch's index_select has no kernel for these: gathered as the signed type of their width.
_UNSIGNED_AS_SIGNED = {
    getattr(torch, f"uint{bits}"): getattr(torch, f"int{bits}")
    for bits in (16, 32, 64)
    if hasattr(torch, f"uint{bits}")
}


def _gathered(t: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The rows ``order`` of ``t`` (a uint16/32/64 label's bits as they are)."""
    signed = _UNSIGNED_AS_SIGNED.get(t.dtype)
    if signed is None:
        return t.index_select(0, order)
    return t.view(signed).index_select(0, order).view(t.dtype)


class Stager:
    """Host windows to device windows through a ring of pinned slots (module docstring)."""

    def __init__(
        self,
        backend: Backend | None,
        pin: bool,
        feed_bytes: int,
        recorder: FeedRecorder,
        ring: int = RING,
    ) -> None:
        self.backend = backend
        self.pin = pin
        self.ring = ring
        self.slot_bytes = max(1, feed_bytes // (ring + 1))
        self.recorder = recorder
        self._slots: list[tuple[torch.Tensor, Any]] = []
        self._next = 0
        self._reserved: tuple[int, torch.Tensor] | None = None  # (ring index, slot)

    def features_out(self, shape: tuple[int, int], dtype: np.dtype) -> np.ndarray | None:
        """Where the converter writes a window's stacked features (columns first): the
        start of the next pinned slot, when the window will go in one copy; None: it
        makes them in memory of its own. Only for a window converted for one use (the
        slot is written again after the ring's other slots)."""
        if self.backend is None:
            return None
        nbytes = shape[0] * shape[1] * dtype.itemsize
        if not nbytes:
            return None
        # The features and their gathered copy on the device take half a slot at most;
        # the columns beside them fit the rest of that half unless the features are
        # most of a row (then the window may be staged in parts, made on the host).
        if nbytes * 3 > self.slot_bytes // 2:
            return None
        index = self._next
        slot = self._slot(min(self.slot_bytes, nbytes * 3 // 2 + 8 * _ALIGN))
        self._reserved = (index, slot)
        return slot[:nbytes].numpy().view(dtype).reshape(shape)

    def __call__(self, tensors: Tensors) -> Iterator[Window]:
        n = rows_of(tensors)
        reserved, self._reserved = self._reserved, None
        if n == 0:
            return
        self.recorder.window()
        if self.backend is None:
            tensors = on_host(tensors)
            if self.pin:  # pinned host batches, asked for without a device: fresh memory,
                # since a batch (a view) may outlive any reuse of it
                tensors = {k: pin(t) for k, t in tensors.items()}
            yield Window(tensors, n, _row_bytes(tensors))
            return
        row_bytes = _row_bytes(tensors)
        pad = len(tensors) * _ALIGN
        if FEATURES_T in tensors or ORDER in tensors:
            # Transposed or gathered on the device into new tensors: the copy and its
            # result are both held, so a window in one copy takes half a slot at most.
            if n * (row_bytes + 8) + pad <= self.slot_bytes // 2:
                yield self._copy(tensors, n, row_bytes, transform=True, reserved=reserved)
                return
            tensors = on_host(tensors)  # too large for one copy: made here, then split
        # Rows of a part such that its column groups, each padded to _ALIGN, fit a slot.
        step = max(1, (self.slot_bytes - pad) // max(row_bytes, 1))
        for lo in range(0, n, step):
            part = tensors if step >= n else {k: t[lo : lo + step] for k, t in tensors.items()}
            yield self._copy(part, rows_of(part), row_bytes, transform=False)

    def _slot(self, nbytes: int) -> torch.Tensor:
        """The next slot of the ring, at least ``nbytes``, once its last copy is done."""
        assert self.backend is not None
        i = self._next
        self._next = (i + 1) % self.ring
        if i < len(self._slots):
            slot, marker = self._slots[i]
            if marker is not None:
                self.backend.wait_host(marker)
                # Waited once: a slot reserved for a window that then went another way
                # keeps no marker for close() to wait on again (the window process's
                # acknowledgements are used up by a wait: it waited forever).
                self._slots[i] = (slot, None)
            if slot.numel() >= nbytes:
                return slot
            self.recorder.hold_pinned(-slot.numel())
            self.backend.release(slot)
        # a little more than this window, so that slightly larger ones reuse the slot
        slot = self.backend.pinned(max(nbytes, min(self.slot_bytes, nbytes * 5 // 4)))
        self.recorder.hold_pinned(slot.numel())
        if i < len(self._slots):
            self._slots[i] = (slot, None)
        else:
            self._slots.append((slot, None))
        return slot

    def _copy(
        self,
        tensors: Tensors,
        n: int,
        row_bytes: int,
        transform: bool,
        reserved: tuple[int, torch.Tensor] | None = None,
    ) -> Window:
        assert self.backend is not None
        places: list[tuple[str, int, torch.Tensor]] = []
        end = 0
        for key, t in tensors.items():
            places.append((key, end, t))
            end += -(-t.nbytes // _ALIGN) * _ALIGN
        if reserved is not None and reserved[1].numel() >= end:
            index, slot = reserved  # the converter wrote the features into it
        else:
            index = self._next
            slot = self._slot(end)
        packed = 0
        host = slot.numpy()
        for _, offset, t in places:
            if offset == 0 and t.data_ptr() == slot.data_ptr():
                continue  # written in place by the converter
            _pack(host, offset, t)
            packed += t.nbytes
        self.recorder.packed(packed)

        finish = Unpack(
            tuple((key, offset, t.dtype, tuple(t.shape)) for key, offset, t in places), transform
        )
        out, marker = self.backend.copy(slot[:end], finish)
        self._slots[index] = (slot, marker)
        held = end + (n * row_bytes if transform else 0)
        self.recorder.copied()
        self.recorder.hold_device(held)
        return Window(out, n, row_bytes, held, marker)

    def close(self) -> None:
        """Wait for the copies still reading the slots, then let the slots go."""
        if self.backend is not None:
            for _, marker in self._slots:
                if marker is not None:
                    self.backend.wait_host(marker)
        for slot, _ in self._slots:
            self.recorder.hold_pinned(-slot.numel())
            if self.backend is not None:
                self.backend.release(slot)
        self._slots = []


def _pack(slot: np.ndarray, offset: int, t: torch.Tensor) -> None:
    """``t``'s bytes into the pinned slot at ``offset``, copied by numpy: torch's
    ``copy_`` of a CPU tensor this size runs on torch's intra-op thread pool, and
    waking that pool from the converting thread took 1-2 ms a window on a 16-core GPU
    host (for a 256 KB label column; docs/benchmarks.md, "Feeding a GPU")."""
    if not t.numel():
        return
    src = t.contiguous().reshape(-1).view(torch.uint8).numpy()
    np.copyto(slot[offset : offset + src.size], src)


@dataclass(frozen=True)
class Unpack:
    """A packed window's bytes back to its column groups: views at each group's offset,
    then (``transform``) the features' transposition and a shuffled window's gather, on
    the device's stream. Plain data, so that a window packed in another process is
    unpacked here (raylake/train/window_process.py)."""

    places: tuple[tuple[str, int, torch.dtype, tuple[int, ...]], ...]  # key, offset, dtype, shape
    transform: bool

    def __call__(self, buffer: torch.Tensor) -> Tensors:
        views = {}
        for key, offset, dtype, shape in self.places:
            nbytes = math.prod(shape) * dtype.itemsize
            views[key] = buffer[offset : offset + nbytes].view(dtype).view(shape)
        return on_host(views) if self.transform else views


Run = tuple[dict[str, Sequence[torch.Tensor]], list[int]]  # column groups' batches, rows


def cut_windows(
    windows: Iterable[Window],
    sizes: Iterable[int],
    backend: Backend | None,
    recorder: FeedRecorder,
) -> Iterator[Run]:
    """Batches of the given sizes as views of the windows, a run at a time: every batch
    that lies in the window in hand is cut at once (one ``split`` per column group, so
    nothing per batch in Python), with their row counts; a batch that straddles two
    windows is a run of one.

    When the windows run out, the rows left form one last, smaller batch.
    """
    source = iter(windows)
    sizes = iter(sizes)
    current: Window | None = None
    cur: Tensors = {}
    off = n = 0
    try:
        want = next(sizes, None)
        while want is not None:
            if off + want <= n:  # the common case: views of the window in hand
                run, total = [want], want
                want = None
                for want in sizes:
                    if off + total + want > n:
                        break
                    run.append(want)
                    total += want
                else:
                    want = None
                start, off = off, off + total
                if len(run) == 1:
                    yield {k: (t[start:off],) for k, t in cur.items()}, run
                else:
                    yield {k: t[start:off].split(run) for k, t in cur.items()}, run
                continue
            parts = [{k: t[off:n] for k, t in cur.items()}] if off < n else []
            need = want - (n - off)
            while need > 0:
                _finish(current, recorder)  # its rows up to the end were handed out
                current = None
                current = next(source, None)
                if current is None:
                    cur, off, n = {}, 0, 0
                    break
                if backend is not None and current.held:
                    backend.take(current.tensors, current.marker)
                cur, n = current.tensors, current.rows
                recorder.row_bytes = current.row_bytes  # the bytes of each batch handed over
                off = min(need, n)
                if off:
                    parts.append({k: t[:off] for k, t in cur.items()})
                need -= off
            got = want - need
            if got == 0:
                return
            if len(parts) == 1:
                yield {k: (t,) for k, t in parts[0].items()}, [got]
            else:
                yield {k: (torch.cat([p[k] for p in parts]),) for k in parts[0]}, [got]
            want = next(sizes, None)
    finally:
        _finish(current, recorder)
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _finish(window: Window | None, recorder: FeedRecorder) -> None:
    """The trainer is done cutting ``window`` (its batches may live on)."""
    if window is None:
        return
    if window.held:
        recorder.hold_device(-window.held)


def stage_all(
    blocks: Iterator[Any], to_tensors: Callable[[Any], Tensors], stager: Stager
) -> Iterator[Window]:
    """Windows of ``blocks`` (numpy blocks, converted to tensors once each); on the
    converting thread. Closing it closes ``blocks`` and lets the pinned ring go."""
    try:
        for block in blocks:
            yield from stager(to_tensors(block))
    finally:
        stager.close()
        close = getattr(blocks, "close", None)
        if close is not None:
            close()


class TorchFeed:
    """One pass of torch batches from numpy windows (raylake/train/passes.py, ``Feed``):
    windows converted to tensors and staged to the device on the converting thread,
    cut into views, put in the user's structure and transformed on the trainer's
    thread (with a transform and no device copy, ``prefetch`` batches ahead on a thread
    of their own)."""

    def __init__(
        self,
        to_tensors: Callable[[Any], Tensors],
        make: Callable[[dict[str, Sequence[torch.Tensor]]], Iterable[Any]],
        transform: Callable[[Any], Any] | None,
        backend: Backend | None,
        pin: bool,
        feed_bytes: int,
        prefetch: int,
        recorder: FeedRecorder | None = None,
        maker: Any = None,
        ring: int = RING,
    ) -> None:
        self.recorder = FeedRecorder() if recorder is None else recorder
        self.maker = maker  # a WindowProcess: the windows are made there
        self.backend = backend
        self.device_layout = backend is not None
        self.to_tensors = to_tensors
        self.make = make
        self.transform = transform
        self.prefetch = prefetch
        self.stager = Stager(backend, pin, feed_bytes, self.recorder, ring)

    def features_out(self, shape: tuple[int, int], dtype: np.dtype) -> np.ndarray | None:
        """Where a window used once writes its stacked features (Stager.features_out)."""
        return self.stager.features_out(shape, dtype)

    def windows(self, blocks: Iterator[Any]) -> Iterator[Window]:
        return stage_all(blocks, self.to_tensors, self.stager)

    def batches(self, windows: Iterator[Window], sizes: Iterator[int]) -> Iterator[tuple[Any, int]]:
        made = self._made(cut_windows(windows, sizes, self.backend, self.recorder))
        if self.transform is not None and self.prefetch and self.backend is None:
            return background(made, self.prefetch, "raylake-prefetch")
        return made

    def _made(self, runs: Iterator[Run]) -> Iterator[tuple[Any, int]]:
        make, transform = self.make, self.transform
        try:
            for parts, rows in runs:
                if transform is None:
                    yield from zip(make(parts), rows)
                else:
                    for batch, n in zip(make(parts), rows):
                        yield transform(batch), n
        finally:
            close = getattr(runs, "close", None)
            if close is not None:
                close()
