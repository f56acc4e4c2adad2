"""The pure sharding model: epoch orders, divisions, and resumable positions."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from property_depth import examples

from raylake.train.sharding import (
    Division,
    EpochOrder,
    cut,
    normalize,
    size,
    subtract,
)


def positions(intervals: tuple[tuple[int, int], ...]) -> list[int]:
    return [p for lo, hi in intervals for p in range(lo, hi)]


def read_all(d: Division) -> tuple[Counter[int], list[int]]:
    """Every position every consumer reads, and each rank's step count."""
    seen: Counter[int] = Counter()
    steps = []
    for rank in range(d.world_size):
        n = 0
        for worker in range(d.num_workers):
            for batch in d.worker_batches(rank, worker):
                seen.update(positions(batch))
                n += 1
        steps.append(n)
    return seen, steps


interval_lists = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 60)), max_size=6).map(
    lambda xs: normalize((lo, lo + n) for lo, n in xs)
)


@settings(max_examples=examples(300), deadline=None)
@given(
    remaining=interval_lists,
    batch_size=st.integers(1, 40),
    world=st.integers(1, 5),
    workers=st.integers(1, 4),
    drop_last=st.booleans(),
)
def test_division_reads_each_position_once_with_equal_steps(
    remaining: tuple[tuple[int, int], ...],
    batch_size: int,
    world: int,
    workers: int,
    drop_last: bool,
) -> None:
    d = Division(remaining, batch_size, world, workers, drop_last)
    seen, steps = read_all(d)
    assert steps == [d.steps] * world
    total = size(remaining)
    if drop_last:
        assert all(c == 1 for c in seen.values())
        assert set(seen) <= set(positions(remaining))
        assert sum(seen.values()) == world * d.per_rank * batch_size  # full batches only
        if not remaining or remaining == ((0, remaining[-1][1]),):  # a whole epoch
            assert total - sum(seen.values()) < world * batch_size  # less than a round dropped
    else:
        # Every position once; a short rank repeats one of the epoch's first rows.
        assert (
            set(positions(remaining))
            <= set(seen)
            <= set(range(remaining[-1][1] if remaining else 0))
        )
        repeats = sum(seen.values()) - total
        assert repeats <= world - 1
        assert repeats == 0 or total % (world * batch_size) < world
    # Every batch but the last round's is full: a whole cell of the global grid, then
    # (rows a resume under another batch size left off the grid) batch_size of those.
    grid = sum(max(0, hi // batch_size - -(-lo // batch_size)) for lo, hi in remaining)
    for rank in range(world):
        for i in range(d.per_rank):
            batch = d.batch(rank, i)
            assert size(batch) == batch_size
            if rank * d.per_rank + i < grid:
                ((lo, _),) = batch
                assert lo % batch_size == 0
    # The last round is one smaller batch a rank (or none).
    assert all(size(tail) <= batch_size for tail in d.tails)


def test_a_resume_under_another_batch_size_keeps_batches_to_the_batch_size() -> None:
    """Four workers' runs read with batches of 50 leave fragments at every interval's
    ends for batches of 64: they make full batches, not one last batch of them all."""
    remaining = normalize([(150, 500), (650, 1000), (1150, 1500), (1650, 2000), (2150, 2203)])
    for world in (1, 2, 3):
        d = Division(remaining, 64, world, 2)
        seen, steps = read_all(d)
        assert steps == [d.steps] * world
        assert set(seen) == set(positions(remaining))
        assert sum(seen.values()) - size(remaining) <= world - 1
        for rank in range(world):
            assert all(size(b) <= 64 for b in d.worker_batches(rank, 0))
            assert all(size(b) <= 64 for b in d.worker_batches(rank, 1))


@settings(max_examples=examples(200), deadline=None)
@given(
    total=st.integers(0, 300),
    batch_size=st.integers(1, 17),
    plan=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(0, 30)), min_size=1, max_size=4
    ),
)
@example(total=1, batch_size=1, plan=[(2, 2, 0)])  # a worker whose block is only the tail
def test_resuming_under_other_world_sizes_reads_exactly_the_rest(
    total: int, batch_size: int, plan: list[tuple[int, int, int]]
) -> None:
    """Stop after k steps, resume with another (world, workers), again and again: every
    position is read exactly once (repeats only for the last step's padding)."""
    remaining = normalize([(0, total)])
    seen: Counter[int] = Counter()
    for world, workers, k in plan:
        d = Division(remaining, batch_size, world, workers)
        k = min(k, d.steps)
        # What the ranks read in their first k steps (DataLoader round-robin over workers).
        for rank in range(world):
            got = 0
            for worker, n in enumerate(d.delivered(k)):
                for batch in d.worker_batches(rank, worker)[:n]:
                    seen.update(positions(batch))
                    got += 1
            assert got == k
        remaining = d.remaining_after(k)
    d = Division(remaining, batch_size, 2, 2)
    rest, _ = read_all(d)
    seen.update(rest)
    assert set(seen) == set(range(total))
    assert sum(seen.values()) - total <= 2 * len(plan) + 2


