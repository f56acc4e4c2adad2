"""Windows onto the training device: the seam between the loader and an accelerator.

A :class:`Backend` does the four things a window's trip to a device needs (the
loader's control flow around them is in raylake/train/windows.py and is the same
for every backend):

- ``pinned(nbytes)``: page-locked host memory, allocated once per slot of the
  loader's pinned ring and reused;
- ``copy(host, finish)``: one host-to-device copy of a whole window on a side
  stream, then ``finish`` on the same stream (views of the copy; a shuffled window's
  gather and the features' transposition, in one kernel), and a marker of their end
  (a CUDA event);
- ``wait_host(marker)``: the host blocks until that copy is done (before the
  window's pinned slot is written again);
- ``take(tensors, marker)``: on the trainer's thread, when it takes the window's
  first batch: its current stream waits for the copy (the host does not block),
  and the window's device tensors are marked as used by that stream
  (``record_stream``), so the caching allocator does not hand their memory to a
  later copy while the trainer's kernels still read a batch of them.

:class:`CudaBackend` is the real one. :class:`SimulatedDevice` follows the same
steps on the CPU (copies are clones, markers are tokens it checks), so tests on a
machine without a GPU drive every branch that a CUDA device takes: the pinned ring,
its reuse, the waits, the memory bounds and the threads' shutdown. ``simulated_pin``
does the same for the windows that ``pin_memory=True`` pins without a device.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from raylake.errors import EnvironmentSetupError

Tensors = dict[str, torch.Tensor]
Finish = Callable[[torch.Tensor], Tensors]  # the copied bytes -> the window's tensors


def tree_map(fn: Callable[[torch.Tensor], Any], batch: Any) -> Any:
    """``fn`` on every tensor of a batch (tensors, dicts, tuples and lists of them)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        return {k: tree_map(fn, v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(tree_map(fn, v) for v in batch)
    return batch


def tensors_of(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for v in batch.values():
            yield from tensors_of(v)
    elif isinstance(batch, (tuple, list)):
        for v in batch:
            yield from tensors_of(v)


# Tests replace this (monkeypatch) to take the pinning path on the CPU: a CUDA host pins
# the windows of ``pin_memory=True`` without a device, a CPU-only one skips that.
simulated_pin: Callable[[torch.Tensor], torch.Tensor] | None = None


def can_pin() -> bool:
    """Whether pinned host memory is available (it needs an accelerator)."""
    return simulated_pin is not None or bool(torch.cuda.is_available())


def pin(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of ``tensor`` in page-locked host memory."""
    return tensor.pin_memory() if simulated_pin is None else simulated_pin(tensor)


class Backend:
    """A device that windows are copied to (see the module docstring)."""

    device: torch.device

    def pinned(self, nbytes: int) -> torch.Tensor:
        raise NotImplementedError

    def copy(self, host: torch.Tensor, finish: Finish) -> tuple[Tensors, Any]:
        raise NotImplementedError

    def wait_host(self, marker: Any) -> None:
        raise NotImplementedError

    def take(self, tensors: Tensors, marker: Any) -> None:
        raise NotImplementedError

    def finished(self, marker: Any) -> bool:
        """Whether the copy that ``marker`` ends is done (the host does not block)."""
        return True

    def release(self, slot: torch.Tensor) -> None:
        """The loader lets a pinned slot go (its copies are done)."""
        return None


class CudaBackend(Backend):
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def copy(self, host: torch.Tensor, finish: Finish) -> tuple[Tensors, Any]:
        # Two ends: the host may write the slot again once the copy is done, before the
        # kernels of ``finish`` (which wait for SMs behind the trainer's own kernels).
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            buffer = host.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)
            tensors = finish(buffer)
            done = torch.cuda.Event()
            done.record(self.stream)
        return tensors, (copied, done)

    def wait_host(self, marker: Any) -> None:
        marker[0].synchronize()

    def finished(self, marker: Any) -> bool:
        return bool(marker[0].query())

    def take(self, tensors: Tensors, marker: Any) -> None:
        current = torch.cuda.current_stream(self.device)
        current.wait_event(marker[1])
        for t in tensors.values():
            t.record_stream(current)


class SimulatedDevice(Backend):
    """The CUDA control flow on the CPU, for tests: it records what a device would see
    and refuses what would be a race there (a slot written while its copy is pending,
    a window taken before its copy was queued)."""

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.pinned_allocations: list[int] = []
        self.copies = 0
        self.takes = 0
        self.host_waits = 0
        self.pending: set[int] = set()  # copies queued and not waited for by the host

    def pinned(self, nbytes: int) -> torch.Tensor:
        self.pinned_allocations.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    def copy(self, host: torch.Tensor, finish: Finish) -> tuple[Tensors, Any]:
        self.copies += 1
        marker = self.copies
        self.pending.add(marker)
        return finish(host.clone()), marker

    def wait_host(self, marker: Any) -> None:
        self.host_waits += 1
        self.pending.discard(marker)

    def take(self, tensors: Tensors, marker: Any) -> None:
        if not 1 <= marker <= self.copies:
            raise AssertionError(f"window taken before its copy {marker} was queued")
        self.takes += 1


# Tests replace this (monkeypatch) to run the device path on the CPU.
simulated: Callable[[], Backend] | None = None


def backend_for(device: torch.device | None) -> Backend | None:
    """The backend windows are copied through to ``device`` (None: they stay on the host).

    A CUDA device without CUDA raises here, when iteration starts (not when the
    dataset is made: a dataset made on a CPU driver may be iterated on GPU workers).
    """
    if device is None or device.type == "cpu":
        return None
    if simulated is not None:
        return simulated()
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise EnvironmentSetupError(
                f"device={str(device)!r} was asked for, but torch finds no CUDA device "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); pass "
                "device='cpu' or run where a GPU is visible"
            )
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())  # the caller's
        return CudaBackend(device)
    return PlainCopy(device)


class PlainCopy(Backend):
    """Another accelerator (not CUDA): a blocking copy per window, nothing to wait for."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)

    def copy(self, host: torch.Tensor, finish: Finish) -> tuple[Tensors, Any]:
        return finish(host.to(self.device)), None

    def wait_host(self, marker: Any) -> None:
        return None

    def take(self, tensors: Tensors, marker: Any) -> None:
        return None


def pin_wanted(pin_memory: bool | None, backend: Backend | None) -> bool:
    """Whether host windows are pinned: by default only on the way to a CUDA device (the
    backend's own ring does that); ``pin_memory=True`` without an accelerator is skipped
    with one warning, as DataLoader does."""
    if pin_memory is None or not pin_memory or backend is not None:
        return False
    if not can_pin():
        warnings.warn(
            "pin_memory=True, but there is no accelerator to pin host memory for: "
            "batches are not pinned",
            stacklevel=4,
        )
        return False
    return True
