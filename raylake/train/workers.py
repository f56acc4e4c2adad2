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


# DataLoader worker ids whose use of a loaded position is tracked (one byte each).
_TRACKED_WORKERS = 1024


class WorkerPasses:
    """The flag "worker processes have read this dataset since the main process last
    knew its position", shared by every copy made for a DataLoader's workers; and which
    worker ids have read a position loaded in the main process, since it is for one pass."""

    def __init__(self) -> None:
        self._flag = torch.zeros(1, dtype=torch.uint8).share_memory_()
        self._loaded_used = torch.zeros(_TRACKED_WORKERS, dtype=torch.bool).share_memory_()
        # The epoch the main process set last, and how many times it set one: persistent
        # workers (DataLoader(persistent_workers=True)) keep the copy they were made with,
        # and would read its epoch's order again at every epoch.
        self._epoch = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._epochs_followed = 0  # the sets this copy has followed

    def pass_started(self) -> None:
        """A pass begins in this process: a worker marks it; in the main process the
        position is this process's own again."""
        self._flag[0] = 1 if in_worker() else 0

    def position_set(self) -> None:
        """The main process set the position (a new epoch, a loaded position)."""
        if not in_worker():
            self._flag[0] = 0

    def epoch_set(self, epoch: int) -> None:
        """The main process set epoch ``epoch``: its workers' copies follow it."""
        if not in_worker():
            self._epoch[1] = epoch
            self._epoch[0] += 1
            self._epochs_followed = int(self._epoch[0])

    def epoch_to_follow(self) -> int | None:
        """In a worker starting a pass: the epoch the main process set since this copy
        was made or last followed it (a persistent worker's copy outlives the loop's
        epochs), else None."""
        sets = int(self._epoch[0])
        if not in_worker() or sets == self._epochs_followed:
            return None
        self._epochs_followed = sets
        return int(self._epoch[1])

    def position_loaded(self) -> None:
        """A position was loaded: in the main process, for the next pass of every worker
        id (the workers of the next DataLoader iteration); in a worker (StatefulDataLoader
        hands it its own), for this worker's next pass."""
        info = get_worker_info()
        if info is None:
            self._flag[0] = 0
            self._loaded_used.zero_()
        elif info.id < _TRACKED_WORKERS:
            self._loaded_used[info.id] = False

    def loaded_position_used(self) -> bool:
        """In a worker starting a pass: whether this worker id has read the loaded
        position already, in an earlier pass (a later DataLoader iteration forks or
        pickles the main process's copy again, loaded position included)."""
        info = get_worker_info()
        if info is None or info.id >= _TRACKED_WORKERS:
            return False
        used = bool(self._loaded_used[info.id])
        self._loaded_used[info.id] = True
        return used

    def loaded_position_read(self) -> bool:
        """In the main process: whether workers have read the position it loaded."""
        return get_worker_info() is None and bool(self._loaded_used.any())

    def check(self, dataset: str, resume: str) -> None:
        """Raise WorkerPositionError in the main process once workers have read."""
        if not in_worker() and bool(self._flag[0]):
            raise WorkerPositionError(dataset, resume)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "flag": self._flag,
            "loaded_used": self._loaded_used,
            "epoch": self._epoch,
            "epochs_followed": self._epochs_followed,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # torch's multiprocessing pickler (spawned workers) hands over the shared tensors
        # themselves; a plain pickle is an independent copy, which gets its own.
        flag, used, epoch = state["flag"], state["loaded_used"], state["epoch"]
        self._flag = flag if flag.is_shared() else flag.clone().share_memory_()
        self._loaded_used = used if used.is_shared() else used.clone().share_memory_()
        self._epoch = epoch if epoch.is_shared() else epoch.clone().share_memory_()
        self._epochs_followed = state["epochs_followed"]


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
