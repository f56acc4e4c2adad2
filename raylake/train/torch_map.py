"""The PyTorch map-style dataset: rows of a pinned snapshot by global index, for any
``Sampler`` (docs/training.md)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from raylake.arguments import check_integer, refuse_unknown_keywords
from raylake.caching import LruCache
from raylake.errors import InvalidArgumentError, ResumeStateError
from raylake.expr import Expr
from raylake.table import Table
from raylake.train.convert import FillNull
from raylake.train.loader import Transform
from raylake.train.samples import Samples, collate
from raylake.train.setup import TableRows, open_source
from raylake.train.stats import FeedRecorder, FeedStats
from raylake.train.stream import Block
from raylake.train.tensors import TensorBatches, torch_spec, tree_map, unbind


def row_numbers(index: Any) -> np.ndarray:
    """``index`` (an int, a 0-d tensor or array, a sequence, tensor or array of ints) as
    an int64 array of its shape. Anything else is refused, as a list refuses ``[2.7]``:
    numpy would cast a float or a bool to a row number (``2.7`` read row 2, a mask of
    bools rows 0 and 1)."""
    array = np.asarray(index)
    if array.ndim > 1:  # rows of a batch, not a grid: flattened, ``__getitems__``'s
        # ``len`` would count the outer list and the batch hold every row
        raise InvalidArgumentError(
            "index", index, "an int, or a one-dimensional sequence, tensor or array of ints"
        )
    if array.dtype == object and all(_python_int(v) for v in array.flat):
        # ints beyond int64 and uint64 (numpy keeps them as objects): out of range, as a
        # list's IndexError says, not "not an int"
        big = next((int(v) for v in array.flat if not -(2**63) <= v < 2**64), None)
        if big is not None:
            raise IndexError(f"row index {big} is out of range")
    if array.dtype.kind not in "iu" and not (array.size == 0 and array.dtype.kind == "f"):
        raise InvalidArgumentError(
            "index",
            index,
            "an int, a 0-d integer tensor or array, a slice, or a sequence of ints",
        )
    # uint64 against uint64: numpy 1.x compares a uint64 with an int64 as floats
    if array.dtype == np.uint64 and array.size and array.max() > np.uint64(2**63 - 1):
        # int64 would wrap it to a negative index, read from the end of the table
        raise IndexError(f"row index {int(array.max())} is out of range")
    return array.astype(np.int64, copy=False)


def _python_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _piece_cache(limit: int) -> LruCache[int, Block]:
    """Decoded pieces, least recently used first out, bounded by their bytes."""
    return LruCache(limit, weigh=lambda block: sum(a.nbytes for a in block.values()))


class LakeMapDataset(Dataset):
    """Rows of a raylake table by global index, for any ``Sampler``.

    The snapshot is pinned when the dataset is made (the latest, ``snapshot_id``, or the
    one current at ``as_of``). Global index ``i`` is the ``i``-th row of that snapshot in
    plan order (pieces in order, rows in their stable read order). Nothing is materialized: an
    index finds its piece in the row-group index, and decoded pieces stay in a cache
    of at most ``cache_bytes`` (per process), converted once each (features
    column-stacked). ``ds[i]`` is one sample; ``ds[list]`` (what ``DataLoader(ds,
    sampler=BatchSampler(...), batch_size=None)`` asks for) is one batch, gathered
    from the pieces with one ``take`` per column group and piece; ``__getitems__``
    serves ``DataLoader(ds, batch_size=...)`` the same gather as a list of samples,
    which ``collate_fn=LakeMapDataset.collate`` hands over as the batch it was
    (raylake/train/samples.py).
    """

    collate = staticmethod(collate)

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
        transform: Transform | None = None,
        dtype: torch.dtype | None = None,
        fill_null: FillNull = None,
        cache_bytes: int = 1 << 30,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        spec = torch_spec(columns, feature_columns, label_column, dtype, fill_null)
        rows = TableRows(table, filter, snapshot_id, storage_options, as_of)
        self._source, self._converter = open_source(rows, spec)
        self._output = TensorBatches(self._converter.layout, dtype, transform, None, False)
        self._cache_bytes = check_integer("cache_bytes", cache_bytes)
        self._cache = _piece_cache(self._cache_bytes)
        self._recorder = FeedRecorder()

    def stats(self) -> FeedStats:
        """The batched fetches (``ds[list]``, ``__getitems__``) of this process so far:
        the time spent in them, rows and bytes delivered, pieces decoded (``windows``).
        A DataLoader worker counts in its own copy of the dataset."""
        return self._recorder.snapshot()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = None  # a worker process fills its own cache
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = _piece_cache(self._cache_bytes)

    def __repr__(self) -> str:
        s = self._source
        return f"LakeMapDataset({s.uri!r}, snapshot={s.snapshot_id}, rows={len(self)})"

    @property
    def snapshot_id(self) -> int | None:
        return self._source.snapshot_id

    def state_dict(self) -> dict[str, Any]:
        """What this dataset's indices mean: the table, the pinned snapshot, the filter
        and a fingerprint of the plan. Not a position (the sampler's state is that):
        StatefulDataLoader saves it beside the sampler's, so that a resume can check the
        same indices still name the same rows."""
        return self._source.selection()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Check a saved ``state_dict()`` against this dataset: ResumeStateError where its
        indices would name other rows (another table, snapshot or filter); a state saved
        while plans put files in name order makes this dataset index that order."""
        if not isinstance(state, Mapping):
            raise ResumeStateError(f"a LakeMapDataset state is a dict, got {type(state).__name__}")
        if not {"table", "snapshot_id"} <= state.keys():
            # A StatefulDataLoader's whole state (what LakeIterableDataset takes) read as
            # "this state is of table None".
            raise ResumeStateError(
                "not a LakeMapDataset state_dict() (a dict with table, snapshot_id, plan "
                f"and filter), got the keys {sorted(map(str, state))[:8]}; a "
                "StatefulDataLoader's state goes to loader.load_state_dict(...), which "
                "hands the dataset its part"
            )
        source = self._source.for_saved(state, "state")
        if source is not self._source:
            self._source = source
            self._cache = _piece_cache(self._cache_bytes)  # cached by piece number

    def __len__(self) -> int:
        return int(self._source.offsets[-1])

    def _piece(self, index: int) -> Block:
        block = self._cache.get(index)
        if block is None:
            block = self._converter(self._source.read_piece(index))
            self._cache.put(index, block)
            self._recorder.window()
        return block

    def rows(self, indices: Sequence[int] | np.ndarray) -> Block:
        """The rows at global ``indices`` (negative ones count from the end), as numpy."""
        given = row_numbers(indices).reshape(-1)
        n = len(self)
        idx = np.where(given < 0, given + n, given)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(given[(idx < 0) | (idx >= n)][0])  # as given, not as wrapped
            raise IndexError(f"row index {bad} is out of range for {n} rows")
        offsets = self._source.offsets
        pieces = np.searchsorted(offsets, idx, side="right") - 1
        # Indices grouped by piece with one sort (a batch of random indices touches
        # many pieces); then one take per piece and column group, no per-row Python.
        order = np.argsort(pieces, kind="stable")
        starts = np.flatnonzero(np.diff(pieces[order])) + 1
        out: Block = {}
        for where in np.split(order, starts) if idx.size else ():
            p = int(pieces[where[0]])
            block = self._piece(p)
            local = idx[where] - offsets[p]
            for key, values in block.items():
                if key not in out:
                    out[key] = np.empty((idx.size, *values.shape[1:]), dtype=values.dtype)
                # "clip": the indices were checked above ("raise" buffers a copy)
                if len(where) == idx.size:  # one piece: straight into place, in order
                    np.take(values, local, axis=0, out=out[key], mode="clip")
                else:
                    out[key][where] = np.take(values, local, axis=0, mode="clip")
        if not out:  # no indices: empty arrays of the right types
            empty = self._converter(self._source.schema.empty_table())
            out = {k: v[:0] for k, v in empty.items()}
        return out

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            index = range(*index.indices(len(self)))
        rows = row_numbers(index)
        if rows.ndim == 0:  # one row: a sample, as ds[3] (a 0-d tensor from torch.randperm)
            one = self._output.tensors(self.rows(rows))
            sample = tree_map(lambda t: t[0], one)
            return sample if self._output.transform is None else self._output.transform(sample)
        start = time.perf_counter()
        block = self.rows(rows)
        batch = self._output(block)
        self._fetched(start, block)
        return batch

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """One gather for a whole batch of indices, as the list of samples that
        DataLoader's collate expects; the samples are made only if something reads
        the list (``LakeMapDataset.collate`` takes the gathered batch as it is)."""
        start = time.perf_counter()
        block = self.rows(indices)
        batch = self._output.tensors(block)
        n = len(indices)
        transform = self._output.transform

        def make() -> list[Any]:
            samples = unbind(batch, n)
            return samples if transform is None else [transform(s) for s in samples]

        self._fetched(start, block)
        # With a transform of samples, the collated batch is not the gathered one.
        return Samples(batch if transform is None else None, n, make)

    def _fetched(self, start: float, block: Block) -> None:
        n = len(next(iter(block.values()))) if block else 0
        self._recorder.delivered(sum(v.nbytes for v in block.values()))
        self._recorder.waited(start, n)
