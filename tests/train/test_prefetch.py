"""The read-ahead stages: a window of piece reads, and an iterator run ahead on a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from read_threads import raylake_threads

from raylake.errors import InvalidArgumentError
from raylake.train.prefetch import PieceWindow, background

WAIT_S = 10.0  # only ever waited in full when something is broken


class Counted:
    """Items 0..n-1; records how far production ran ahead of consumption."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at
        self.produced = 0
        self.consumed = 0
        self.max_lead = 0
        self.closed = False
        self.error = RuntimeError(f"item {fail_at} is broken")
        self.changed = threading.Condition()

    def __iter__(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise self.error
                with self.changed:
                    self.produced += 1
                    self.max_lead = max(self.max_lead, self.produced - self.consumed)
                    self.changed.notify_all()
                yield i
        finally:
            self.closed = True

    def took(self) -> None:
        self.consumed += 1

    def wait_produced(self, count: int) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.produced >= min(count, self.n), WAIT_S)


@pytest.mark.parametrize("depth", [1, 3])
def test_background_keeps_the_order_and_a_bounded_lead(depth: int) -> None:
    source = Counted(40)
    got = []
    for item in background(iter(source), depth):
        got.append(item)
        source.took()
        # Let the producer run as far ahead as it can before the next item is taken.
        source.wait_produced(source.consumed + depth + 1)
    assert got == list(range(40))
    # ``depth`` items waiting, one being made, one being handed to the consumer.
    assert source.max_lead <= depth + 2
    assert source.closed and not raylake_threads()


def test_background_without_depth_runs_on_the_calling_thread() -> None:
    source = Counted(5)
    seen = []
    for item in background(iter(source), 0):
        seen.append((item, threading.current_thread().name, source.produced))
    assert [s[0] for s in seen] == list(range(5))
    assert [s[2] for s in seen] == [1, 2, 3, 4, 5]  # nothing is made before it is asked for


def test_an_error_on_the_thread_is_raised_in_the_consumer_as_it_was() -> None:
    source = Counted(10, fail_at=4)
    got = []
    with pytest.raises(RuntimeError) as info:
        for item in background(iter(source), 2):
            got.append(item)
    assert info.value is source.error
    assert got == [0, 1, 2, 3]  # every item before the error, then the error
    assert source.closed and not raylake_threads()


def test_stopping_early_joins_the_thread_and_closes_the_source() -> None:
    source = Counted(1000)
    ahead = background(iter(source), 4)
    assert [next(ahead) for _ in range(3)] == [0, 1, 2]
    ahead.close()
    assert source.closed and not raylake_threads()
    assert source.produced < 1000


def test_breaking_out_of_a_loop_joins_the_thread() -> None:
    source = Counted(1000)
    for item in background(iter(source), 2):
        if item == 5:
            break
    assert source.closed and not raylake_threads()


def test_bad_depth_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="prefetch must be an int >= 0"):
        next(background(iter([1]), -1))
    with pytest.raises(InvalidArgumentError, match="read_ahead"):
        PieceWindow(lambda i: i, [], pieces=True)


class Reads:
    """A piece reader that records which reads were started."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, index: int) -> int:
        with self.lock:
            self.started.append(index)
        return index * index


def test_piece_window_reads_the_plan_ahead_within_its_bounds() -> None:
    reads = Reads()
    plan = list(range(20))
    with PieceWindow(reads, plan, pieces=4) as window:
        window.fill()
        assert window.in_flight == 4
        for i in plan:
            assert window.take(i) == i * i
            assert window.in_flight == min(4, 19 - i)
    assert sorted(reads.started) == plan  # each piece read once
    assert not raylake_threads()


def test_a_ramped_window_reads_the_first_piece_alone_until_it_is_taken() -> None:
    reads = Reads()
    plan = list(range(10))
    with PieceWindow(reads, plan, pieces=4, ramp=True) as window:
        window.fill()
        assert window.in_flight == 1  # the first piece has the cores to itself
        assert window.take(0) == 0
        assert window.in_flight == 4  # then the window fills
        for i in plan[1:]:
            assert window.take(i) == i * i
    assert sorted(reads.started) == plan
    assert not raylake_threads()


def test_piece_window_bounds_the_bytes_in_flight() -> None:
    reads = Reads()
    with PieceWindow(reads, range(10), pieces=8, max_bytes=25, cost=lambda _: 10) as window:
        window.fill()
        assert (window.in_flight, window.bytes_in_flight) == (2, 20)
        for i in range(10):
            window.take(i)
            assert window.bytes_in_flight <= 25
        big = PieceWindow(reads, range(3), pieces=8, max_bytes=5, cost=lambda _: 10)
        big.fill()  # one piece larger than the budget is still read ahead, alone
        assert big.in_flight == 1
        big.close()


def test_piece_window_reads_unplanned_pieces_now_and_skips_passed_ones() -> None:
    reads = Reads()
    with PieceWindow(reads, [0, 1, 2, 3], pieces=2) as window:
        assert window.take(7) == 49  # not planned: read on the calling thread
        assert window.take(1) == 1  # 0 was passed over: its read is dropped
        assert window.in_flight == 2  # 2 and 3
    reads_none = Reads()
    with PieceWindow(reads_none, [0, 1], pieces=0) as window:
        window.fill()
        assert window.in_flight == 0 and window.take(1) == 1


def test_piece_window_read_errors_reach_the_taker() -> None:
    error = OSError("the store dropped the connection")

    def read(index: int) -> int:
        if index == 2:
            raise error
        return index

    with PieceWindow(read, range(5), pieces=3) as window:
        assert [window.take(0), window.take(1)] == [0, 1]
        with pytest.raises(OSError) as info:
            window.take(2)
        assert info.value is error
    assert not raylake_threads()


def test_a_read_still_queued_is_harvested() -> None:
    """What a pass leaves for the next one does not depend on thread timing: a read
    queued behind a busy thread when the pass ends is waited for, not cancelled."""
    release = threading.Event()

    def read(i: int) -> int:
        if i == 0:
            release.wait()
        return i * 10

    with PieceWindow(read, [0, 1], pieces=2, threads=1) as window:
        window.fill()  # 0 runs (blocked), 1 waits in the pool's queue
        threading.Timer(0.2, release.set).start()
        assert window.harvest(1) == 10
        assert window.harvest(0) == 0
        assert window.harvest(2) is None  # never started
