"""Arrow columns to numpy arrays for tensors: columnar, without copies where possible.

A fixed-width column without nulls becomes a numpy view of the Arrow buffer (torch
then wraps it without a copy, raylake/train/tensors.py). Booleans (bit-packed in
Arrow) and columns with filled nulls are copied once. Feature columns are stacked
into one 2-D array once per chunk of rows (thousands of batches), never per batch.

Which Arrow types a loader takes and what each becomes: raylake/train/arrow_numpy.py.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.caching import ProcessLock
from raylake.errors import SchemaArgumentError, UnknownColumnError
from raylake.train.arrow_numpy import (
    check_fill_null,
    check_type,
    fill_scalar,
    inner_shape,
    is_bytes,
    numpy_dtype,
    to_numpy,
)
from raylake.train.fill import Copiers, Source, each, fill, fill_columns, split_rows

# The key of stacked features in a converted block; "_rl_" names are never table columns.
FEATURES = "_rl_features"
FEATURES_T = "_rl_features_t"  # the stacked features, (width, rows): Converter.columns_first
ORDER = "_rl_order"  # a whole shuffled window, not yet gathered: its rows' epoch order
# A binary or string column handed to a transform: under its own name, int64 row
# positions (gathered and cut like any column); under ARROW + name, a 0-d object array
# holding the window's Arrow column, which the positions index (raylake/train/binary.py).
ARROW = "_rl_arrow:"
FillNull = Any  # a scalar for every column, or a mapping column -> scalar
# (shape, dtype) -> an array to write stacked features into, or None (Converter.columns_first)
FeaturesOut = Callable[[tuple[int, int], np.dtype], "np.ndarray | None"]

_STACK_ROWS = 1 << 16  # rows stacked through the scratch array at a time, at most
_STACK_BYTES = 512 << 10  # the scratch block's size: it stays in a core's cache
_KEPT_WINDOWS = 4  # stacked windows' memory kept for reuse, per converter
_KEPT_BYTES = 32 << 20  # larger windows are not kept (their page faults are a smaller share)


@dataclass(frozen=True)
class Layout:
    """Which columns are read and how a batch groups them.

    - ``features`` given: ``(features, label)``, the features stacked into one 2-D
      array (``label`` may be None: then the features alone);
    - otherwise a dict of the ``named`` columns, and with a ``label``, ``(dict, label)``.
    """

    columns: tuple[str, ...]
    features: tuple[str, ...] | None
    label: str | None
    named: tuple[str, ...]

    @classmethod
    def of(
        cls,
        schema: pa.Schema,
        *,
        columns: Sequence[str] | None,
        feature_columns: Sequence[str] | None,
        label_column: str | None,
    ) -> Layout:
        names = schema.names
        # One name for a list of names (a string would be read as a list of letters).
        columns = [columns] if isinstance(columns, str) else columns
        feature_columns = [feature_columns] if isinstance(feature_columns, str) else feature_columns
        _check_distinct("columns", columns)
        _check_distinct("feature_columns", feature_columns)
        for c in [
            *(columns or ()),
            *(feature_columns or ()),
            *([label_column] if label_column else []),
        ]:
            if c not in names:
                raise UnknownColumnError(c, names)
        if feature_columns is not None:
            if columns is not None:
                raise SchemaArgumentError(
                    "columns",
                    columns,
                    "None with feature_columns= (columns= gives a dict of tensors, "
                    "feature_columns= one stacked feature tensor: pass one)",
                )
            if not feature_columns:
                raise SchemaArgumentError(
                    "feature_columns", feature_columns, "a non-empty list of column names"
                )
            features = tuple(feature_columns)
            if label_column in features:
                raise SchemaArgumentError(
                    "label_column", label_column, "a column that is not a feature column"
                )
            read = (*features, *([label_column] if label_column else []))
            return cls(read, features, label_column, ())
        chosen = list(names if columns is None else columns)
        named = tuple(c for c in chosen if c != label_column)
        read = (*named, *([label_column] if label_column else []))
        if not read:
            raise SchemaArgumentError(
                "columns", columns, "at least one column to read (or name feature_columns=)"
            )
        return cls(read, None, label_column, named)


def _check_distinct(name: str, names: Sequence[str] | None) -> None:
    """Refuse a column named twice in ``names``: read once, it has no second place to go
    (pyarrow said the column did not exist)."""
    seen: set[str] = set()
    for c in names or ():
        if c in seen:
            raise SchemaArgumentError(
                name, names, f"a list of distinct column names ({c!r} is named twice)"
            )
        seen.add(c)


class Converter:
    """Converts Arrow tables of the layout's columns to named numpy arrays."""

    def __init__(
        self,
        schema: pa.Schema,
        layout: Layout,
        *,
        target: str,
        strings: bool = False,
        dtype: np.dtype | None = None,
        fill_null: FillNull = None,
        binary: bool = False,
    ) -> None:
        self.layout = layout
        self.schema = pa.schema([schema.field(c) for c in layout.columns])
        features = layout.features or ()
        for f in self.schema:
            feature = f.name in features
            taken = (strings or binary) and not feature
            check_type(f.name, f.type, target, taken, feature, named_strings=strings)
        # Binary and string columns handed to a transform as positions (``binary``): the
        # named ones and the label, never features (those are stacked into numbers).
        self.binary: tuple[str, ...] = (
            tuple(f.name for f in self.schema if f.name not in features and is_bytes(f.type))
            if binary and not strings
            else ()
        )
        self.fill = check_fill_null(fill_null, schema, self.schema, self.binary)
        # A binary column's nulls reach the transform as None, unless fill_null names the
        # column (one value for every column is meant for numbers, not bytes).
        self.binary_fill: dict[str, pa.Scalar] = {
            name: fill_scalar(self.schema.field(name).type, self.fill[name])
            for name in self.binary
            if isinstance(self.fill, dict) and self.fill.get(name) is not None
        }
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._local = threading.local()
        self._kept: list[np.ndarray] = []  # stacked windows' memory, for reuse (_stacked)
        self._kept_lock = ProcessLock()  # made anew in a forked child: a parent's may be held
        if layout.features is not None:
            types = [numpy_dtype(self.schema.field(c).type) for c in layout.features]
            self.features_dtype = self.dtype or np.result_type(*types)
            self.widths = {
                c: int(np.prod(inner_shape(self.schema.field(c).type), dtype=np.int64))
                for c in layout.features
            }
            self.features_width = sum(self.widths.values())

    def _scratch(self, n: int) -> np.ndarray:
        """A (width, n) array for stacking, reused by this thread: fresh memory for every
        window would be paid again in page faults."""
        have = getattr(self._local, "scratch", None)
        if have is None or have.shape[1] < n:
            have = np.empty((self.features_width, n), dtype=self.features_dtype)
            self._local.scratch = have
        return have[:, :n]

    def _stacked(self, n: int) -> np.ndarray:
        """An (n, width) array for a window's stacked features: the memory of an earlier
        window when nothing refers to it any more, else fresh.

        A window's batches are views of it (torch tensors over its memory hold a
        reference to the array), so an array that only this pool refers to is not seen
        by anyone: reusing it saves the page faults of fresh memory (the kernel zeroes
        every fresh page; docs/benchmarks.md, "Second pass on the CPU epoch"). The pool
        is the converter's, kept from one pass to the next (each pass converts on a
        thread of its own, and a pool per thread began every epoch with fresh
        windows), at most ``_KEPT_WINDOWS`` arrays of at most ``_KEPT_BYTES`` each.
        """
        with self._kept_lock:
            kept = self._kept
            for i in range(len(kept)):
                # 2: the list's reference and getrefcount's argument; nothing else holds it
                if sys.getrefcount(kept[i]) == 2 and len(kept[i]) >= n:
                    return kept[i][:n]
            fresh = np.empty((n, self.features_width), dtype=self.features_dtype)
            if fresh.nbytes > _KEPT_BYTES:
                return fresh
            if len(kept) >= _KEPT_WINDOWS:
                kept.pop(0)  # the oldest goes (it lives on while batches refer to it)
            kept.append(fresh)
            return fresh

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # A copy (a DataLoader worker, a Ray task) makes its own scratch and pool.
        del state["_local"], state["_kept"], state["_kept_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
        self._kept = []
        self._kept_lock = ProcessLock()

    def _fill_for(self, column: str) -> Any:
        return self.fill.get(column) if isinstance(self.fill, dict) else self.fill

    def column(self, table: pa.Table, name: str) -> np.ndarray:
        if name in self.binary:  # row positions; the column itself goes beside them
            return np.arange(table.num_rows, dtype=np.int64)
        return to_numpy(name, table.column(name), self._fill_for(name))

    def __call__(
        self, table: pa.Table, features: bool = True, copiers: Copiers | None = None
    ) -> dict[str, np.ndarray]:
        """The columns as numpy arrays, the features stacked (``copiers``: threads that
        share the copies, raylake/train/fill.py)."""
        out: dict[str, np.ndarray] = {}
        layout = self.layout
        if layout.features is not None and features:
            out[FEATURES] = self._stack(table, layout.features, copiers)
        for name in layout.named:
            arr = self.column(table, name)
            if self.dtype is not None and arr.dtype.kind == "f":
                arr = arr.astype(self.dtype, copy=False)
            out[name] = arr
        if layout.label is not None:
            out[layout.label] = self.column(table, layout.label)
        for name in self.binary:  # last: a block's first array tells its row count
            column = table.column(name)  # no copy: the pieces' buffers, as read
            if column.null_count and name in self.binary_fill:
                column = pc.fill_null(column, self.binary_fill[name])
            held = np.empty((), dtype=object)
            held[()] = column
            out[ARROW + name] = held
        return out

    def _stack(
        self, table: pa.Table, features: Sequence[str], copiers: Copiers | None = None
    ) -> np.ndarray:
        n = table.num_rows
        if len(features) == 1:
            arr = self.column(table, features[0]).reshape(n, self.features_width)
            return arr.astype(self.features_dtype, copy=False)
        for name in features:
            if table.column(name).null_count and self._fill_for(name) is None:
                to_numpy(name, table.column(name))  # raises, naming the column and its nulls
        # Block by block, column by column into a (width, rows) scratch array whose rows
        # are contiguous copies, then one transposing copy into the result (cache-blocked
        # in numpy): about 3x faster than writing each column into a strided column of
        # the result. The scratch is reused (fresh memory costs page faults every time).
        # Each column's chunks become numpy views once per window, not once per block:
        # the blocks' loop is then numpy slicing only (the per-block Arrow slicing and
        # conversion were about a third of the stacking's CPU).
        sources = self._feature_sources(table, features)
        out = self._stacked(n)
        row_bytes = self.features_width * self.features_dtype.itemsize
        block = max(1024, min(_STACK_ROWS, _STACK_BYTES // max(row_bytes, 1)))

        def stack(lo: int, hi: int) -> None:  # on any copier: each has its own scratch
            scratch = self._scratch(min(n, block))[:, : hi - lo]
            fill(sources, scratch, lo)
            out[lo:hi] = scratch.T

        each(stack, n, block, copiers)
        return out

    def _feature_sources(self, table: pa.Table, features: Sequence[str]) -> list[Source]:
        """Each feature's rows as (first row, values) numpy views of its chunks, values
        shaped (width, rows): what :func:`_fill` copies from."""
        sources: list[Source] = []
        for name in features:
            width, fill = self.widths[name], self._fill_for(name)
            column = table.column(name)
            row, views = 0, []
            for chunk in column.chunks:
                k = len(chunk)
                if k:
                    views.append((row, to_numpy(name, chunk, fill).reshape(k, width).T))
                row += k
            sources.append((width, views))
        return sources

    def gather(
        self, block: dict[str, np.ndarray], picked: np.ndarray, copiers: Copiers | None = None
    ) -> dict[str, np.ndarray]:
        """The rows ``picked`` of a converted window, in that order (a shuffled window's
        part). Stacked features are gathered into memory of an earlier window that
        nothing refers to any more (``_stacked``), as stacking does."""
        out: dict[str, np.ndarray] = {}
        for name, values in block.items():
            if name.startswith(ARROW):  # the Arrow column: its positions are gathered
                out[name] = values
            elif name == FEATURES and values.ndim == 2 and values.dtype == self.features_dtype:
                dest = self._stacked(len(picked))

                def take(
                    lo: int, hi: int, values: np.ndarray = values, dest: np.ndarray = dest
                ) -> None:
                    # "clip": the positions are a permutation's (valid); "raise" copies
                    np.take(values, picked[lo:hi], axis=0, out=dest[lo:hi], mode="clip")

                step = split_rows(len(picked), copiers, values.shape[1] * values.itemsize)
                each(take, len(picked), step, copiers)
                out[name] = dest
            else:  # np.take gathers rows about 3x faster than values[picked]
                out[name] = np.take(values, picked, axis=1 if name == FEATURES_T else 0)
        return out

    def columns_first(
        self, table: pa.Table, out: FeaturesOut | None = None, copiers: Copiers | None = None
    ) -> dict[str, np.ndarray]:
        """As a call, but several stacked features come as one (width, rows) array under
        ``FEATURES_T``: contiguous copies only, for a device to transpose (a GPU does it
        in microseconds; the host's transposing copy is most of the stacking's time).
        ``out(shape, dtype)`` may give the array to fill (pinned memory that is copied
        to the device as it is, raylake/train/windows.py), or None."""
        features = self.layout.features
        if features is None or len(features) == 1:
            return self(table, copiers=copiers)
        for name in features:
            if table.column(name).null_count and self._fill_for(name) is None:
                to_numpy(name, table.column(name))  # raises, naming the column and its nulls
        rest = self(table.drop_columns(list(features)), features=False)
        shape = (self.features_width, table.num_rows)
        columns = None if out is None else out(shape, self.features_dtype)
        if columns is None:
            columns = np.empty(shape, dtype=self.features_dtype)
        fill_columns(self._feature_sources(table, features), columns, 0, copiers)
        return {FEATURES_T: columns, **rest}
