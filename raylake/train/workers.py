"""Whether DataLoader worker processes read a dataset (docs/training.md, "Resume").

DataLoader gives each worker process its own copy of an iterable dataset; the copy
the training loop holds in the main process sees none of their batches, so its
position would say that nothing was read. A one-byte flag in shared memory travels
with the copies made for the workers (inherited by a forked worker, shared through
torch's multiprocessing pickler with a spawned one): a worker sets it when it starts
a pass, the main process clears it when it knows the position itself again (a new
epoch, a loaded position, a pass of its own), and ``state_dict()`` in the main process
refuses while it is set. The workers' positions themselves reach the main process
only through torchdata's StatefulDataLoader, which also knows which of their batches
the training loop has received (workers read ahead of it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import get_worker_info

from raylake.errors import WorkerPositionError


def in_worker() -> bool:
    """True in a DataLoader worker process."""
    return get_worker_info() is not None


class WorkerPasses:
    """The flag "worker processes have read this dataset since the main process last
    knew its position", shared by every copy made for a DataLoader's workers."""

    def __init__(self) -> None:
        self._flag = torch.zeros(1, dtype=torch.uint8).share_memory_()

    def pass_started(self) -> None:
        """A pass begins in this process: a worker marks it; in the main process the
        position is this process's own again."""
        self._flag[0] = 1 if in_worker() else 0

    def position_set(self) -> None:
        """The main process set the position (a new epoch, a loaded position)."""
        if not in_worker():
            self._flag[0] = 0

    def check(self, dataset: str, resume: str) -> None:
        """Raise WorkerPositionError in the main process once workers have read."""
        if not in_worker() and bool(self._flag[0]):
            raise WorkerPositionError(dataset, resume)

    def __getstate__(self) -> dict[str, Any]:
        return {"flag": self._flag}

    def __setstate__(self, state: dict[str, Any]) -> None:
        flag = state["flag"]
        # torch's multiprocessing pickler (spawned workers) hands over the shared flag
        # itself; a plain pickle is an independent copy, which gets its own shared flag.
        self._flag = flag if flag.is_shared() else flag.clone().share_memory_()


def share_by_file_name() -> None:
    """In a DataLoader worker: hand tensors to the main process by shared-memory file
    name (torch's ``file_system`` sharing strategy) rather than by file descriptor.

    With descriptors every tensor of every batch costs the main process a connection to
    the worker's resource-sharer thread, an authentication and a ``recvmsg`` (14 reads per
    batch of two tensors, measured); by name it is a string in the pickle, and a storage
    already mapped is found in a cache. It changes the worker process only (the strategy
    is read where a tensor is pickled), and the main process reads either form."""
    import torch.multiprocessing as mp

    if "file_system" in mp.get_all_sharing_strategies():
        mp.set_sharing_strategy("file_system")
