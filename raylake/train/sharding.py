"""Exact, elastic sharding of an epoch's rows over ranks and DataLoader workers.

Pure Python and numpy (no torch, no table access), so it is tested on its own and
shared by the PyTorch and TensorFlow loaders. docs/training.md explains the design;
in short:

- **Pieces**: the pinned snapshot's rows cut into row groups (append tables) or merge
  sections (primary-key tables), each with its exact row count.
- **Global order** (:class:`EpochOrder`): pieces permuted by ``(seed, epoch)``, their
  rows concatenated (the *source* order), then permuted within consecutive windows of
  ``window`` rows, each window by ``(seed, epoch, window index)``. It depends only on
  the seed, the epoch, the snapshot's pieces and the window: never on how many ranks
  or workers read it. A *position* is an index into this order.
- **Division** (:class:`Division`): the positions still to read this epoch, cut into
  batches on the global grid (multiples of ``batch_size``; the same batches whatever
  the world size), dealt to ranks in contiguous runs of equal length, then to each
  rank's workers in contiguous blocks. The rows that do not fill a last round of
  full batches are spread evenly over the ranks as one smaller batch each (or dropped
  with ``drop_last``), so every rank takes the same number of steps.
- **Progress** is a set of positions: after ``k`` steps on every rank the consumed
  positions are known exactly (DataLoader delivers a rank's workers round-robin), so
  a job may resume with another world size or worker count and read exactly the rest.

Intervals are half-open ``(lo, hi)`` pairs of positions; interval lists are sorted,
disjoint and non-adjacent (see :func:`normalize`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, overload

import numpy as np

from raylake.arguments import check_count
from raylake.errors import ResumeStateError

Interval = tuple[int, int]
Intervals = tuple[Interval, ...]
Batch = Intervals  # the positions of one batch, in order

# Tags that keep the random streams of pieces and windows apart.
_PIECES, _WINDOW = 0, 1


# -- interval arithmetic ------------------------------------------------------------------


def normalize(intervals: Iterable[Sequence[int]]) -> Intervals:
    """Sorted, merged, non-empty intervals."""
    items = sorted((int(lo), int(hi)) for lo, hi in intervals if hi > lo)
    merged: list[Interval] = []
    for lo, hi in items:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def size(intervals: Iterable[Interval]) -> int:
    return sum(hi - lo for lo, hi in intervals)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Positions of ``a`` that are not in ``b`` (both normalized)."""
    out: list[Interval] = []
    j = 0
    for lo, hi in a:
        while j < len(b) and b[j][1] <= lo:
            j += 1
        k, cur = j, lo
        while k < len(b) and b[k][0] < hi:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < hi:
            out.append((cur, hi))
    return tuple(out)


def cut(intervals: Intervals, offset: int, length: int) -> Intervals:
    """``length`` positions of ``intervals`` (taken as one sequence) from ``offset`` on."""
    out: list[Interval] = []
    for lo, hi in intervals:
        n = hi - lo
        if offset >= n:
            offset -= n
            continue
        take = min(n - offset, length)
        out.append((lo + offset, lo + offset + take))
        length -= take
        offset = 0
        if length == 0:
            break
    return tuple(out)


# -- the global order of an epoch -----------------------------------------------------------


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in key]))


@functools.cache
def shuffle_stream() -> str:
    """A fingerprint of the permutations this process's numpy draws for a seed.

    Shuffled positions are indices into orders numpy draws, and numpy may change what
    its generators draw between versions (its policy, NEP 19, keeps only the legacy
    RandomState fixed). A position saved where numpy drew other permutations would
    name other rows here; positions carry this fingerprint so that is caught.
    """
    drawn = _rng(1, 2, 3).permutation(1000).astype(np.int64)
    return hashlib.sha256(drawn.tobytes()).hexdigest()[:16]


