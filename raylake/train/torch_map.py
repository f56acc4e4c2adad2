"""The PyTorch map-style dataset: rows of a pinned snapshot by global index, for any
``Sampler`` (docs/training.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from raylake.arguments import check_count, refuse_unknown_keywords
from raylake.caching import LruCache
from raylake.expr import Expr
from raylake.table import Table
from raylake.train.convert import FillNull
from raylake.train.loader import Transform
from raylake.train.setup import TableRows, open_source
from raylake.train.stream import Block
from raylake.train.tensors import TensorBatches, torch_spec, tree_map, unbind


def _piece_cache(limit: int) -> LruCache[int, Block]:
    """Decoded pieces, least recently used first out, bounded by their bytes."""
    return LruCache(limit, weigh=lambda block: sum(a.nbytes for a in block.values()))


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
        transform: Transform | None = None,
        dtype: torch.dtype | None = None,
        fill_null: FillNull = None,
        cache_bytes: int = 1 << 30,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        spec = torch_spec(columns, feature_columns, label_column, dtype, fill_null)
        rows = TableRows(table, filter, snapshot_id, storage_options)
        self._source, self._converter = open_source(rows, spec)
        self._output = TensorBatches(self._converter.layout, dtype, transform, None, False)
        self._offsets = np.concatenate([[0], np.cumsum(self._source.counts, dtype=np.int64)])
        self._cache_bytes = check_count("cache_bytes", cache_bytes)
        self._cache = _piece_cache(cache_bytes)

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
            sample = tree_map(lambda t: t[0], one)
            return sample if self._output.transform is None else self._output.transform(sample)
        return self._output(self.rows(index))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """One gather for a whole batch of indices, returned as the list of samples that
        DataLoader's collate expects."""
        batch = self._output.tensors(self.rows(indices))
        samples = unbind(batch, len(indices))
        if self._output.transform is None:
            return samples
        return [self._output.transform(s) for s in samples]
