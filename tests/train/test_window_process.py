"""``window_process=True``: windows made in a child process and handed over in shared
memory (raylake/train/window_process.py). The batches and positions are the loader's
in-process ones, exactly; the trainer's process runs no loader thread; a pass stopped
early, a failure in the child and a child killed mid-pass each end cleanly, and no
shared-memory file is left behind. The device path runs on the simulated device."""

from __future__ import annotations

import errno
import gc
import glob
import multiprocessing
import os
import pickle
import shutil
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import torch
from read_threads import raylake_threads
from test_torch_iterable import make

import raylake
from raylake.errors import LoaderProcessError, UnsupportedOperationError
from raylake.train import LakeIterableDataset, window_process
from raylake.train import device as device_module
from raylake.train.device import SimulatedDevice
from raylake.train.window_child import PROCESS_RING, SharedSlots


def batches(ds: LakeIterableDataset, epoch: int) -> list[tuple[list[torch.Tensor], Any]]:
    """An epoch's batches (copied) and the position after each."""
    ds.set_epoch(epoch)
    return [([t.clone() for t in b], ds.state_dict()) for b in ds]


def same(a: list[tuple[list[torch.Tensor], Any]], b: list[tuple[list[torch.Tensor], Any]]) -> bool:
    return len(a) == len(b) and all(
        sa == sb and all(torch.equal(x, y) for x, y in zip(ta, tb))
        for (ta, sa), (tb, sb) in zip(a, b)
    )


def child_of(ds: LakeIterableDataset) -> Any:
    assert ds._maker is not None
    return ds._maker._process


def leftovers(ds: LakeIterableDataset) -> list[str]:
    return glob.glob(f"/dev/shm/raylake-window-{child_of(ds).pid}-*")