def check_shuffle_stream(state: Mapping[str, Any], what: str) -> None:
    """ResumeStateError where the shuffled ``what`` in ``state`` was saved by a numpy
    whose permutations differ from this one's (states without the fingerprint, saved
    before it was recorded, cannot be checked)."""
    saved = state.get("shuffle_stream")
    if saved is None or saved == shuffle_stream():
        return
    raise ResumeStateError(
        f"this {what} was saved where numpy {state.get('numpy', '(unknown)')} draws other "
        f"permutations than numpy {np.__version__} here, and its shuffled order cannot be "
        f"drawn again: its remaining rows would be other rows. Resume it with numpy "
        f"{state.get('numpy', 'of that run')}, or start its epoch again"
    )


def stream_fields() -> dict[str, str]:
    """What a saved state records of the permutations it was made with."""
    return {"shuffle_stream": shuffle_stream(), "numpy": np.__version__}


@dataclass(frozen=True)
class EpochOrder:
    """The order in which an epoch visits the rows of a snapshot's pieces."""

    counts: tuple[int, ...]  # exact rows of each piece, in plan order
    seed: int = 0
    epoch: int = 0
    shuffle: bool = True
    window: int = 1 << 16  # rows per shuffle window

    def __post_init__(self) -> None:
        check_count("shuffle_window", self.window, 1)
        check_count("seed", self.seed)
        check_count("epoch", self.epoch)

    @cached_property
    def piece_order(self) -> np.ndarray:
        """Plan indices of the pieces in epoch order."""
        n = len(self.counts)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        return _rng(self.seed, self.epoch, _PIECES).permutation(n).astype(np.int64)

    @cached_property
    def starts(self) -> np.ndarray:
        """Source position of each piece in epoch order, plus the total at the end."""
        ordered = np.asarray(self.counts, dtype=np.int64)[self.piece_order]
        return np.concatenate([[0], np.cumsum(ordered)]).astype(np.int64)

    @property
    def total(self) -> int:
        return int(self.starts[-1])

    def window_bounds(self, k: int) -> Interval:
        lo = k * self.window
        return lo, min(lo + self.window, self.total)

    def source_slices(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """``(piece, begin, end)`` row ranges of plan-order pieces covering source [lo, hi)."""
        out = []
        first = int(np.searchsorted(self.starts, lo, side="right")) - 1
        for i in range(max(first, 0), len(self.piece_order)):
            start, end = int(self.starts[i]), int(self.starts[i + 1])
            if start >= hi:
                break
            if end > lo and end > start:
                out.append((int(self.piece_order[i]), max(lo, start) - start, min(hi, end) - start))
        return out

    def permutation(self, k: int) -> np.ndarray | None:
        """Window ``k``: position ``lo + i`` holds the source row ``lo + perm[i]``."""
        if not self.shuffle:
            return None
        lo, hi = self.window_bounds(k)
        return (
            _rng(self.seed, self.epoch, _WINDOW, k)
            .permutation(hi - lo)
            .astype(np.int64, copy=False)
        )

    def split_by_window(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """``(window, lo, hi)`` parts of the positions [lo, hi), one per window."""
        out = []
        while lo < hi:
            k = lo // self.window
            end = min(hi, (k + 1) * self.window)
            out.append((k, lo, end))
            lo = end
        return out


# -- dealing positions to ranks and workers ------------------------------------------------


@dataclass(frozen=True)
class Division:
    """The batches of every (rank, worker) for the positions still to read this epoch."""

    remaining: Intervals
    batch_size: int
    world_size: int = 1
    num_workers: int = 1
    drop_last: bool = False

    def __post_init__(self) -> None:
        for name in ("batch_size", "world_size", "num_workers"):
            check_count(name, getattr(self, name), 1)

    # Full batches: the grid cells [g, g + batch_size) that lie wholly in ``remaining``.
    @cached_property
    def _grid(self) -> tuple[np.ndarray, np.ndarray, Intervals]:
        """First full cell and full-cell count of each interval, and the fragments."""
        b = self.batch_size
        firsts, counts, fragments = [], [], []
        for lo, hi in self.remaining:
            g0 = -(-lo // b) * b
            g1 = hi // b * b
            n = max(0, (g1 - g0) // b)
            firsts.append(g0)
            counts.append(n)
            if n == 0:
                fragments.append((lo, hi))
            else:
                fragments += [(lo, g0), (g1, hi)]
        return (
            np.asarray(firsts, dtype=np.int64),
            np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64),
            normalize(fragments),
        )

    @property
    def _grid_batches(self) -> int:
        return int(self._grid[1][-1])

    @property
    def full_batches(self) -> int:
        """The grid's full batches, then full batches cut from the fragments in order:
        a position resumed under another batch size leaves a fragment at every interval's
        ends, and those rows would otherwise all go to the last step's one batch a rank
        (many times the batch size)."""
        return self._grid_batches + size(self._grid[2]) // self.batch_size

    @property
    def per_rank(self) -> int:
        """Full batches each rank reads."""
        return self.full_batches // self.world_size

    def _full(self, u0: int, u1: int) -> Intervals:
        """Positions of the full batches ``u0 .. u1 - 1``."""
        return normalize(p for run in self._full_runs(u0, u1) for p in run)

    def _full_runs(self, u0: int, u1: int) -> list[Intervals]:
        """The positions of the full batches ``u0 .. u1 - 1`` in reading order: the grid's
        batches, then those cut from the fragments (each run in position order)."""
        g = self._grid_batches
        runs = [self._grid_run(u0, min(u1, g))]
        if u1 > g:
            b, lo = self.batch_size, max(u0, g) - g
            runs.append(cut(self._grid[2], lo * b, (u1 - g - lo) * b))
        return [run for run in runs if run]

    def _grid_run(self, u0: int, u1: int) -> Intervals:
        """Positions of the grid's full batches ``u0 .. u1 - 1`` (in order)."""
        firsts, cum, _ = self._grid
        out = []
        u = u0
        while u < u1:
            i = int(np.searchsorted(cum, u, side="right")) - 1
            take = min(u1, int(cum[i + 1])) - u
            start = int(firsts[i]) + (u - int(cum[i])) * self.batch_size
            out.append((start, start + take * self.batch_size))
            u += take
        return normalize(out)

    @cached_property
    def tails(self) -> tuple[Batch, ...]:
        """One last, smaller batch per rank from the rows no round of full batches
        holds; empty with ``drop_last`` or when there are none. When fewer rows than
        ranks are left, the short ranks repeat rows from the start (at most
        ``world_size - 1`` rows), so that no rank takes a step fewer."""
        r = self.world_size
        fragments = self._grid[2]
        cells = (self.full_batches - self._grid_batches) * self.batch_size
        rest = cut(fragments, cells, size(fragments) - cells)
        leftover = normalize(self._full(r * self.per_rank, self.full_batches) + rest)
        rows = size(leftover)
        if self.drop_last or rows == 0:
            return ()
        tails: list[Batch] = []
        offset = 0
        for rank in range(r):
            n = rows // r + (1 if rank < rows % r else 0)
            if n:
                tails.append(cut(leftover, offset, n))
                offset += n
            else:
                # One of the epoch's first rows, the same one after a resume: an epoch's
                # positions are [0, n) and the rows left for its tails end at n, while the
                # first rows still to read move on with every step taken before a resume.
                wrap = (rank - rows) % self.remaining[-1][1]
                tails.append(((wrap, wrap + 1),))
        return tuple(tails)

    @property
    def steps(self) -> int:
        """Batches every rank reads (the same on every rank)."""
        return self.per_rank + (1 if self.tails else 0)

    def batch(self, rank: int, i: int) -> Batch:
        """The positions of rank ``rank``'s ``i``-th batch."""
        if i < self.per_rank:
            u = rank * self.per_rank + i
            return self._full(u, u + 1)
        if i == self.per_rank and self.tails:
            return self.tails[rank]
        raise IndexError(f"rank {rank} has {self.steps} batches, not {i + 1}")

    def worker_block(self, worker: int) -> tuple[int, int]:
        """``(first, count)`` of the rank batches a worker reads (the same on every rank).

        Workers take contiguous blocks (one pass over their own pieces each); the lower
        ids take the extra batches, which is the order in which DataLoader's round-robin
        asks for them, so a rank delivers exactly ``steps`` batches.
        """
        m, w = self.steps, self.num_workers
        base, extra = divmod(m, w)
        return worker * base + min(worker, extra), base + (1 if worker < extra else 0)

    def worker_batches(self, rank: int, worker: int, skip: int = 0) -> Sequence[Batch]:
        """A worker's batches (after the first ``skip``), computed when asked for."""
        first, count = self.worker_block(worker)
        return RankBatches(self, rank, range(first + min(skip, count), first + count))

    def delivered(self, steps: int) -> list[int]:
        """Batches each worker of a rank has delivered after ``steps`` steps (round-robin)."""
        steps = min(max(steps, 0), self.steps)
        w = self.num_workers
        return [steps // w + (1 if i < steps % w else 0) for i in range(w)]

    def consumed(self, steps: int) -> Intervals:
        """Positions every rank together has read after ``steps`` steps each."""
        return self.consumed_by(self.delivered(steps))

    def consumed_by(self, delivered: Sequence[int]) -> Intervals:
        """Positions every rank together has read when worker ``i`` of each rank has
        delivered ``delivered[i]`` batches."""
        parts: list[Interval] = []
        for worker, n in enumerate(delivered):
            first, _ = self.worker_block(worker)
            for rank in range(self.world_size):
                full = min(first + n, self.per_rank) - first
                if full > 0:
                    u = rank * self.per_rank + first
                    parts += self._full(u, u + full)
                if first <= self.per_rank < first + n and self.tails:
                    parts += self.tails[rank]
        return normalize(parts)

    def remaining_after(self, steps: int) -> Intervals:
        """Positions left to read after ``steps`` steps on every rank."""
        return subtract(self.remaining, self.consumed(steps))


class RankBatches(Sequence[Batch]):
    """Some of a rank's batches (a worker's block), made on demand (an epoch may hold
    millions)."""

    def __init__(self, division: Division, rank: int, indices: range) -> None:
        self._division = division
        self._rank = rank
        self._indices = indices

    def __len__(self) -> int:
        return len(self._indices)

    @overload
    def __getitem__(self, i: int) -> Batch: ...

    @overload
    def __getitem__(self, i: slice) -> list[Batch]: ...

    def __getitem__(self, i: int | slice) -> Batch | list[Batch]:
        if isinstance(i, slice):
            return [self._division.batch(self._rank, j) for j in self._indices[i]]
        return self._division.batch(self._rank, self._indices[i])

    def runs(self) -> list[Batch]:
        """The positions of these batches in reading order, as a few runs: the full
        batches as one run of intervals, then the tail batch. What reading them batch by
        batch gives, without making every batch in Python (an epoch has thousands)."""
        d, indices = self._division, self._indices
        full = range(indices.start, min(indices.stop, d.per_rank))
        out: list[Batch] = []
        if len(full):
            u = self._rank * d.per_rank
            out += d._full_runs(u + full.start, u + full.stop)
        if d.tails and indices.start <= d.per_rank < indices.stop:
            out.append(d.tails[self._rank])
        return out

    def sizes(self) -> Iterator[int]:
        """The row count of each batch, in order."""
        d, indices = self._division, self._indices
        full = len(range(indices.start, min(indices.stop, d.per_rank)))
        yield from itertools.repeat(d.batch_size, full)
        if d.tails and indices.start <= d.per_rank < indices.stop:
            yield size(d.tails[self._rank])
