"""PyTorch datasets over raylake tables (docs/training.md).

- :class:`LakeIterableDataset`: batches for ``DataLoader(ds, batch_size=None,
  num_workers=k)`` under DDP; every (rank, worker) reads a disjoint part and together
  they read the pinned snapshot exactly once per epoch, in an order that does not
  depend on the world size or the worker count; every rank takes the same number of
  steps; the position resumes through ``state_dict`` / ``load_state_dict``
  (StatefulDataLoader included), also under another world size or worker count.
- :class:`LakeMapDataset`: ``len`` and indexing by global row, for any sampler.

Batches are ``(features, label)`` (features stacked into one 2-D tensor), or a dict
of tensors (``columns=``), or ``(dict, label)``. Fixed-width columns without nulls
reach torch without a copy.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from raylake.errors import MissingDependencyError, ResumeStateError, UnsupportedOperationError

try:
    import torch
    from torch.utils.data import Dataset, IterableDataset, get_worker_info
except ImportError as exc:  # pragma: no cover - exercised without torch only
    raise MissingDependencyError("torch", "torch") from exc

from raylake.expr import Expr
from raylake.streaming.reader import StreamReader
from raylake.table import Table, open_table
from raylake.train.continual import ContinualConfig, ContinualReader, check_resume_state
from raylake.train.convert import FEATURES, Converter, FillNull, Layout
from raylake.train.device import DeviceCopy
from raylake.train.loader import Feed, ShardedLoader, Transform
from raylake.train.prefetch import DEFAULT_BATCHES, DEFAULT_PIECES, check_count, staged
from raylake.train.source import LakeSource
from raylake.train.stream import Block
from raylake.train.workers import WorkerPasses

DEFAULT_SHUFFLE_WINDOW = 1 << 16

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


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over the array's memory (no copy); read-only Arrow views go through DLPack."""
    if array.flags.writeable:
        return torch.from_numpy(array)
    return torch.from_dlpack(array)


def numpy_dtype_for(dtype: torch.dtype | None) -> np.dtype | None:
    """The numpy dtype to convert to; bfloat16 (unknown to numpy) is made from float32."""
    if dtype is None:
        return None
    if dtype == torch.bfloat16:
        return np.dtype(np.float32)
    if dtype not in _NUMPY_OF:
        raise ValueError(f"dtype {dtype} is not a tensor dtype raylake converts to")
    return np.dtype(_NUMPY_OF[dtype])


def _open(
    table: str | Table,
    storage_options: Mapping[str, Any] | None,
    columns: Sequence[str] | None,
    feature_columns: Sequence[str] | None,
    label_column: str | None,
    filter: str | Expr | None,
    snapshot_id: int | None,
    dtype: torch.dtype | None,
    fill_null: FillNull,
) -> tuple[LakeSource, Converter]:
    tbl, converter = _table_and_converter(
        table, storage_options, columns, feature_columns, label_column, dtype, fill_null
    )
    columns = converter.layout.columns
    source = LakeSource.open(tbl, columns=columns, filter=filter, snapshot_id=snapshot_id)
    return source, converter