def test_delivered_follows_dataloader_round_robin() -> None:
    d = Division(((0, 50),), 10, 1, 3)  # 5 batches over 3 workers: blocks of 2, 2, 1
    assert [d.worker_block(w) for w in range(3)] == [(0, 2), (2, 2), (4, 1)]
    assert [d.delivered(k) for k in range(6)] == [
        [0, 0, 0],
        [1, 0, 0],
        [1, 1, 0],
        [1, 1, 1],
        [2, 1, 1],
        [2, 2, 1],
    ]


def test_tails_spread_leftover_rows_evenly() -> None:
    d = Division(((0, 25),), 10, 2)  # one full round (2 x 10), 5 rows left for 2 ranks
    assert d.steps == 2
    assert d.tails == (((20, 23),), ((23, 25),))
    assert Division(((0, 25),), 10, 2, drop_last=True).steps == 1
    tiny = Division(((0, 2),), 10, 4)  # fewer rows than ranks: ranks 2 and 3 repeat rows 0, 1
    assert tiny.tails == (((0, 1),), ((1, 2),), ((0, 1),), ((1, 2),))


@settings(max_examples=examples(200), deadline=None)
@given(
    total=st.integers(1, 60),
    batch_size=st.integers(1, 12),
    world=st.integers(1, 6),
    steps=st.integers(0, 12),
)
@example(total=7, batch_size=1, world=2, steps=1)
def test_a_resumed_division_reads_the_batches_of_the_whole_one(
    total: int, batch_size: int, world: int, steps: int
) -> None:
    """Resumed after some steps under the same batch size and world size, every rank
    reads the rest of its batches of the whole epoch, the padding row included: it
    repeated the first row still to read, so the short ranks' last batch changed."""
    whole = Division(((0, total),), batch_size, world)
    steps = min(steps, whole.steps)
    resumed = Division(whole.remaining_after(steps), batch_size, world)
    for rank in range(world):
        expected = [whole.batch(rank, i) for i in range(steps, whole.steps)]
        assert [resumed.batch(rank, i) for i in range(resumed.steps)] == expected


def test_interval_helpers() -> None:
    assert normalize([(5, 7), (0, 2), (2, 3), (6, 9), (4, 4)]) == ((0, 3), (5, 9))
    assert subtract(((0, 10), (20, 30)), ((2, 4), (8, 22))) == ((0, 2), (4, 8), (22, 30))
    assert cut(((0, 3), (10, 15)), 2, 4) == ((2, 3), (10, 13))


@pytest.mark.parametrize("shuffle", [True, False])
def test_epoch_order_is_a_permutation_of_the_pieces(shuffle: bool) -> None:
    counts = (5, 0, 7, 3, 11)
    order = EpochOrder(counts, seed=3, epoch=1, shuffle=shuffle, window=4)
    assert sorted(order.piece_order.tolist()) == list(range(5))
    slices = order.source_slices(0, order.total)
    assert sum(e - b for _, b, e in slices) == sum(counts)
    assert sorted((p, b) for p, b, _ in slices) == sorted((p, 0) for p in range(5) if counts[p])
    for k in range(-(-order.total // 4)):
        perm = order.permutation(k)
        lo, hi = order.window_bounds(k)
        if shuffle:
            assert perm is not None and sorted(perm.tolist()) == list(range(hi - lo))
        else:
            assert perm is None


def test_epoch_orders_depend_on_seed_and_epoch_only() -> None:
    counts = tuple(range(1, 40))
    a = EpochOrder(counts, seed=1, epoch=0)
    assert np.array_equal(a.piece_order, EpochOrder(counts, seed=1, epoch=0).piece_order)
    assert not np.array_equal(a.piece_order, EpochOrder(counts, seed=1, epoch=1).piece_order)
    assert not np.array_equal(a.piece_order, EpochOrder(counts, seed=2, epoch=0).piece_order)
    assert np.array_equal(a.permutation(0), EpochOrder(counts, seed=1, epoch=0).permutation(0))


@settings(max_examples=examples(300), deadline=None)
@given(
    remaining=interval_lists,
    batch_size=st.integers(1, 40),
    world=st.integers(1, 5),
    workers=st.integers(1, 4),
    drop_last=st.booleans(),
    skip=st.integers(0, 30),
)
def test_worker_runs_and_sizes_are_its_batches(
    remaining: tuple[tuple[int, int], ...],
    batch_size: int,
    world: int,
    workers: int,
    drop_last: bool,
    skip: int,
) -> None:
    """The loaders read a worker's batches as runs and sizes (no per-batch Python): the
    same positions in the same order, cut at the same places."""
    from raylake.train.stream import segments_of

    d = Division(remaining, batch_size, world, workers, drop_last)
    for rank in range(world):
        for worker in range(workers):
            batches = d.worker_batches(rank, worker, skip=skip)
            assert list(segments_of(batches.runs())) == list(segments_of(batches))
            assert list(batches.sizes()) == [size(b) for b in batches]
