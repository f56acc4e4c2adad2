"""Numpy blocks to torch tensors in the batch structure the user asked for, on the
device asked for: what the torch datasets and ``iter_torch_batches`` share."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from raylake.arguments import check_callable, check_integer, integer
from raylake.errors import InvalidArgumentError, UnsupportedOperationError
from raylake.train.binary import BinaryColumns
from raylake.train.convert import FEATURES, FEATURES_T, FillNull, Layout
from raylake.train.device import backend_for, pin, pin_wanted
from raylake.train.loader import Transform
from raylake.train.setup import BatchSpec, structure, structures
from raylake.train.stats import FeedRecorder
from raylake.train.stream import Block
from raylake.train.windows import DEFAULT_FEED_BYTES, Tensors, TorchFeed

_NUMPY_OF = {
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


# numpy exports read-only arrays through DLPack from 2.1 (earlier: BufferError).
_READ_ONLY_DLPACK = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over the array's memory (no copy); read-only Arrow views go through DLPack.

    numpy before 2.1 cannot export a read-only array through DLPack (BufferError), and
    ``torch.from_numpy`` of one warns that the tensor would be writable: there the
    array is copied (docs/dependencies.md).
    """
    if array.flags.writeable:
        return torch.from_numpy(array)
    if _READ_ONLY_DLPACK:
        return torch.from_dlpack(array)
    return torch.from_numpy(array.copy())


def check_device(device: Any) -> Any:
    """``device`` if torch can name it: a ``torch.device``, a device string (``"cpu"``,
    ``"cuda:1"``; parsing one needs no GPU), an accelerator index (numpy's too, as a
    Python int), or None."""
    if device is None or isinstance(device, torch.device):
        return device
    index = integer(device)
    if index is not None and index >= 0:
        return index
    if isinstance(device, str):
        try:
            torch.device(device)
            return device
        except RuntimeError:
            pass  # torch's own error names neither the keyword nor the loader
    raise InvalidArgumentError(
        "device", device, "a torch device ('cpu', 'cuda', 'cuda:1', a torch.device) or None"
    )


def torch_device(device: str | int | torch.device) -> torch.device:
    """A checked ``device`` as a ``torch.device``. An index names the host's accelerator,
    as torch takes it; on a host without one, a CUDA device (torch raised a bare
    RuntimeError): the dataset may be made on a CPU driver and iterated on GPU workers,
    and iterating it where torch finds no CUDA device raises EnvironmentSetupError, as
    ``device="cuda"`` does."""
    if isinstance(device, int) and not torch.accelerator.is_available():
        return torch.device("cuda", device)
    return torch.device(device)


def numpy_dtype_for(dtype: torch.dtype | None) -> np.dtype | None:
    """The numpy dtype to convert to; bfloat16 (unknown to numpy) is made from float32."""
    if dtype is None:
        return None
    if dtype == torch.bfloat16:
        return np.dtype(np.float32)
    if dtype not in _NUMPY_OF:
        raise InvalidArgumentError(
            "dtype", dtype, f"a torch dtype raylake converts to: {sorted(map(str, _NUMPY_OF))}"
        )
    return np.dtype(_NUMPY_OF[dtype])


def torch_spec(
    columns: Sequence[str] | None,
    feature_columns: Sequence[str] | None,
    label_column: str | None,
    dtype: torch.dtype | None,
    fill_null: FillNull,
    binary: bool = False,
) -> BatchSpec:
    """The batches a torch loader's keywords ask for (a bad ``dtype`` raises here);
    ``binary``: binary and string columns are handed to a transform as lists
    (raylake/train/binary.py)."""
    return BatchSpec(
        columns,
        feature_columns,
        label_column,
        "torch tensors",
        numpy_dtype_for(dtype),
        fill_null,
        binary=binary,
    )