def _table_and_converter(
    table: str | Table,
    storage_options: Mapping[str, Any] | None,
    columns: Sequence[str] | None,
    feature_columns: Sequence[str] | None,
    label_column: str | None,
    dtype: torch.dtype | None,
    fill_null: FillNull,
) -> tuple[Table, Converter]:
    """The table, and the conversion of its rows to the batches the user asked for."""
    tbl = table if isinstance(table, Table) else open_table(table, storage_options=storage_options)
    layout = Layout.of(
        tbl.schema, columns=columns, feature_columns=feature_columns, label_column=label_column
    )
    converter = Converter(
        tbl.schema,
        layout,
        target="torch tensors",
        dtype=numpy_dtype_for(dtype),
        fill_null=fill_null,
    )
    return tbl, converter


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
    ) -> None:
        self.layout = layout
        self.dtype = dtype
        self.transform = transform
        self.device = None if device is None else torch.device(device)
        self.pin_memory = pin_memory
        self.prefetch = check_count("prefetch", prefetch)

    def check_in_worker(self) -> None:
        if self.pin_memory or (self.device is not None and self.device.type != "cpu"):
            raise UnsupportedOperationError(
                "device= and pin_memory= apply when the dataset is iterated in the main "
                "process (num_workers=0); with DataLoader workers pass pin_memory=True to the "
                "DataLoader and move each batch to the device in the training loop"
            )

    def tensors(self, block: Block) -> Any:
        t = {k: to_tensor(v) for k, v in block.items()}
        layout = self.layout
        if layout.features is not None:
            features = t[FEATURES]
            if self.dtype is not None and features.dtype != self.dtype:
                features = features.to(self.dtype)
            return features if layout.label is None else (features, t[layout.label])
        named = {c: t[c] for c in layout.named}
        if self.dtype == torch.bfloat16:
            named = {c: v.to(self.dtype) if v.is_floating_point() else v for c, v in named.items()}
        return named if layout.label is None else (named, t[layout.label])

    def feed(self) -> Feed:
        """One pass's conversion: tensors, pinned and copied to the device, ``prefetch``
        batches ahead on a thread (raylake/train/prefetch.py, device.py)."""
        copy = DeviceCopy(self.device, self.pin_memory, self.transform)

        def prepare(block: Block) -> Any:
            return copy.prepare(self.tensors(block))

        return lambda blocks: staged(blocks, prepare, copy.deliver, self.prefetch)

    def __call__(self, block: Block) -> Any:
        batch = self.tensors(block)
        if self.pin_memory:
            batch = _tree_map(lambda x: x.pin_memory(), batch)
        if self.device is not None and self.device.type != "cpu":
            batch = _tree_map(lambda x: x.to(self.device, non_blocking=self.pin_memory), batch)
        return batch if self.transform is None else self.transform(batch)


def _tree_map(fn: Any, batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: _tree_map(fn, v) for k, v in batch.items()}
    return tuple(_tree_map(fn, v) for v in batch)