@pytest.fixture(params=[None, "simulated"])
def on_device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The loader's ``device`` keyword: none (host batches), or "cuda" on the simulated
    device (raylake/train/device.py)."""
    if request.param is None:
        return {"device": None}
    monkeypatch.setattr(device_module, "simulated", SimulatedDevice)
    return {"device": "cuda"}


def test_batches_and_positions_are_the_in_process_ones(
    table: raylake.Table, on_device: dict[str, Any]
) -> None:
    kwargs: dict[str, Any] = {"batch_size": 24, **on_device}
    here = make(table, **kwargs)
    there = make(table, window_process=True, **kwargs)
    try:
        for epoch in range(2):  # the second pass takes the piece the first carried
            want = batches(here, epoch)
            there.set_epoch(epoch)
            it = iter(there)
            first = next(it)
            assert not raylake_threads()  # the loader's threads are the child's
            got = [([t.clone() for t in first], there.state_dict())]
            got += [([t.clone() for t in b], there.state_dict()) for b in it]
            assert same(want, got) and len(want) > 10
        assert there.stats().windows > 1 and there.stats().rows == table.count()
        assert not leftovers(there)
    finally:
        there.close()


def test_a_rank_a_dtype_a_transform_and_a_small_budget(pk_table: raylake.Table) -> None:
    """The child converts (dtype included) for the rank asked; the transform runs here."""

    def plus_one(batch: Any) -> Any:
        features, label = batch
        return features + 1, label

    kwargs: dict[str, Any] = {"dtype": torch.float16, "transform": plus_one, "batch_size": 8,
                              "feed_bytes": 4096}  # fmt: skip
    here = make(pk_table, rank=1, world=2, **kwargs)
    there = make(pk_table, rank=1, world=2, window_process=True, **kwargs)
    try:
        got = batches(there, 3)
        assert got[0][0][0].dtype == torch.float16
        assert same(batches(here, 3), got)
        # A small budget: windows go in parts, and the slots stay within it.
        assert 0 < there.stats().pinned_bytes_peak <= 4096
    finally:
        there.close()


def made_ahead(ds: LakeIterableDataset) -> bool:
    assert ds._maker is not None
    return ds._maker.last_pass[2]


def test_the_next_epoch_is_made_ahead_and_a_wrong_guess_dropped(
    append_table: raylake.Table,
) -> None:
    """After a pass that ran to its end the child makes the next epoch's pass from its
    start; asked for it, it hands over those windows; asked for another, it drops them."""
    ds = make(append_table, window_process=True, shuffle=True)
    try:
        want = {e: batches(make(append_table, shuffle=True), e) for e in (0, 1, 2, 5)}
        assert same(batches(ds, 0), want[0]) and not made_ahead(ds)
        assert same(batches(ds, 1), want[1]) and made_ahead(ds)
        assert same(batches(ds, 5), want[5]) and not made_ahead(ds)  # not epoch 2
        ds.set_epoch(6)
        for _ in ds:  # stopped early: nothing is made ahead of that
            break
        assert same(batches(ds, 2), want[2]) and not made_ahead(ds)
        assert not leftovers(ds)
    finally:
        ds.close()


def test_the_guess_follows_a_loop_that_never_calls_set_epoch(
    append_table: raylake.Table,
) -> None:
    """A loop that never calls ``set_epoch`` asks for the same epoch each time: the first
    guess (the next epoch) is dropped, the ones after it are right. Unshuffled, the
    windows of every epoch are the same, so the guess of any epoch serves."""
    ds = make(append_table, window_process=True, shuffle=True)
    try:
        want = batches(make(append_table, shuffle=True), 3)
        ahead = [same(batches(ds, 3), want) and made_ahead(ds) for _ in range(3)]
        assert ahead == [False, False, True]
    finally:
        ds.close()
    ds = make(append_table, window_process=True, shuffle=False)
    try:
        here = make(append_table, shuffle=False)
        want = {e: batches(here, e) for e in (0, 7, 2)}
        ahead = [same(batches(ds, e), want[e]) and made_ahead(ds) for e in (0, 7, 7, 2)]
        assert ahead == [False, True, True, True]
    finally:
        ds.close()


def test_a_resumed_position_and_a_pass_stopped_early(append_table: raylake.Table) -> None:
    ds = make(append_table, window_process=True, shuffle=True)
    try:
        it = iter(ds)
        for _ in range(5):
            next(it)
        saved = ds.state_dict()
        del it  # stopped early: the child's pass ends, the next one starts clean
        resumed = make(append_table, shuffle=True)
        resumed.load_state_dict(saved)
        ds.load_state_dict(saved)
        assert same(batches(resumed, 0), batches(ds, 0))
        for _ in ds:  # a break on the first batch
            break
        assert same(batches(make(append_table, shuffle=True), 1), batches(ds, 1))
        assert not leftovers(ds) and not raylake_threads()
    finally:
        ds.close()
    assert ds._maker is not None and ds._maker._process is None  # close() stopped it


def test_one_pass_at_a_time(append_table: raylake.Table) -> None:
    """A second iterator ends the first one's pass: the first then says so."""
    ds = make(append_table, window_process=True, shuffle=False)
    try:
        first = iter(ds)
        next(first)
        assert same(batches(ds, 0), batches(make(append_table, shuffle=False), 0))
        with pytest.raises(LoaderProcessError, match="one pass at a time"):
            for _ in first:
                pass
    finally:
        ds.close()


