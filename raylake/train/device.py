"""Batches onto the training device: pinned host memory, a copy that overlaps compute.

:class:`DeviceCopy` is made once per pass over the data. ``prepare`` runs on the
read-ahead thread (raylake/train/prefetch.py): it pins the batch and copies it to a
CUDA device on a side stream with ``non_blocking=True``, applies the user's transform
on that stream, and records an event. ``deliver`` runs on the trainer's thread as it
takes the batch: the trainer's current stream waits on that event (on the GPU, the
host does not block), and every CUDA tensor of the batch is marked as used by that
stream (``record_stream``), so the caching allocator does not hand its memory to the
side stream's next copy while the trainer's kernels still read it. The pinned host
tensors are the caching host allocator's, which keeps a block until the copies
queued from it have completed.

On the CPU (``device=None`` or ``"cpu"``) both steps are plain: no pinning, no copy.
Pinning needs an accelerator: without one, ``pin_memory=True`` is skipped with one
warning, as DataLoader does. A CUDA device without CUDA raises when iteration starts
(not when the dataset is made: a dataset made on a CPU driver may be iterated on GPU
workers).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from raylake.errors import EnvironmentSetupError

Transform = Callable[[Any], Any]


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


def can_pin() -> bool:
    """Whether pinned host memory is available (it needs an accelerator)."""
    return bool(torch.cuda.is_available())


@dataclass
class Staged:
    """A batch on its way to the device; ``event`` marks the end of its copy."""

    batch: Any
    event: torch.cuda.Event | None = None


class DeviceCopy:
    """One pass's moves of batches to ``device`` (see the module docstring)."""

    def __init__(
        self,
        device: torch.device | None,
        pin_memory: bool | None,
        transform: Transform | None,
    ) -> None:
        cuda = device is not None and device.type == "cuda"
        if cuda and not torch.cuda.is_available():
            raise EnvironmentSetupError(
                f"device={str(device)!r} was asked for, but torch finds no CUDA device "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); pass "
                "device='cpu' or run where a GPU is visible"
            )
        if cuda and device is not None and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())  # the caller's
        pin = cuda if pin_memory is None else pin_memory
        if pin and not can_pin():
            warnings.warn(
                "pin_memory=True, but there is no accelerator to pin host memory for: "
                "batches are not pinned",
                stacklevel=3,
            )
            pin = False
        self.device = device
        self.pin = pin
        self.transform = transform
        self.stream = torch.cuda.Stream(device) if cuda else None

    def prepare(self, batch: Any) -> Staged:
        """On the read-ahead thread: pin, start the copy, transform; record its end."""
        if self.pin:
            batch = tree_map(torch.Tensor.pin_memory, batch)
        device = self.device
        if self.stream is None:
            if device is not None and device.type != "cpu":  # another accelerator: a plain copy
                batch = tree_map(lambda t: t.to(device, non_blocking=self.pin), batch)
            return Staged(batch if self.transform is None else self.transform(batch))
        with torch.cuda.device(device), torch.cuda.stream(self.stream):
            batch = tree_map(lambda t: t.to(device, non_blocking=True), batch)
            if self.transform is not None:
                batch = self.transform(batch)
            event = torch.cuda.Event()
            event.record(self.stream)
        return Staged(batch, event)

    def deliver(self, staged: Staged) -> Any:
        """On the trainer's thread: its stream waits for the copy; the tensors are its."""
        if staged.event is None:
            return staged.batch
        current = torch.cuda.current_stream(self.device)
        current.wait_event(staged.event)
        for t in tensors_of(staged.batch):
            if t.is_cuda:
                t.record_stream(current)
        return staged.batch
