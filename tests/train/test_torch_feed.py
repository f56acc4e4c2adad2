"""LakeIterableDataset's read-ahead and device feed: the same batches and positions as
without it, no thread left behind, errors raised where the trainer is, device paths."""

from __future__ import annotations

import itertools
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from read_threads import raylake_threads
from test_torch_iterable import ids_of, make

import raylake
from raylake.errors import EnvironmentSetupError, InvalidArgumentError
from raylake.train import device as device_module

# prefetch (batches on a thread), read_ahead (piece reads in flight); (0, 0) reads as before.
SETTINGS = [(0, 0), (1, 1), (3, 8), (0, 2)]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")


def epoch_with_states(ds: Any) -> list[tuple[list[int], dict[str, Any]]]:
    """Each batch's ids, and the position right after the trainer took it."""
    return [(ids_of(batch), ds.state_dict()) for batch in ds]


@pytest.mark.parametrize("shuffle", [True, False])
def test_read_ahead_yields_the_same_batches_and_positions(
    table: raylake.Table, shuffle: bool
) -> None:
    runs = []
    for prefetch, read_ahead in SETTINGS:
        ds = make(table, shuffle=shuffle, prefetch=prefetch, read_ahead=read_ahead)
        ds.set_epoch(1)
        runs.append(epoch_with_states(ds))
    assert len(runs[0]) > 10
    assert all(run == runs[0] for run in runs[1:])


def test_a_position_saved_under_read_ahead_resumes_exactly(table: raylake.Table) -> None:
    whole = [ids_of(b) for b in make(table, prefetch=0, read_ahead=0)]
    ds = make(table, prefetch=3, read_ahead=4)
    it = iter(ds)
    first = [ids_of(b) for b in itertools.islice(it, 5)]
    state = ds.state_dict()  # batches read ahead but not taken are not counted
    it.close()  # type: ignore[attr-defined]
    again = make(table, prefetch=2, read_ahead=2)
    again.load_state_dict(state)
    assert first + [ids_of(b) for b in again] == whole


def test_stopping_early_leaves_no_thread(append_table: raylake.Table) -> None:
    ds = make(append_table, prefetch=2, read_ahead=4, shuffle=False)
    for i, _ in enumerate(ds):
        if i == 2:
            break
    assert not raylake_threads()
    it = iter(ds)
    next(it)
    assert raylake_threads()  # reading ahead while the trainer holds a batch
    it.close()  # type: ignore[attr-defined]
    assert not raylake_threads()
    del it


def test_windows_are_converted_on_a_thread_whenever_pieces_are_read_ahead(
    append_table: raylake.Table,
) -> None:
    """With the CPU default (no batch thread) the next window is still made on a thread,
    so a step on the trainer's thread overlaps the conversion, not only the reads."""
    it = iter(make(append_table, prefetch=0, read_ahead=2))
    next(it)
    threads = raylake_threads()
    assert any(t.startswith("raylake-convert") for t in threads)
    assert not any(t.startswith("raylake-prefetch") for t in threads)
    it.close()  # type: ignore[attr-defined]
    it = iter(make(append_table, prefetch=0, read_ahead=0))
    next(it)
    assert not raylake_threads()  # no read-ahead: the loop of old, no thread at all
    it.close()  # type: ignore[attr-defined]


def test_a_failed_read_ahead_raises_the_original_error(
    tmp_path: Path, append_table: raylake.Table
) -> None:
    root = tmp_path / "copy"
    shutil.copytree(append_table.uri, root)
    tbl = raylake.open_table(str(root))
    errors = []
    for prefetch, read_ahead in SETTINGS:
        ds = make(tbl, shuffle=False, prefetch=prefetch, read_ahead=read_ahead)
        if not errors:  # the snapshot is pinned; now its last data file goes missing
            last = sorted(root.joinpath("data").rglob("*.parquet"))[-1]
            last.rename(tmp_path / "moved.parquet")
        with pytest.raises(Exception) as info:
            for _ in ds:
                pass
        errors.append(info.value)
        assert not raylake_threads()
    assert len({type(e) for e in errors}) == 1, errors
    assert "moved" not in str(errors[0]) and ".parquet" in str(errors[0])


def test_a_transform_error_on_the_thread_is_the_same_object(append_table: raylake.Table) -> None:
    error = ValueError("bad batch")
    seen = []

    def transform(batch: Any) -> Any:
        seen.append(threading.current_thread().name)
        if len(seen) == 3:
            raise error
        return batch

    ds = make(append_table, transform=transform, prefetch=2)
    with pytest.raises(ValueError) as info:
        list(ds)
    assert info.value is error
    assert seen[0].startswith("raylake-prefetch")  # transforms run on the read-ahead thread
    assert not raylake_threads()