def test_a_failure_in_the_child_is_raised_here(append_table: raylake.Table, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(append_table.uri, copy)
    ds = make(raylake.open_table(str(copy)), window_process=True, shuffle=False)
    here = make(raylake.open_table(str(copy)), shuffle=False)
    for data in sorted(copy.rglob("*.parquet"))[1:]:
        data.unlink()  # the pass reads the first file, then finds the others gone
    with pytest.raises(Exception) as in_process:
        list(here)
    try:
        with pytest.raises(type(in_process.value)) as there:
            list(ds)
        assert "raised in the window process" in str(there.value.__cause__)
        assert not leftovers(ds)
    finally:
        ds.close()


def test_a_child_killed_mid_pass_is_an_error_naming_it(
    append_table: raylake.Table, on_device: dict[str, Any]
) -> None:
    """On the host and on the (simulated) device, the error names the child's end."""
    kwargs = on_device
    ds = make(append_table, window_process=True, shuffle=False, batch_size=4, **kwargs)
    try:
        it = iter(ds)
        next(it)
        os.kill(child_of(ds).pid, signal.SIGKILL)
        with pytest.raises(LoaderProcessError, match="exit code -9"):
            for _ in it:
                pass
        plain = make(append_table, shuffle=False, batch_size=4, **kwargs)
        assert same(batches(plain, 0), batches(ds, 0))
        # More windows than the child's slots: it could not have finished the pass
        # before it was killed (it waits for slots that only the next windows free).
        assert ds.stats().windows > PROCESS_RING
    finally:
        ds.close()


def test_what_window_process_refuses(append_table: raylake.Table, tmp_path: Path) -> None:
    schema = pa.schema([("x", pa.float32()), ("name", pa.string())])
    binary = raylake.create_table(str(tmp_path / "b"), schema)
    binary.write(pa.table({"x": [1.0], "name": ["a"]}, schema=schema))
    with pytest.raises(UnsupportedOperationError, match="window_process"):
        LakeIterableDataset(binary, columns=["x", "name"], transform=lambda b: b,
                            window_process=True)  # fmt: skip
    ds = make(append_table, window_process=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
    with pytest.raises(Exception, match="window_process=True makes windows"):
        list(loader)
    copy = pickle.loads(pickle.dumps(ds))  # a handle of its own, not started
    assert copy._maker is not None and copy._maker._process is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_into_cuda_through_pinned_shared_slots(append_table: raylake.Table) -> None:
    """On a GPU host: the slots are registered as pinned memory and copied from."""
    for shuffle in (False, True):
        here = make(append_table, shuffle=shuffle, device="cuda")
        there = make(append_table, shuffle=shuffle, device="cuda", window_process=True)
        try:
            got = batches(there, 1)
            assert got[0][0][0].device.type == "cuda"
            assert same(batches(here, 1), got)
            assert there.stats().device_copies >= there.stats().windows > 1
        finally:
            there.close()


def test_the_child_ends_with_its_dataset(append_table: raylake.Table) -> None:
    ds = make(append_table, window_process=True)
    sum(1 for _ in ds)
    child = child_of(ds)
    del ds
    gc.collect()  # the dataset's finalizer tells the child to exit and waits for it
    assert child.exitcode == 0


def test_slots_are_kept_for_the_next_pass_and_replaced_when_too_small() -> None:
    """The child's pool of shared slots (raylake/train/window_child.py): the smallest that
    fits is reused; a request larger than all of them replaces the smallest."""
    ours, theirs = multiprocessing.Pipe()
    slots = SharedSlots(ours, lambda: None)
    made = [slots.pinned(n) for n in (100, 300, 200)]
    assert [theirs.recv()[3] for _ in made] == [100, 300, 200]
    for slot in made:
        slot[:] = 7
        slots.release(slot)
    assert slots.pinned(150) is made[2] and slots.pinned(250) is made[1]
    bigger = slots.pinned(500)  # larger than the pooled 100: that one goes
    assert theirs.recv()[0] == "free" and theirs.recv()[3] == 500
    assert bigger.numel() == 500 and slots.pinned(100).numel() >= 100
    slots.close()
    assert not glob.glob(f"/dev/shm/raylake-window-{os.getpid()}-*")


def test_shared_memory_without_room_is_a_specific_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full /dev/shm (a container's 64 MB, say) is named, with what to change, and the
    slot's file is not left behind."""
    ours, _ = multiprocessing.Pipe()
    slots = SharedSlots(ours, lambda: None)
    slots.pinned(100)

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    with pytest.raises(LoaderProcessError, match=r"no room for a window slot of 4,096 bytes"):
        slots.pinned(4096)
    with pytest.raises(LoaderProcessError, match=r"already made hold 100.*--shm-size"):
        slots.pinned(4096)
    slots.close()
    assert not glob.glob(f"/dev/shm/raylake-window-{os.getpid()}-*")


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_copy_leaves_the_child_alone(append_table: raylake.Table) -> None:
    """A process forked from this one (a DataLoader worker of another dataset, say) holds
    a copy of the dataset; that copy ending does not stop this dataset's child."""
    ds = make(append_table, window_process=True, shuffle=False)
    try:
        sum(1 for _ in ds)
        assert ds._maker is not None and ds._maker._finalizer is not None
        pid = os.fork()
        if pid == 0:  # the copy's end, as collecting it would run it
            try:
                ds._maker._finalizer()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        child = child_of(ds)
        assert same(batches(ds, 1), batches(make(append_table, shuffle=False), 1))
        assert child_of(ds) is child and child.is_alive()
    finally:
        ds.close()


def nice_values(pid: int) -> set[int]:
    """The nice value of every thread of ``pid`` (field 19 of each task's stat). A thread
    that ended between the listing and the read (a pool's idle worker) is left out."""
    values = set()
    for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            with open(stat) as f:
                values.add(int(f.read().rsplit(")", 1)[1].split()[16]))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return values


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux's per-thread nice values")
def test_every_thread_of_the_child_runs_below_the_trainer(append_table: raylake.Table) -> None:
    # The trainer's thread launches the GPU's work: the child's reads give way to it.
    ds = make(append_table, window_process=True, shuffle=False)
    list(ds)  # a whole pass: the child's pools and read threads have started
    here = os.getpriority(os.PRIO_PROCESS, 0)
    assert nice_values(child_of(ds).pid) == {min(here + window_process.CHILD_NICENESS, 19)}
    ds.close()


@pytest.mark.parametrize("dtype", [pa.uint16(), pa.uint32(), pa.uint64()], ids=str)
def test_a_shuffled_unsigned_column_through_the_child(
    tmp_path: Path, on_device: dict[str, Any], dtype: pa.DataType
) -> None:
    """torch's index_select has no kernel for them (was: NotImplementedError from the
    shuffled window's gather, here and in the trainer's own process)."""
    from raylake.train import LakeIterableDataset

    values = pa.array(range(2**15, 2**15 + 200), dtype)
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("u", dtype)]))
    tbl.write(pa.table({"u": values}))
    kwargs: dict[str, Any] = {"columns": ["u"], "batch_size": 16, "shuffle": True, **on_device}
    here = LakeIterableDataset(tbl, **kwargs)
    there = LakeIterableDataset(tbl, window_process=True, **kwargs)
    try:
        want = [b["u"].tolist() for b in here]
        assert [b["u"].tolist() for b in there] == want
        assert (
            sorted(v for b in want for v in b) == values.to_pylist() != [v for b in want for v in b]
        )
    finally:
        there.close()


