"""The window path: batches cut from windows converted and copied once, checked on the
CPU through the simulated device (raylake/train/device.py), which takes every branch a
CUDA device takes: the pinned ring and its reuse, one copy per window, the waits, the
memory bounds, and the shutdown of every thread."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import torch
from read_threads import raylake_threads
from test_torch_iterable import ids_of, make

import raylake
from raylake.train import device as device_module
from raylake.train.device import SimulatedDevice
from raylake.train.passes import Pass
from raylake.train.stats import FeedRecorder, FeedStats
from raylake.train.windows import RING

ROW_BYTES = 4 * 8 + 4  # id, x and emb stacked as float64 features, and the int32 label


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[SimulatedDevice]]:
    """device="cuda" runs on the simulated device; the list holds one per pass."""
    made: list[SimulatedDevice] = []

    def backend() -> SimulatedDevice:
        made.append(SimulatedDevice())
        return made[-1]

    monkeypatch.setattr(device_module, "simulated", backend)
    yield made


def tensors(batch: Any) -> list[torch.Tensor]:
    features, label = batch
    return [features, label]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("feed_bytes", [1 << 20, 4096, 300])
def test_device_batches_equal_the_cpu_batches_and_positions(
    table: raylake.Table, simulated: list[SimulatedDevice], shuffle: bool, feed_bytes: int
) -> None:
    """Small budgets stage windows in parts, so batches straddle copies."""
    plain = make(table, shuffle=shuffle, batch_size=24)
    plain.set_epoch(3)
    on_device = make(table, shuffle=shuffle, batch_size=24, device="cuda", feed_bytes=feed_bytes)
    on_device.set_epoch(3)
    expected = [(tensors(b), plain.state_dict()) for b in plain]
    got = [(tensors(b), on_device.state_dict()) for b in on_device]  # every batch kept alive
    assert len(got) == len(expected) > 10
    for (want, s0), (have, s1) in zip(expected, got):
        assert all(torch.equal(a, b) for a, b in zip(want, have))
        assert s0 == s1
    assert simulated[-1].copies > 1 and not simulated[-1].pending - _last_two(simulated[-1])


def _last_two(backend: SimulatedDevice) -> set[int]:
    return {backend.copies, backend.copies - 1}


def test_one_copy_per_window_and_many_batches_per_copy(
    append_table: raylake.Table, simulated: list[SimulatedDevice]
) -> None:
    ds = make(append_table, shuffle=False, batch_size=8, device="cuda", shuffle_window=256)
    batches = sum(1 for _ in ds)
    backend, stats = simulated[-1], ds.stats()
    assert stats.batches == batches == len(ds)
    assert stats.device_copies == stats.windows == backend.copies == backend.takes
    assert batches >= 8 * backend.copies  # a copy serves whole runs of batches
    assert len(backend.pinned_allocations) <= RING  # the pinned ring is allocated once


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("budget", [2048, 1 << 16])
def test_the_pinned_ring_and_the_device_windows_stay_within_feed_bytes(
    append_table: raylake.Table, simulated: list[SimulatedDevice], budget: int, shuffle: bool
) -> None:
    """2 KiB: windows staged in parts, made on the host; 64 KiB: each shuffle window in
    one copy, gathered and transposed on the device."""
    ds = make(
        append_table, batch_size=8, device="cuda", feed_bytes=budget, shuffle=shuffle,
        shuffle_window=64,
    )  # fmt: skip
    n = sum(1 for _ in ds)
    stats, backend = ds.stats(), simulated[-1]
    assert n and stats.device_copies > 4
    assert (stats.device_copies == stats.windows) == (budget > 2048)  # one copy a window
    assert 0 < stats.pinned_bytes_peak <= budget
    assert 0 < stats.device_bytes_peak <= budget
    # A slot is written again only after the host saw its last copy finish.
    assert backend.host_waits >= backend.copies - RING


@pytest.mark.parametrize("shuffle", [False, True])
def test_features_are_written_straight_into_the_pinned_slot(
    append_table: raylake.Table, simulated: list[SimulatedDevice], shuffle: bool
) -> None:
    """A window used once (not shuffled, or a whole shuffle window gathered on the
    device) has its stacked features written into the pinned slot by the converter: the
    host packs only the label (and a shuffled window's order). The batches are the CPU loader's, and each slot is
    written only after its last copy was waited for (the simulated device checks)."""
    kwargs: dict[str, Any] = {"shuffle": shuffle, "batch_size": 8, "shuffle_window": 64}
    plain = make(append_table, **kwargs)
    on_device = make(append_table, device="cuda", **kwargs)
    expected = [tensors(b) for b in plain]
    got = [tensors(b) for b in on_device]  # every batch kept alive
    assert len(got) == len(expected) > 10
    assert all(torch.equal(a, b) for want, have in zip(expected, got) for a, b in zip(want, have))
    stats = on_device.stats()
    assert stats.device_copies == stats.windows > RING
    # the int32 label, and the int64 order of a shuffled window's rows
    assert stats.packed_bytes == stats.rows * (4 + 8 * shuffle)
    assert 0 < stats.pinned_bytes_peak <= on_device._output.feed_bytes


def test_a_window_read_in_parts_is_packed_on_the_host(
    append_table: raylake.Table, simulated: list[SimulatedDevice]
) -> None:
    """Two ranks split the shuffle window at their boundary, so each reads a part of
    it: that window is kept for a later part, never written into a slot that is reused,
    and packed whole (features, label) on the host; the others are written in place."""
    kwargs: dict[str, Any] = {
        "shuffle": True, "batch_size": 8, "shuffle_window": 64, "drop_last": True,
    }  # fmt: skip
    # 700 rows, 43 batches of 8 a rank: rank 0 reads [0, 344), rank 1 [344, 688); the
    # windows are 64 rows (the last 60), so rank 0 reads 24 rows of window 5, rank 1
    # the other 40, and 48 of the last window's 60.
    for rank, rest in enumerate([24, 40 + 48]):
        plain = make(append_table, rank, 2, **kwargs)
        on_device = make(append_table, rank, 2, device="cuda", **kwargs)
        expected = [tensors(b) for b in plain]
        got = [tensors(b) for b in on_device]
        assert len(got) == len(expected) > 10
        assert all(
            torch.equal(a, b) for want, have in zip(expected, got) for a, b in zip(want, have)
        )
        stats = on_device.stats()
        assert stats.packed_bytes == rest * ROW_BYTES + (stats.rows - rest) * (4 + 8)


def test_closing_a_device_pass_stops_every_thread(
    append_table: raylake.Table, simulated: list[SimulatedDevice]
) -> None:
    ds = make(append_table, device="cuda", read_ahead=4, shuffle=False, feed_bytes=4096)
    for i, _ in enumerate(ds):
        if i == 2:
            break
    assert not raylake_threads()
    it = iter(ds)
    next(it)
    assert raylake_threads()
    it.close()  # type: ignore[attr-defined]
    assert not raylake_threads()
    assert not simulated[-1].pending  # the ring waited for its copies before letting go


class Stage:
    """A stage of a pass: an iterator that records being closed."""

    def __init__(self, items: Iterator[Any]) -> None:
        self.items = items
        self.closed = False

    def __iter__(self) -> Stage:
        return self

    def __next__(self) -> Any:
        return next(self.items)

    def close(self) -> None:
        self.closed = True


def test_closing_a_pass_closes_every_stage_even_while_others_hold_them() -> None:
    """On Python 3.12 before 3.12.4 a closed generator can keep its locals (CPython
    gh-118272): a stage must not rely on being dropped to be closed."""
    inner = Stage(iter([({"a": 1}, 1)] * 3))
    outer = Stage(inner)
    held = [outer, inner]  # what a closed generator's frame would still hold
    one = Pass(outer, [inner], FeedRecorder())
    assert next(one) == {"a": 1}
    one.close()
    assert all(stage.closed for stage in held)


@pytest.mark.parametrize("batch_size", [16, 24])  # 24: batches straddle windows of 64
def test_stats_describe_the_pass(
    append_table: raylake.Table, simulated: list[SimulatedDevice], batch_size: int
) -> None:
    ds = make(append_table, batch_size=batch_size, device="cuda", shuffle=True)
    assert ds.stats() == FeedStats()  # nothing read yet
    it = iter(ds)
    next(it)
    assert ds.stats().batches == 1  # the pass in progress
    for _ in it:
        pass
    stats = ds.stats()
    assert stats.batches == len(ds) and stats.rows == ds.num_rows
    assert stats.bytes == ds.num_rows * ROW_BYTES
    assert 0 < stats.wait_p50_s <= stats.wait_p99_s
    assert 0 < stats.first_wait_s <= stats.wait_max_s
    assert stats.wait_s <= stats.elapsed_s and 0 <= stats.wait_fraction <= 1
    assert stats.windows == stats.device_copies >= 1
    assert 0 < stats.read_ahead_fill <= 1 and 0 <= stats.pieces_ready <= 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.rows = 0  # type: ignore[misc]
    assert set(stats.as_dict()) >= {"wait_fraction", "rows_per_s", "wait_p99_s"}
    assert "batches" in str(stats)
    copy = pickle.loads(pickle.dumps(ds))  # what a DataLoader worker gets counts afresh
    assert copy.stats() == FeedStats()


@pytest.mark.parametrize("device", [None, "cuda"])
def test_bytes_count_the_batches_the_trainer_took(
    append_table: raylake.Table, simulated: list[SimulatedDevice], device: str | None
) -> None:
    """Mid-pass and after a pass stopped early (was: 0 until a window was cut to its
    end, then the whole window's, rows the trainer never got among them)."""
    ds = make(append_table, batch_size=16, device=device, shuffle=True)
    it = iter(ds)
    for _ in range(3):
        next(it)
    assert (ds.stats().rows, ds.stats().bytes) == (48, 48 * ROW_BYTES)
    it.close()
    assert (ds.stats().rows, ds.stats().bytes) == (48, 48 * ROW_BYTES)


def test_cpu_stats_count_windows_without_copies(append_table: raylake.Table) -> None:
    ds = make(append_table, batch_size=16, shuffle=False, read_ahead=0, prefetch=0)
    list(ds)
    stats = ds.stats()
    assert stats.windows >= 1 and stats.device_copies == 0
    assert stats.pinned_bytes_peak == stats.device_bytes_peak == 0
    assert stats.rows == ds.num_rows and stats.read_ahead_fill == 0


def test_transforms_and_structures_on_the_device(
    append_table: raylake.Table, simulated: list[SimulatedDevice]
) -> None:
    seen: list[int] = []

    def transform(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        seen.append(len(batch["id"]))
        return {**batch, "x2": batch["x"] * 2}

    kwargs: dict[str, Any] = dict(
        feature_columns=None, columns=["id", "x"], label_column=None, shuffle=False
    )
    plain = list(make(append_table, **kwargs))
    got = list(make(append_table, device="cuda", transform=transform, **kwargs))
    assert len(seen) == len(got) == len(plain)  # once per batch
    for want, have in zip(plain, got):
        assert torch.equal(want["id"], have["id"]) and torch.equal(want["x"] * 2, have["x2"])
        assert have["id"].dtype == torch.int64


def test_bfloat16_windows_on_the_device(
    append_table: raylake.Table, simulated: list[SimulatedDevice]
) -> None:
    plain = [tensors(b) for b in make(append_table, shuffle=False, dtype=torch.bfloat16)]
    got = [
        tensors(b) for b in make(append_table, shuffle=False, dtype=torch.bfloat16, device="cuda")
    ]
    assert [ids_of((x.float(), y)) for x, y in got] == [ids_of((x.float(), y)) for x, y in plain]
    assert all(x.dtype == torch.bfloat16 for x, _ in got)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("shuffle", [True, False])
def test_cuda_windows_equal_the_cpu_batches_within_the_budget(
    table: raylake.Table, shuffle: bool
) -> None:  # pragma: no cover - runs where a GPU is present
    budget = 1 << 16  # small: windows staged in parts, batches straddling copies
    plain = [tensors(b) for b in make(table, shuffle=shuffle, batch_size=24)]
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ds = make(table, shuffle=shuffle, batch_size=24, device="cuda", feed_bytes=budget)
    n = 0
    for want, batch in zip(plain, ds):  # one batch alive at a time: the loader's memory
        have = tensors(batch)
        assert all(h.is_cuda for h in have)
        assert all(torch.equal(w, h.cpu()) for w, h in zip(want, have))
        n += 1
    assert n == len(plain)
    stats = ds.stats()
    assert stats.device_copies > 1 and stats.device_bytes_peak <= budget
    assert stats.pinned_bytes_peak <= budget
    assert torch.cuda.max_memory_allocated() - base <= 2 * budget


class Blocks:
    """What iter_torch_batches asks of a Ray Dataset or DataIterator: Arrow blocks."""

    def __init__(self, tbl: raylake.Table) -> None:
        self.pa_table = tbl.to_arrow()

    def iter_batches(self, **kwargs: Any) -> Iterator[Any]:
        assert kwargs["batch_size"] is None and kwargs["batch_format"] == "pyarrow"
        batches = self.pa_table.to_batches(max_chunksize=97)  # blocks of 97 rows
        return iter(pa.Table.from_batches([b]) for b in batches)


def test_ray_batches_read_every_epoch_of_a_loop_that_holds_them(
    append_table: raylake.Table,
) -> None:
    """As with Ray's own iter_torch_batches, every iteration reads the data again: held
    outside an epoch loop, the batches were one pass, and every epoch after the first
    read nothing, without a word."""
    from raylake.train.ray import iter_torch_batches

    batches = iter_torch_batches(Blocks(append_table), columns=["id"], batch_size=40)
    first = next(batches)["id"]  # next() takes the batches of the pass in progress
    assert len(first) == 40 and not torch.equal(first, next(batches)["id"])
    for _ in range(2):  # each loop a new pass (the one in progress stopped)
        assert sorted(int(i) for b in batches for i in b["id"]) == list(range(700))
        assert batches.stats().rows == 700 and batches.stats().batches == -(-700 // 40)
    assert not raylake_threads()


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_ray_path_copies_once_per_block(
    append_table: raylake.Table, simulated: list[SimulatedDevice], drop_last: bool
) -> None:
    from raylake.train.ray import iter_torch_batches

    kwargs: dict[str, Any] = dict(
        feature_columns=["id", "x", "emb"], label_column="label", batch_size=40,
        drop_last=drop_last,
    )  # fmt: skip
    plain = list(iter_torch_batches(Blocks(append_table), **kwargs))
    got = list(iter_torch_batches(Blocks(append_table), device="cuda", **kwargs))
    assert len(got) == len(plain) == (700 // 40 if drop_last else -(-700 // 40))
    for (x0, y0), (x1, y1) in zip(plain, got):
        assert torch.equal(x0, x1) and torch.equal(y0, y1)
    blocks = len(Blocks(append_table).pa_table.to_batches(max_chunksize=97))
    assert simulated[-1].copies == blocks > 1  # one copy per block
    assert not raylake_threads()


def with_strategy(batch: Any) -> Any:
    """A transform (it runs in the worker) that adds the worker's sharing strategy."""
    import torch.multiprocessing as mp

    return (*batch, mp.get_sharing_strategy())


def with_pid(batch: Any) -> Any:
    """A transform (it runs in the worker) that adds the worker's process id."""
    import os

    return (*batch, os.getpid())


def test_a_loop_stopped_early_leaves_no_files_in_dev_shm(append_table: raylake.Table) -> None:
    """By default: under torch's file_system strategy the batches in flight when the
    loop stops keep their windows' files until this process ends."""
    import gc
    import os

    from torch.utils.data import DataLoader

    ds = make(append_table, transform=with_pid)
    workers = set()
    for _ in range(2):
        loader = DataLoader(ds, batch_size=None, num_workers=2, prefetch_factor=4)
        for step, batch in enumerate(loader):
            workers.add(batch[2])
            if step == 3:
                break
        del loader, batch
        gc.collect()
    assert len(workers) == 4
    # torch names a shared file torch_<pid of the process that made it>_...
    left = [f for f in os.listdir("/dev/shm") if any(f"torch_{pid}_" in f for pid in workers)]
    assert left == []


@pytest.mark.parametrize("file_sharing", [True, False])
def test_dataloader_workers_hand_batches_over_by_file_name(
    append_table: raylake.Table, file_sharing: bool
) -> None:
    """The worker's strategy changes (tensors are pickled there), the main process's not."""
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader

    before = mp.get_sharing_strategy()
    plain = [ids_of(b) for b in make(append_table, shuffle=False)]
    ds = make(
        append_table, shuffle=False, worker_file_sharing=file_sharing, transform=with_strategy
    )
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(i for b in batches for i in ids_of(b[:2])) == sorted(i for b in plain for i in b)
    assert {b[2] for b in batches} == {"file_system" if file_sharing else before}
    assert mp.get_sharing_strategy() == before
