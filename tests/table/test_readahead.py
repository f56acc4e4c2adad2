"""read_ahead: a window of reads in flight, results in order, bounded, closed cleanly."""

from __future__ import annotations

import threading

import pytest

from raylake.errors import InvalidArgumentError
from raylake.table.readahead import read_ahead


class Recorder:
    def __init__(self) -> None:
        self.started: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, item: int) -> int:
        with self._lock:
            self.started.append(item)
        if item == 13:
            raise OSError("item 13 could not be read")
        return item * 10


@pytest.mark.parametrize("window", [1, 2, 5, 50])
def test_results_come_in_order_with_at_most_a_window_read_ahead(window: int) -> None:
    read = Recorder()
    taken = 0
    for value in read_ahead(read, range(12), window):
        assert value == taken * 10
        taken += 1
        assert len(read.started) <= taken + window
    assert taken == 12 and sorted(read.started) == list(range(12))


def test_a_failed_read_raises_at_its_place() -> None:
    got = []
    with pytest.raises(OSError, match="item 13"):
        for value in read_ahead(Recorder(), range(20), 4):
            got.append(value)
    assert got == [i * 10 for i in range(13)]


def test_closing_early_starts_no_more_reads() -> None:
    read = Recorder()
    reads = read_ahead(read, range(100), 3)
    assert [next(reads), next(reads)] == [0, 10]
    reads.close()  # type: ignore[attr-defined]
    started = len(read.started)
    assert started <= 2 + 3
    assert len(read.started) == started


@pytest.mark.parametrize("window", [0, -1, True, 2.0])
def test_window_must_be_a_positive_int(window: object) -> None:
    with pytest.raises(InvalidArgumentError, match="window"):
        list(read_ahead(Recorder(), range(3), window))  # type: ignore[arg-type]
