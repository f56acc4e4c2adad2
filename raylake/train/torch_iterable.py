"""The PyTorch iterable dataset over a pinned snapshot (docs/training.md).

Batches for ``DataLoader(ds, batch_size=None, num_workers=k)`` under DDP; every
(rank, worker) reads a disjoint part and together they read the pinned snapshot
exactly once per epoch, in an order that does not depend on the world size or the
worker count; every rank takes the same number of steps; the position resumes
through ``state_dict`` / ``load_state_dict`` (StatefulDataLoader included), also
under another world size or worker count.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from raylake.arguments import check_flag, check_integer, refuse_unknown_keywords
from raylake.errors import UnsupportedOperationError
from raylake.expr import Expr
from raylake.table import Table
from raylake.train.convert import FillNull
from raylake.train.loader import Epochs, ShardedLoader, Transform
from raylake.train.prefetch import DEFAULT_BATCHES, DEFAULT_PIECES, check_loader_threads
from raylake.train.setup import DEFAULT_SHUFFLE_WINDOW, TableRows, check_rank, open_source
from raylake.train.stats import FeedStats
from raylake.train.tensors import (
    TensorBatches,
    check_device,
    distributed,
    rank_for_copy,
    torch_device,
    torch_spec,
)
from raylake.train.window_process import WindowProcess
from raylake.train.windows import DEFAULT_FEED_BYTES
from raylake.train.workers import WorkerPasses, share_by_file_name


class LakeIterableDataset(IterableDataset):
    """Batches of a raylake table for ``DataLoader(ds, batch_size=None, num_workers=k)``.

    The snapshot is pinned when the dataset is made (the latest, ``snapshot_id``, or the
    one current at ``as_of``, a datetime or epoch millis, as ``Table.to_arrow`` takes it),
    and the exact row count of every piece is taken then (from manifests, or by one
    counting read when a filter or a primary-key merge decides it).

    ``rank`` / ``world_size`` default to ``torch.distributed``'s (0 / 1 without it);
    the DataLoader's workers are found by ``get_worker_info``. ``shuffle`` permutes
    the pieces (row groups, merge sections) and the rows within windows of
    ``shuffle_window`` rows, by ``seed`` and the epoch (``set_epoch``). The rows that
    do not fill a last round of full batches are spread over the ranks as one smaller
    batch each (``drop_last=False``; ranks short of a row repeat one of the first rows)
    or dropped (``drop_last=True``). ``len(ds)`` is the number of batches every rank
    reads in an epoch.

    Windows and read-ahead (docs/training.md): rows are converted a window at a time
    (thousands of batches; the next window on a thread while this one is cut) and
    batches are views of it; up to ``read_ahead`` pieces are read concurrently ahead.
    Iterated directly in the main process with ``device="cuda"``, each window is packed
    into pinned host memory and copied to the GPU once, on a side stream; pinned host
    memory and device memory held by the loader each stay within ``feed_bytes``. With a
    ``transform`` and no device, ``prefetch`` batches are made and transformed on a
    thread ahead of the consumer (0: on the consumer's thread). With a ``transform``,
    binary and string columns (not features) reach it as a list of ``bytes`` or ``str``
    per batch, to decode (docs/training.md, "Binary and string columns").
    ``loader_threads`` caps the threads that decode pieces and convert windows at once,
    so a trainer's thread finds a core free (``max(1, cores - 1)`` leaves it one); by
    default (None or 0) there is no cap and pieces decode on pyarrow's own pool. With
    ``worker_file_sharing=True`` DataLoader workers hand batches to the main process by
    shared-memory file name, not by file descriptor: faster, but a loop stopped before
    its end leaves the windows of the batches in flight in ``/dev/shm`` until the
    process ends (docs/training.md, "On a GPU host").
    ``window_process=True`` makes the windows in a process of its own, spawned at the
    first pass and kept until ``close()`` or the dataset's end: the trainer's process
    then only copies each window and cuts batches, so the loader's Python does not
    hold the interpreter's lock between the trainer's steps (docs/training.md,
    "Windows made in another process").
    """

    @refuse_unknown_keywords
    def __init__(
        self,
        table: str | Table,
        *,
        columns: Sequence[str] | None = None,
        feature_columns: Sequence[str] | None = None,
        label_column: str | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
        batch_size: int = 1024,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        transform: Transform | None = None,
        dtype: torch.dtype | None = None,
        fill_null: FillNull = None,
        shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
        rank: int | None = None,
        world_size: int | None = None,
        device: str | torch.device | None = None,
        pin_memory: bool | None = None,
        prefetch: int | None = None,
        read_ahead: int = DEFAULT_PIECES,
        loader_threads: int | None = None,
        feed_bytes: int = DEFAULT_FEED_BYTES,
        worker_file_sharing: bool = False,
        window_process: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        rank, world_size = check_rank(rank, world_size)
        device = check_device(device)
        if prefetch is None:
            prefetch = default_prefetch(device)
        prefetch = check_integer("prefetch", prefetch)
        read_ahead = check_integer("read_ahead", read_ahead)
        loader_threads = check_loader_threads(loader_threads)
        worker_file_sharing = check_flag("worker_file_sharing", worker_file_sharing)
        if pin_memory is not None:  # a config file's "false" would pin
            pin_memory = check_flag("pin_memory", pin_memory)
        feed_bytes = check_integer("feed_bytes", feed_bytes, 1)
        epochs = Epochs(batch_size, shuffle, seed, drop_last, shuffle_window)
        # With a transform, binary and string columns reach it as lists (docs/training.md,
        # "Binary and string columns"); without one they are refused, naming the column.
        spec = torch_spec(
            columns, feature_columns, label_column, dtype, fill_null, transform is not None
        )
        rows = TableRows(table, filter, snapshot_id, storage_options, as_of)
        source, converter = open_source(rows, spec)
        self._loader = ShardedLoader(
            source,
            converter,
            epochs,
            read_ahead=read_ahead,
            loader_threads=loader_threads,
            # The next window, read and converted while this one's batches are taken.
            convert_ahead=1 if prefetch or read_ahead else 0,
        )
        self._output = TensorBatches(
            converter.layout,
            dtype,
            transform,
            device,
            pin_memory,
            prefetch,
            feed_bytes,
            binary=converter.binary,
        )
        window_process = check_flag("window_process", window_process)
        if window_process and converter.binary:
            raise UnsupportedOperationError(
                f"window_process=True hands windows over in shared memory, which holds no "
                f"binary or string columns ({', '.join(map(repr, converter.binary))}); "
                "leave window_process out for this dataset"
            )
        # Windows made in a child process (raylake/train/window_process.py), started at
        # the first pass and kept for the dataset's life.
        self._maker = WindowProcess(self._loader, self._output) if window_process else None
        self._rank = rank
        self._world_size = world_size
        self._workers = WorkerPasses()
        self._file_sharing = worker_file_sharing

    def __repr__(self) -> str:
        s = self._loader.source
        return (
            f"LakeIterableDataset({s.uri!r}, snapshot={s.snapshot_id}, rows={s.total}, "
            f"pieces={len(s.pieces)}, epoch={self.epoch})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_rank"], state["_world_size"] = rank_for_copy(self._rank, self._world_size)
        return state

    @property
    def snapshot_id(self) -> int | None:
        return self._loader.source.snapshot_id

    @property
    def num_rows(self) -> int:
        """Rows of the pinned snapshot that the filter keeps (one epoch, all ranks)."""
        return self._loader.source.total

    @property
    def loader_threads(self) -> int:
        """The most threads that decode and convert at once (0: no cap of the loader's)."""
        return self._loader.loader_threads

    @property
    def epoch(self) -> int:
        return self._loader.epoch

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch``'s order next (call it at the start of every epoch)."""
        self._loader.set_epoch(epoch)
        self._workers.position_set()
        self._workers.epoch_set(epoch)  # persistent DataLoader workers follow it

    def rank_and_world_size(self) -> tuple[int, int]:
        return distributed(self._rank, self._world_size)

    def __len__(self) -> int:
        if self._workers.loaded_position_read():
            self._loader.forget_loaded()  # the workers' pass used it: the next is whole
        return self._loader.steps(self.rank_and_world_size()[1])

    def __iter__(self) -> Iterator[Any]:
        self._workers.pass_started()
        info = get_worker_info()
        if info is None:
            return self.iter_shard(0, 1)
        self._output.check_in_worker()
        if self._workers.loaded_position_used():
            # A position loaded in the main process is for the workers' next pass only;
            # every later DataLoader iteration gets the main copy with it again.
            self._loader.forget_loaded()
        epoch = self._workers.epoch_to_follow()
        if epoch is not None:  # set in the main process since this persistent copy was made
            self._loader.set_epoch(epoch)
        if self._maker is not None:
            raise UnsupportedOperationError(
                "window_process=True makes windows in a process of its own for a dataset "
                "iterated in the main process; with DataLoader workers leave it out"
            )
        if self._file_sharing:
            share_by_file_name()
        return self.iter_shard(info.id, info.num_workers)

    def iter_shard(self, worker: int = 0, num_workers: int = 1) -> Iterator[Any]:
        """The batches of one worker of this rank (what ``__iter__`` does in a DataLoader
        worker), for launchers that are not DataLoader."""
        rank, world_size = self.rank_and_world_size()
        feed = self._output.feed(maker=self._maker)
        return self._loader.batches(rank, world_size, worker, num_workers, feed)

    def close(self) -> None:
        """Stop the process that makes windows (``window_process=True``); a later pass
        starts a new one. Without it, there is nothing to stop."""
        if self._maker is not None:
            self._maker.shutdown()

    def stats(self) -> FeedStats:
        """How the pass in progress in this process (or its last one) fed the trainer:
        its waits, rows, bytes, windows and device copies (docs/training.md, "Is the GPU
        starved?"). In the main process of a DataLoader with workers the passes run in
        the workers, and this reports none of them."""
        return self._loader.stats()

    def state_dict(self) -> dict[str, Any]:
        """The position: the table, snapshot and order, the epoch, and what was read.

        In the main process after DataLoader workers read this dataset, it raises
        WorkerPositionError: the workers' copies read the batches (save a
        StatefulDataLoader's ``loader.state_dict()`` instead).
        """
        self._workers.check(
            "LakeIterableDataset",
            "resume with loader.load_state_dict(saved) on a loader of the same worker "
            "count, or with ds.load_state_dict(saved) before making the loader (any world "
            "size or worker count)",
        )
        return self._loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next pass reads exactly the rest of the saved epoch.

        ``state`` is a ``state_dict()`` of this dataset or a StatefulDataLoader's whole
        ``state_dict()`` (which also resumes with another world size or worker count). A
        position of another table, snapshot, filter or order raises ResumeStateError.
        """
        self._loader.load_state_dict(state)
        self._workers.position_loaded()


def default_prefetch(device: str | torch.device | None) -> int:
    """Batches made ahead on a thread unless asked: where the step runs on a GPU, the
    CPU is the loader's and a thread hides the conversion; beside a CPU step, or with
    no step, the thread competes for the same cores and costs about a fifth of the
    in-process rate on 2 cores (docs/training.md, "Read-ahead")."""
    if device is not None and torch_device(device).type == "cuda":
        return DEFAULT_BATCHES
    return 0