def test_an_error_cutting_a_window_here_ends_the_pass(
    append_table: raylake.Table, on_device: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window's slot is the child's again (was: unacknowledged, the child waited
    for it and close() for the child, forever)."""
    import threading

    from raylake.train import windows

    def fails(t: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("the gather failed")

    ds = make(append_table, window_process=True, shuffle=True, batch_size=4, **on_device)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(windows, "_gathered", fails)
            it = iter(ds)
            with pytest.raises(RuntimeError, match="the gather failed"):
                next(it)
            closing = threading.Thread(target=it.close, daemon=True)
            closing.start()
            closing.join(timeout=60)
            assert not closing.is_alive()
        assert same(batches(make(append_table, shuffle=True, batch_size=4), 0), batches(ds, 0))
    finally:
        ds.close()


def test_a_pass_resumed_inside_a_window_of_another_size(tmp_path: Path) -> None:
    """The resumed pass's first window is smaller than the slot the converter had
    reserved for it, which then went unused with the marker of its last copy, already
    waited for: the child waited for that acknowledgement again at the pass's end, and
    the trainer for the child, forever."""
    import threading

    import numpy as np

    from raylake.train import LakeIterableDataset

    n = 20_011
    rng = np.random.default_rng(0)
    data = pa.table({"x": rng.random(n).astype(np.float32), "z": rng.random(n), "y": np.arange(n)})
    tbl = raylake.create_table(
        str(tmp_path / "t"), data.schema, options={"write.row-group-rows": "1500"}
    )
    tbl.write(data.slice(0, 9000))
    tbl.write(data.slice(9000))
    kwargs: dict[str, Any] = dict(
        feature_columns=["x", "z"], label_column="y", batch_size=97, shuffle_window=4000
    )
    ds = LakeIterableDataset(tbl, window_process=True, **kwargs)
    try:
        it = iter(ds)
        next(it)
        saved = ds.state_dict()
        it.close()
        ds.load_state_dict(saved)
        got: list[int] = []
        reading = threading.Thread(target=lambda: got.extend(int(v) for _, y in ds for v in y))
        reading.daemon = True
        reading.start()
        reading.join(timeout=120)
        if reading.is_alive():
            assert ds._maker is not None and ds._maker._process is not None
            ds._maker._process.kill()  # ends the trainer's wait for it
            pytest.fail("the resumed pass never ended")
        here = LakeIterableDataset(tbl, **kwargs)
        here.load_state_dict(saved)
        assert got == [int(v) for _, y in here for v in y] and len(got) == n - 97
    finally:
        ds.close()
