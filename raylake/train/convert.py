"""Arrow columns to numpy arrays for tensors: columnar, without copies where possible.

A fixed-width column without nulls becomes a numpy view of the Arrow buffer (torch
then wraps it without a copy, raylake/train/tensors.py). Booleans (bit-packed in
Arrow) and columns with filled nulls are copied once. Feature columns are stacked
into one 2-D array once per chunk of rows (thousands of batches), never per batch.

Types (docs/training.md): integers, floats and bools keep their type; timestamps
become int64 milliseconds since the epoch (UTC); dates, times and durations their
integer storage (date32: days, date64: ms); fixed-size lists become 2-D (or N-D)
arrays; strings and binaries become object arrays (TensorFlow), or, for a torch
transform, row positions into their Arrow column (``binary=``; raylake/train/binary.py).
Anything else is refused when the loader is made, naming the column.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import (
    SchemaArgumentError,
    SchemaError,
    UnknownColumnError,
    UnsupportedTypeError,
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
_KEPT_WINDOWS = 4  # stacked windows' memory kept for reuse, per converting thread
_KEPT_BYTES = 32 << 20  # larger windows are not kept (their page faults are a smaller share)
_TS_TO_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


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


def is_bytes(dtype: pa.DataType) -> bool:
    """A string or binary type (what only a transform can turn into tensors)."""
    return bool(
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
    )


def _check_type(
    column: str, dtype: pa.DataType, target: str, strings: bool, feature: bool = False
) -> None:
    """Refuse, naming the column, a type that cannot become an array of ``target``."""
    if pa.types.is_fixed_size_list(dtype):
        value = dtype.value_type
        if not _is_numeric(value) and not pa.types.is_fixed_size_list(value):
            raise UnsupportedTypeError(
                column, dtype, target, "fixed-size lists must hold numbers or booleans"
            )
        _check_type(column, value, target, strings=False)
        return
    if _is_numeric(dtype) or _is_temporal(dtype):
        return
    if strings and is_bytes(dtype):
        return
    hints = {
        "decimal": "cast it to float64 when writing, or leave it out of the columns",
        "list": "variable-length lists have no tensor shape; use a fixed-size list",
        "string": (
            "name it in columns= (not feature_columns=) of a LakeIterableDataset with a "
            "transform=, which gets it as a list of bytes or str per batch to decode "
            '(docs/training.md, "Binary and string columns"); or tokenize or encode it '
            "into numbers first, or leave it out"
            if feature
            else "decode it in a transform=: a LakeIterableDataset with one hands the "
            'column to it as a list of bytes or str per batch (docs/training.md, "Binary '
            'and string columns"); or tokenize or encode it first, or leave it out of the '
            "columns"
        ),
    }
    kind = (
        "decimal"
        if pa.types.is_decimal(dtype)
        else "list"
        if pa.types.is_list(dtype) or pa.types.is_large_list(dtype)
        else "string"
        if is_bytes(dtype)
        else ""
    )
    raise UnsupportedTypeError(column, dtype, target, hints.get(kind, ""))


def _is_numeric(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_boolean(dtype)
    )


def _is_temporal(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_timestamp(dtype)
        or pa.types.is_date(dtype)
        or pa.types.is_time(dtype)
        or pa.types.is_duration(dtype)
    )


def numpy_dtype(dtype: pa.DataType) -> np.dtype:
    """The numpy dtype a column of ``dtype`` becomes (object for strings)."""
    if pa.types.is_fixed_size_list(dtype):
        return numpy_dtype(dtype.value_type)
    if pa.types.is_timestamp(dtype) or pa.types.is_duration(dtype):
        return np.dtype(np.int64)
    if pa.types.is_date32(dtype) or pa.types.is_time32(dtype):
        return np.dtype(np.int32)
    if pa.types.is_date64(dtype) or pa.types.is_time64(dtype):
        return np.dtype(np.int64)
    if _is_numeric(dtype):
        return np.dtype(dtype.to_pandas_dtype())
    return np.dtype(object)


def inner_shape(dtype: pa.DataType) -> tuple[int, ...]:
    """The shape of one row's value: () for scalars, (n,) or (n, m, ...) for fixed-size lists."""
    shape: list[int] = []
    while pa.types.is_fixed_size_list(dtype):
        shape.append(dtype.list_size)
        dtype = dtype.value_type
    return tuple(shape)


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
            _check_type(f.name, f.type, target, (strings or binary) and not feature, feature)
        # Binary and string columns handed to a transform as positions (``binary``): the
        # named ones and the label, never features (those are stacked into numbers).
        self.binary: tuple[str, ...] = (
            tuple(f.name for f in self.schema if f.name not in features and is_bytes(f.type))
            if binary and not strings
            else ()
        )
        self.fill = dict(fill_null) if isinstance(fill_null, Mapping) else fill_null
        if isinstance(self.fill, dict):
            for c in self.fill:
                if c not in self.schema.names:
                    raise UnknownColumnError(c, list(self.schema.names))
        # A binary column's nulls reach the transform as None, unless fill_null names
        # the column (one value for every column is meant for numbers, not bytes).
        self.binary_fill: dict[str, pa.Scalar] = {}
        for name in self.binary:
            if isinstance(self.fill, dict) and self.fill.get(name) is not None:
                kind = self.schema.field(name).type
                try:
                    self.binary_fill[name] = pa.scalar(self.fill[name]).cast(kind)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                    raise SchemaError(
                        f"fill_null for column {name!r} ({kind}) is {self.fill[name]!r}, "
                        f"which is not a value of that type: {e}"
                    ) from e
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._local = threading.local()
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
        is the converting thread's (a pass's), at most ``_KEPT_WINDOWS`` arrays of at
        most ``_KEPT_BYTES`` each.
        """
        kept: list[np.ndarray] | None = getattr(self._local, "kept", None)
        if kept is None:
            kept = self._local.kept = []
        for i in range(len(kept)):
            # 2: the list's reference and getrefcount's argument; nothing else holds it
            if sys.getrefcount(kept[i]) == 2 and len(kept[i]) >= n:
                return kept[i][:n]
        fresh = np.empty((n, self.features_width), dtype=self.features_dtype)
        if fresh.nbytes > _KEPT_BYTES:
            return fresh
        if len(kept) < _KEPT_WINDOWS:
            kept.append(fresh)
        else:  # the oldest goes (it lives on while batches refer to it)
            kept.pop(0)
            kept.append(fresh)
        return fresh

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_local"]  # a copy (a DataLoader worker, a Ray task) makes its own scratch
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

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


def to_numpy(name: str, column: pa.ChunkedArray | pa.Array, fill: Any = None) -> np.ndarray:
    """One column as a numpy array (a view of the Arrow buffer when it can be)."""
    if isinstance(column, pa.ChunkedArray):  # one chunk: no copy (combining copies)
        arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    else:
        arr = column
    if arr.null_count:
        if fill is None:
            raise SchemaError(
                f"column {name!r} has {arr.null_count} null value(s), which a tensor cannot "
                f"hold; pass fill_null={{{name!r}: <value>}} (or a value for every column), "
                "or filter them out"
            )
        if not pa.types.is_fixed_size_list(arr.type):
            arr = pc.fill_null(arr, pa.scalar(fill).cast(arr.type))
    dtype = arr.type
    if pa.types.is_fixed_size_list(dtype):
        return _fixed_size_list(name, arr, fill)
    if pa.types.is_timestamp(dtype):
        mul, div = _TS_TO_MS[dtype.unit]
        ints = arr.view(pa.int64()).to_numpy(zero_copy_only=False)
        return ints * mul if mul != 1 else (ints // div if div != 1 else ints)
    if pa.types.is_date(dtype) or pa.types.is_time(dtype) or pa.types.is_duration(dtype):
        storage = pa.int32() if dtype.bit_width == 32 else pa.int64()
        return arr.view(storage).to_numpy(zero_copy_only=False)
    return arr.to_numpy(zero_copy_only=False)


def _fixed_size_list(name: str, arr: pa.FixedSizeListArray, fill: Any) -> np.ndarray:
    n, width = len(arr), arr.type.list_size
    values = arr.values.slice(arr.offset * width, n * width)
    flat = to_numpy(name, values, fill)
    out = flat.reshape((n, width, *flat.shape[1:]))
    if arr.null_count:  # whole lists that are null: every element takes the fill value
        mask = arr.is_null().to_numpy(zero_copy_only=False)
        out = out.copy()
        out[mask] = fill
    return out