class TensorBatches:
    """Numpy blocks to the batch structure the user asked for, on the right device."""

    def __init__(
        self,
        layout: Layout,
        dtype: torch.dtype | None,
        transform: Transform | None,
        device: str | torch.device | None,
        pin_memory: bool | None,
        prefetch: int = 0,
        feed_bytes: int = DEFAULT_FEED_BYTES,
        binary: Sequence[str] = (),
    ) -> None:
        self.layout = layout
        self.dtype = dtype
        self.transform = check_callable("transform", transform)
        device = check_device(device)
        self.device = None if device is None else torch_device(device)
        self.pin_memory = pin_memory
        self.prefetch = check_integer("prefetch", prefetch)
        self.feed_bytes = check_integer("feed_bytes", feed_bytes, 1)
        # Binary and string columns, as lists for the transform (Converter.binary).
        self.binary = tuple(binary)
        if self.binary and self.device is not None and self.device.type != "cpu":
            raise UnsupportedOperationError(
                f"binary and string columns ({', '.join(map(repr, self.binary))}) reach the "
                "transform as lists of values on the host, which device= cannot copy; "
                "leave device= out and move the transformed batch to the device in the "
                "training loop (or pass pin_memory=True for pinned host batches)"
            )

    def check_in_worker(self) -> None:
        if self.pin_memory or (self.device is not None and self.device.type != "cpu"):
            raise UnsupportedOperationError(
                "device= and pin_memory= apply when the dataset is iterated in the main "
                "process (num_workers=0); with DataLoader workers pass pin_memory=True to the "
                "DataLoader and move each batch to the device in the training loop"
            )

    def tensor_dict(self, block: Block) -> Tensors:
        """A converted block (a window or a batch) as tensors of the asked dtype, no copy
        where the dtype is already right."""
        t = {k: to_tensor(v) for k, v in block.items()}
        if self.dtype is not None:
            if self.layout.features is not None:
                key = FEATURES_T if FEATURES_T in t else FEATURES
                if t[key].dtype != self.dtype:
                    t[key] = t[key].to(self.dtype)
            elif self.dtype == torch.bfloat16:
                for c in self.layout.named:
                    if t[c].is_floating_point():
                        t[c] = t[c].to(self.dtype)
        return t

    def tensors(self, block: Block) -> Any:
        return structure(self.layout, self.tensor_dict(block))

    def maker_args(self) -> TensorBatches:
        """What the process that makes windows needs of this (raylake/train/window_child.py):
        the conversion to tensors, without the transform, device or pinning."""
        made = copy.copy(self)
        made.transform, made.device, made.pin_memory, made.prefetch = None, None, None, 0
        return made

    def feed(self, recorder: FeedRecorder | None = None, maker: Any = None) -> TorchFeed:
        """One pass's batches: windows converted and copied to the device once each,
        batches cut as views of them (raylake/train/windows.py); with ``maker``, the
        windows are made in another process (raylake/train/window_process.py)."""
        backend = backend_for(self.device)
        layout = self.layout
        to_tensors: Callable[[Block], Tensors] = self.tensor_dict
        make: Callable[[Any], Any] = lambda runs: structures(layout, runs)  # noqa: E731
        if self.binary:  # kept per pass: the windows' Arrow columns, by serial
            columns = BinaryColumns(self.binary)
            to_tensors = lambda block: self.tensor_dict(columns.window(block))  # noqa: E731
            make = lambda runs: structures(layout, columns.values(runs))  # noqa: E731
        return TorchFeed(
            to_tensors,
            make,
            self.transform,
            backend,
            pin_wanted(self.pin_memory, backend),
            self.feed_bytes,
            self.prefetch,
            recorder,
            maker,
        )

    def __call__(self, block: Block) -> Any:
        batch = self.tensors(block)
        if self.pin_memory:
            batch = tree_map(pin, batch)
        if self.device is not None and self.device.type != "cpu":
            batch = tree_map(lambda x: x.to(self.device, non_blocking=self.pin_memory), batch)
        return batch if self.transform is None else self.transform(batch)


def tree_map(fn: Any, batch: Any) -> Any:
    """``fn`` applied to every tensor of a batch structure."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: tree_map(fn, v) for k, v in batch.items()}
    return tuple(tree_map(fn, v) for v in batch)


def distributed(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """The given rank and world size, else torch.distributed's (0 and 1 without it)."""
    if rank is not None and world_size is not None:
        return rank, world_size
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_for_copy(rank: int | None, world_size: int | None) -> tuple[int | None, int | None]:
    """The rank and world size a pickled copy of a torch dataset keeps.

    A DataLoader worker started by ``spawn`` or ``forkserver`` (the ranks of
    ``torch.multiprocessing.spawn``, ``multiprocessing_context="spawn"`` for CUDA jobs)
    has no process group of its own: it would read as rank 0 of 1, every rank the whole
    epoch. So a copy made where the process group is up takes this process's rank
    along; one made without it (a driver sending the dataset to Ray Train workers)
    still finds its rank where it is read."""
    if rank is None or world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    return rank, world_size


def unbind(batch: Any, n: int) -> list[Any]:
    """A batch structure of ``n`` rows as the list of its ``n`` samples."""
    if isinstance(batch, torch.Tensor):
        return list(batch.unbind(0))
    if isinstance(batch, dict):
        columns = {k: unbind(v, n) for k, v in batch.items()}
        return [{k: columns[k][i] for k in columns} for i in range(n)]
    parts = [unbind(v, n) for v in batch]
    return [tuple(p[i] for p in parts) for i in range(n)]
