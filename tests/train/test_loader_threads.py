"""``loader_threads``: the cap on the threads a loader keeps busy beside the trainer."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from read_threads import raylake_threads
from torch.utils.data import DataLoader, get_worker_info

import raylake
from raylake.errors import InvalidArgumentError
from raylake.train.prefetch import CpuSlots
from raylake.train.torch import LakeIterableDataset

READ_THREADS = "raylake-read-ahead"


def make(table: raylake.Table, **kwargs: Any) -> LakeIterableDataset:
    return LakeIterableDataset(table, feature_columns=["x", "emb"], label_column="id", **kwargs)


def ids(batches: Any) -> list[list[int]]:
    return [label.tolist() for _, label in batches]


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_a_bad_loader_threads_is_refused_before_any_work(bad: object, tmp_path: Any) -> None:
    # The table does not exist: the option is checked before the table is opened.
    with pytest.raises(InvalidArgumentError, match="loader_threads"):
        LakeIterableDataset(str(tmp_path / "missing"), loader_threads=bad)  # type: ignore[arg-type]


def test_the_default_is_no_cap(append_table: raylake.Table) -> None:
    assert make(append_table).loader_threads == 0
    assert make(append_table, loader_threads=None).loader_threads == 0
    assert make(append_table, loader_threads=1).loader_threads == 1


@pytest.mark.parametrize("cap", [1, 2])
def test_the_read_threads_never_exceed_the_cap(append_table: raylake.Table, cap: int) -> None:
    # Small windows: the epoch's reads span many windows, so its pool lives through it.
    ds = make(append_table, batch_size=16, shuffle_window=46, read_ahead=8, loader_threads=cap)
    most = 0
    for _ in ds:
        # A pool's threads live until the epoch ends: the last count is the most.
        most = max(most, sum(name.startswith(READ_THREADS) for name in raylake_threads()))
    assert 1 <= most <= cap
    assert not raylake_threads()


def test_slots_never_let_more_threads_in_than_the_cap() -> None:
    slots = CpuSlots(2)
    inside, most = 0, 0
    lock = threading.Lock()
    start = threading.Barrier(6)

    def work() -> None:
        nonlocal inside, most
        start.wait()
        for _ in range(200):
            with slots:
                with lock:
                    inside += 1
                    most = max(most, inside)
                np.linalg.inv(np.eye(64) * 2.0)  # some work inside, the GIL released
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= most <= 2 and inside == 0


def test_no_cap_is_zero_slots() -> None:
    slots = CpuSlots(0)
    with slots, slots, slots:  # no cap: never waits, however many are inside
        pass
    with pytest.raises(InvalidArgumentError, match="loader_threads"):
        CpuSlots(-1)


@pytest.mark.parametrize("table", ["append_table", "pk_table"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_any_cap_gives_the_same_batches_in_the_same_order(
    table: str, shuffle: bool, request: pytest.FixtureRequest
) -> None:
    tbl = request.getfixturevalue(table)
    reference = ids(make(tbl, batch_size=32, shuffle=shuffle, read_ahead=0, prefetch=0))
    for cap in (0, 1, 3):
        for prefetch in (0, 2):
            ds = make(tbl, batch_size=32, shuffle=shuffle, loader_threads=cap, prefetch=prefetch)
            assert ids(ds) == reference, (cap, prefetch)
    filtered = ids(make(tbl, batch_size=32, filter="x < 0.6", read_ahead=0, prefetch=0))
    assert ids(make(tbl, batch_size=32, filter="x < 0.6", loader_threads=1)) == filtered
    assert not raylake_threads()


def test_shards_and_resume_do_not_depend_on_the_cap(append_table: raylake.Table) -> None:
    def shard(rank: int, cap: int) -> list[list[int]]:
        ds = make(append_table, batch_size=16, rank=rank, world_size=2, loader_threads=cap)
        return ids(ds)

    for rank in (0, 1):
        assert shard(rank, 1) == shard(rank, 0)

    whole = ids(make(append_table, batch_size=16, loader_threads=0))
    first = make(append_table, batch_size=16, loader_threads=1)
    it = iter(first)
    taken = ids(next(it) for _ in range(5))
    state = first.state_dict()
    it.close()  # type: ignore[attr-defined]
    resumed = make(append_table, batch_size=16, loader_threads=2)
    resumed.load_state_dict(state)
    assert taken + ids(resumed) == whole
    assert not raylake_threads()


def threads_of_this_worker(batch: Any) -> int:
    info = get_worker_info()
    assert info is not None
    return int(info.dataset.loader_threads)


@pytest.mark.parametrize(("asked", "expected"), [(None, 0), (3, 3)])
def test_dataloader_workers_keep_the_asked_cap(
    append_table: raylake.Table, asked: int | None, expected: int
) -> None:
    ds = make(append_table, batch_size=64, transform=threads_of_this_worker, loader_threads=asked)
    seen = set(DataLoader(ds, batch_size=None, num_workers=2))
    assert seen == {expected}