def _distributed(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """The given rank and world size, else torch.distributed's (0 and 1 without it)."""
    if rank is not None and world_size is not None:
        return rank, world_size
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class LakeIterableDataset(IterableDataset):
    """Batches of a raylake table for ``DataLoader(ds, batch_size=None, num_workers=k)``.

    The snapshot is pinned when the dataset is made (the latest, or ``snapshot_id``),
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

    Read-ahead (docs/training.md): up to ``read_ahead`` pieces are read concurrently
    ahead of the one being converted, and ``prefetch`` batches are converted (and
    transformed, and copied to ``device``) on a thread ahead of the consumer (0: on
    the consumer's thread). Iterated directly in the main process, with
    ``device="cuda"``, batches arrive pinned and copied on a side CUDA stream.
    """

    def __init__(
        self,
        table: str | Table,
        *,
        columns: Sequence[str] | None = None,
        feature_columns: Sequence[str] | None = None,
        label_column: str | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
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
        prefetch: int = DEFAULT_BATCHES,
        read_ahead: int = DEFAULT_PIECES,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank and world_size, or neither")
        check_count("prefetch", prefetch)
        check_count("read_ahead", read_ahead)
        source, converter = _open(
            table,
            storage_options,
            columns,
            feature_columns,
            label_column,
            filter,
            snapshot_id,
            dtype,
            fill_null,
        )
        self._loader = ShardedLoader(
            source,
            converter,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            shuffle_window=shuffle_window,
            read_ahead=read_ahead,
            convert_ahead=1 if prefetch else 0,  # the next window, while batches are cut
        )
        self._output = TensorBatches(
            converter.layout, dtype, transform, device, pin_memory, prefetch
        )
        self._rank = rank
        self._world_size = world_size
        self._workers = WorkerPasses()

    def __repr__(self) -> str:
        s = self._loader.source
        return (
            f"LakeIterableDataset({s.uri!r}, snapshot={s.snapshot_id}, rows={s.total}, "
            f"pieces={len(s.pieces)}, epoch={self.epoch})"
        )

    @property
    def snapshot_id(self) -> int | None:
        return self._loader.source.snapshot_id

    @property
    def num_rows(self) -> int:
        """Rows of the pinned snapshot that the filter keeps (one epoch, all ranks)."""
        return self._loader.source.total

    @property
    def epoch(self) -> int:
        return self._loader.epoch

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch``'s order next (call it at the start of every epoch)."""
        self._loader.set_epoch(epoch)
        self._workers.position_set()

    def rank_and_world_size(self) -> tuple[int, int]:
        return _distributed(self._rank, self._world_size)

    def __len__(self) -> int:
        return self._loader.steps(self.rank_and_world_size()[1])

    def __iter__(self) -> Iterator[Any]:
        self._workers.pass_started()
        info = get_worker_info()
        if info is None:
            return self.iter_shard(0, 1)
        self._output.check_in_worker()
        return self.iter_shard(info.id, info.num_workers)

    def iter_shard(self, worker: int = 0, num_workers: int = 1) -> Iterator[Any]:
        """The batches of one worker of this rank (what ``__iter__`` does in a DataLoader
        worker), for launchers that are not DataLoader."""
        rank, world_size = self.rank_and_world_size()
        return self._loader.batches(rank, world_size, worker, num_workers, self._output.feed())

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
        self._workers.position_set()


class LakeStreamDataset(IterableDataset):
    """Continual training: batches of a table's new snapshots as they are committed.

    Every consumer (rank x DataLoader worker) reads each new snapshot's rows (inserts
    and after-images of a primary-key table) and takes an equal, disjoint share, so
    ranks take the same steps per snapshot (raylake/train/continual.py). ``start`` is
    a stream start (``"latest"``: the current state first, ``"latest-new"``, ``"earliest"``,
    a snapshot id). Iteration ends after ``until_snapshot``, or ``idle_timeout`` seconds
    without a commit, else never. ``state_dict()`` is the stream position (also through
    torchdata's StatefulDataLoader, per worker); resume with the same world size and
    worker count.
    """

    def __init__(
        self,
        table: str | Table,
        *,
        columns: Sequence[str] | None = None,
        feature_columns: Sequence[str] | None = None,
        label_column: str | None = None,
        filter: str | Expr | None = None,
        start: Any = "latest",
        batch_size: int = 1024,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        poll_interval: float = 1.0,
        until_snapshot: int | None = None,
        idle_timeout: float | None = None,
        transform: Transform | None = None,
        dtype: torch.dtype | None = None,
        fill_null: FillNull = None,
        rank: int | None = None,
        world_size: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank and world_size, or neither")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        tbl, self._converter = _table_and_converter(
            table, storage_options, columns, feature_columns, label_column, dtype, fill_null
        )
        layout = self._converter.layout
        self._table = tbl
        # Resolved now, once: every DataLoader worker of this rank starts at the same
        # snapshot even if a commit lands while they start (under DDP, pass the same
        # snapshot id or saved position to every rank).
        start = StreamReader(tbl, start=start, prefetch=False).position
        self._config = ContinualConfig(
            tbl.uri, layout.columns, filter, start, batch_size, shuffle, seed, drop_last,
            poll_interval, until_snapshot, idle_timeout,
        )  # fmt: skip
        self._output = TensorBatches(layout, dtype, transform, None, False)
        self._rank = rank
        self._world_size = world_size
        self._resume: Mapping[str, Any] | None = None
        self._reader: ContinualReader | None = None
        self._workers = WorkerPasses()

    def _consumer(self) -> tuple[int, int]:
        rank, world = _distributed(self._rank, self._world_size)
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return rank * workers + worker, world * workers

    def __iter__(self) -> Iterator[Any]:
        self._workers.pass_started()
        consumer, consumers = self._consumer()
        resume = self._resume
        if resume is not None:
            check_resume_state(resume, self._table.uri, self._config.seed, (consumer, consumers))
        self._reader = ContinualReader(
            self._table, self._config, self._converter, consumer, consumers, resume
        )
        self._resume = None
        return (self._output(b) for b in self._reader)

    def state_dict(self) -> dict[str, Any]:
        """The stream position of this consumer (the plan being read, batches done).

        In the main process after DataLoader workers read this dataset, it raises
        WorkerPositionError: save a StatefulDataLoader's ``loader.state_dict()`` instead.
        """
        self._workers.check(
            "LakeStreamDataset",
            "resume with loader.load_state_dict(saved) on a loader of the same world size "
            "and worker count",
        )
        if self._reader is None:
            if self._resume is not None:
                return dict(self._resume)
            raise ResumeStateError("the dataset has not been iterated: there is no position")
        return self._reader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a ``state_dict()`` at the next iteration."""
        consumer = state.get("consumer") if isinstance(state, Mapping) else None
        if not isinstance(consumer, list | tuple) or len(consumer) != 2:
            raise ResumeStateError(f"not a continual-training position: {state!r}")
        check_resume_state(state, self._table.uri, self._config.seed, list(consumer))
        self._resume = dict(state)
        self._reader = None  # the loaded position is the answer until the next pass
        self._workers.position_set()


class _ByteLru:
    """Decoded pieces, least recently used first out, bounded by their bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[int, Block] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: int) -> Block | None:
        with self._lock:
            block = self._items.get(key)
            if block is not None:
                self._items.move_to_end(key)
            return block

    def put(self, key: int, block: Block) -> None:
        with self._lock:
            if key in self._items:
                return
            self._items[key] = block
            self._bytes += sum(a.nbytes for a in block.values())
            while self._bytes > self.limit and len(self._items) > 1:
                _, old = self._items.popitem(last=False)
                self._bytes -= sum(a.nbytes for a in old.values())


class LakeMapDataset(Dataset):
    """Rows of a raylake table by global index, for any ``Sampler``.

    Global index ``i`` is the ``i``-th row of the pinned snapshot in plan order
    (pieces in order, rows in their stable read order). Nothing is materialized: an
    index finds its piece in the row-group index, and decoded pieces stay in a cache
    of at most ``cache_bytes`` (per process). ``ds[i]`` is one sample; ``ds[list]``
    (what ``DataLoader(ds, sampler=BatchSampler(...), batch_size=None)`` asks for) is
    one batch, gathered with numpy; ``__getitems__`` serves ``DataLoader(ds,
    batch_size=...)`` a list of samples.
    """

    def __init__(
        self,
        table: str | Table,
        *,
        columns: Sequence[str] | None = None,
        feature_columns: Sequence[str] | None = None,
        label_column: str | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        transform: Transform | None = None,
        dtype: torch.dtype | None = None,
        fill_null: FillNull = None,
        cache_bytes: int = 1 << 30,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._source, self._converter = _open(
            table,
            storage_options,
            columns,
            feature_columns,
            label_column,
            filter,
            snapshot_id,
            dtype,
            fill_null,
        )
        self._output = TensorBatches(self._converter.layout, dtype, transform, None, False)
        self._offsets = np.concatenate([[0], np.cumsum(self._source.counts, dtype=np.int64)])
        self._cache_bytes = cache_bytes
        self._cache = _ByteLru(cache_bytes)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = None  # a worker process fills its own cache
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = _ByteLru(self._cache_bytes)

    def __repr__(self) -> str:
        s = self._source
        return f"LakeMapDataset({s.uri!r}, snapshot={s.snapshot_id}, rows={len(self)})"

    @property
    def snapshot_id(self) -> int | None:
        return self._source.snapshot_id

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def _piece(self, index: int) -> Block:
        block = self._cache.get(index)
        if block is None:
            block = self._converter(self._source.read_piece(index))
            self._cache.put(index, block)
        return block

    def rows(self, indices: Sequence[int] | np.ndarray) -> Block:
        """The rows at global ``indices`` (negative ones count from the end), as numpy."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        idx = np.where(idx < 0, idx + n, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise IndexError(f"row index {bad} is out of range for {n} rows")
        pieces = np.searchsorted(self._offsets, idx, side="right") - 1
        out: Block = {}
        for p in np.unique(pieces):
            where = np.nonzero(pieces == p)[0]
            block = self._piece(int(p))
            local = idx[where] - self._offsets[p]
            for key, values in block.items():
                if key not in out:
                    out[key] = np.empty((idx.size, *values.shape[1:]), dtype=values.dtype)
                out[key][where] = values[local]
        if not out:  # no indices: empty arrays of the right types
            empty = self._converter(self._source.schema.empty_table())
            out = {k: v[:0] for k, v in empty.items()}
        return out

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            index = range(*index.indices(len(self)))
        if isinstance(index, torch.Tensor):
            index = index.numpy()
        if isinstance(index, (int, np.integer)):
            one = self._output.tensors(self.rows([int(index)]))
            sample = _tree_map(lambda t: t[0], one)
            return sample if self._output.transform is None else self._output.transform(sample)
        return self._output(self.rows(index))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """One gather for a whole batch of indices, returned as the list of samples that
        DataLoader's collate expects."""
        batch = self._output.tensors(self.rows(indices))
        samples = _unbind(batch, len(indices))
        if self._output.transform is None:
            return samples
        return [self._output.transform(s) for s in samples]


def _unbind(batch: Any, n: int) -> list[Any]:
    if isinstance(batch, torch.Tensor):
        return list(batch.unbind(0))
    if isinstance(batch, dict):
        columns = {k: _unbind(v, n) for k, v in batch.items()}
        return [{k: columns[k][i] for k in columns} for i in range(n)]
    parts = [_unbind(v, n) for v in batch]
    return [tuple(p[i] for p in parts) for i in range(n)]