def test_device_cpu_gives_the_same_tensors(append_table: raylake.Table) -> None:
    plain = list(make(append_table, prefetch=0))
    on_cpu = list(make(append_table, device="cpu", prefetch=2))
    assert len(plain) == len(on_cpu)
    for (x0, y0), (x1, y1) in zip(plain, on_cpu):
        assert x1.device.type == "cpu" and torch.equal(x0, x1) and torch.equal(y0, y1)


@no_cuda
def test_pin_memory_without_cuda_is_skipped_with_a_warning(append_table: raylake.Table) -> None:
    plain = [ids_of(b) for b in make(append_table, prefetch=0)]
    with pytest.warns(UserWarning, match="pin_memory=True, but there is no accelerator"):
        pinned = [ids_of(b) for b in make(append_table, pin_memory=True)]
    assert pinned == plain


@pytest.mark.parametrize("prefetch", [0, 2])
def test_pinned_windows_without_a_device_through_the_pinning_seam(
    append_table: raylake.Table, monkeypatch: pytest.MonkeyPatch, prefetch: int
) -> None:
    """The path a CUDA host takes for ``pin_memory=True`` without a device (each window
    pinned once, then cut), driven on the CPU by replacing the pinning itself: the same
    batches, one pin per window and column group, and no thread left after a close."""
    pinned: list[torch.Tensor] = []

    def pin(t: torch.Tensor) -> torch.Tensor:
        pinned.append(t.clone())
        return pinned[-1]

    monkeypatch.setattr(device_module, "simulated_pin", pin)
    plain = [ids_of(b) for b in make(append_table, prefetch=0)]
    ds = make(append_table, pin_memory=True, prefetch=prefetch, transform=lambda b: b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pinning is available: no warning
        got = [ids_of(b) for b in ds]
    assert got == plain
    assert len(pinned) == 2 * ds.stats().windows > 0  # the features and the label
    it = iter(ds)
    first, _ = next(it)
    assert any(first.data_ptr() == p.data_ptr() for p in pinned)  # a view of a pinned window
    next(it)
    it.close()  # type: ignore[attr-defined]
    assert not raylake_threads()


@no_cuda
def test_a_cuda_device_without_cuda_is_refused_when_iterated(append_table: raylake.Table) -> None:
    ds = make(append_table, device="cuda")  # made on a CPU driver: fine
    with pytest.raises(EnvironmentSetupError, match="torch finds no CUDA device"):
        next(iter(ds))


@no_cuda
@pytest.mark.parametrize("device", [0, np.int64(0)], ids=repr)
def test_a_device_index_without_an_accelerator_is_refused_when_iterated(
    append_table: raylake.Table, device: Any
) -> None:
    """As device="cuda" is: made on a CPU driver for GPU workers, and refused when read
    where torch finds no CUDA device. An index raised torch's bare RuntimeError when the
    dataset was made ('Cannot access accelerator device'), a numpy one InvalidArgumentError."""
    ds = make(append_table, device=device)
    with pytest.raises(EnvironmentSetupError, match="device='cuda:0' was asked for"):
        next(iter(ds))


@cuda
@pytest.mark.parametrize("prefetch", [0, 2])
def test_cuda_batches_are_pinned_copies_in_order(
    append_table: raylake.Table, prefetch: int
) -> None:  # pragma: no cover - runs where a GPU is present
    plain = list(make(append_table, prefetch=0))
    on_gpu = list(make(append_table, device="cuda", prefetch=prefetch))
    torch.cuda.synchronize()
    assert len(plain) == len(on_gpu)
    for (x0, y0), (x1, y1) in zip(plain, on_gpu):
        assert x1.is_cuda and y1.is_cuda
        assert torch.equal(x0, x1.cpu()) and torch.equal(y0, y1.cpu())


@pytest.mark.parametrize(
    ("name", "value"),
    [("prefetch", -1), ("read_ahead", -2), ("prefetch", 1.5), ("read_ahead", "8")],
)
def test_bad_read_ahead_settings_are_refused(
    append_table: raylake.Table, name: str, value: Any
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{name} must be an int >= 0"):
        make(append_table, **{name: value})


def test_batches_are_made_ahead_by_default_only_for_a_cuda_device() -> None:
    from raylake.train.torch_iterable import default_prefetch

    assert default_prefetch(None) == 0  # beside a CPU step the thread competes for cores
    assert default_prefetch("cpu") == 0
    assert default_prefetch("cuda") == 2  # the GPU runs the step: the CPU is the loader's
    assert default_prefetch("cuda:1") == 2
