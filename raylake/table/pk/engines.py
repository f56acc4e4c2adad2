"""Merge engines: combine the versions of each key into its current row, columnar.

The one dispatch point for ``deduplicate``, ``first-row``, ``partial-update`` and
``aggregation``. Rows are sorted once by (key, [sequence field], sequence); key
runs are found by comparing neighbours; every engine is then a handful of numpy
``reduceat`` calls or one pyarrow hash aggregation over the run ids. No Python
loop touches a row or a key.

Deletes reset a key: the state of a key is the engine applied to its versions
*after* its last ``-D``; a key whose last version is a ``-D`` is absent. With
``keep_deletes`` the merge keeps each key's last ``-D`` before its merged row, so
that merging the result again with older or newer rows gives the same answer
(writers pre-merge their buffers this way).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.table.pk.bucket import integer_values
from raylake.table.pk.schema import DELETE, KIND, SEQ, MergeSpec

_HASH_AGGREGATES = {"sum": "sum", "min": "min", "max": "max"}
# pyarrow 25 takes the null placement per sort key and deprecates the global option.
_PER_KEY_NULL_PLACEMENT = int(pa.__version__.split(".")[0]) >= 25


@dataclass(frozen=True)
class _Runs:
    """Key runs of rows in sorted order."""

    starts: np.ndarray  # first position of each run
    run_of: np.ndarray  # run id of each position
    is_delete: np.ndarray  # per position
    last_delete: np.ndarray  # per run: position of its last -D, or -1

    @property
    def size(self) -> int:
        return len(self.run_of)

    @property
    def ends(self) -> np.ndarray:
        return np.append(self.starts[1:], self.size) - 1

    def valid(self) -> np.ndarray:
        """Positions that count for the state: not a -D, and after the run's last -D."""
        positions = np.arange(self.size)
        return ~self.is_delete & (positions > self.last_delete[self.run_of])


def sort_order(rows: pa.Table, spec: MergeSpec) -> np.ndarray | None:
    """Indices that sort ``rows`` by key, then version order; None if already sorted.

    The sort is stable, so equal (key, order) pairs keep their input order.
    """
    seq = np.asarray(rows.column(SEQ).to_numpy())
    ints = _single_integer_key(rows, spec)
    if ints is not None:
        same = ints[1:] == ints[:-1]
        if np.all((ints[1:] > ints[:-1]) | (same & (seq[1:] > seq[:-1]))):
            return None
        if np.all(seq[1:] > seq[:-1]):  # input order is version order
            return np.argsort(ints, kind="stable")
        return np.lexsort((seq, ints))
    # Nulls of the sequence field sort first: a version without one is the oldest.
    order = sort_indices_nulls_first(rows, [*spec.key, *spec.order_columns])
    return np.asarray(order.to_numpy())


def sort_indices_nulls_first(rows: pa.Table, columns: list[str]) -> pa.Array:
    """Indices that sort ``rows`` ascending by ``columns``, nulls first, stably."""
    if _PER_KEY_NULL_PLACEMENT:
        keys = [(c, "ascending", "at_start") for c in columns]
        return pc.sort_indices(rows, sort_keys=keys)
    return pc.sort_indices(
        rows, sort_keys=[(c, "ascending") for c in columns], null_placement="at_start"
    )


def _single_integer_key(rows: pa.Table, spec: MergeSpec) -> np.ndarray | None:
    if len(spec.key) != 1 or spec.sequence_field is not None:
        return None
    return integer_values(rows.column(spec.key[0]))


def run_starts(keys: list[pa.ChunkedArray | pa.Array]) -> np.ndarray:
    """Positions where a new key starts, for key columns already in sorted order."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for column in keys:
        ints = integer_values(column)
        if ints is not None:
            new[1:] |= ints[1:] != ints[:-1]
            continue
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        differs = pc.not_equal(arr.slice(1), arr.slice(0, n - 1))
        new[1:] |= np.asarray(differs.to_numpy(zero_copy_only=False))
    return np.flatnonzero(new)


def _runs(sorted_rows: pa.Table, spec: MergeSpec) -> _Runs:
    starts = run_starts([sorted_rows.column(k) for k in spec.key])
    n = sorted_rows.num_rows
    run_of = np.zeros(n, dtype=np.int64)
    run_of[starts[1:]] = 1
    run_of = np.cumsum(run_of)
    is_delete = np.asarray(sorted_rows.column(KIND).to_numpy()) == DELETE
    if is_delete.any():
        last_delete = np.maximum.reduceat(np.where(is_delete, np.arange(n), -1), starts)
    else:
        last_delete = np.full(len(starts), -1, dtype=np.int64)
    return _Runs(starts, run_of, is_delete, last_delete)


def merge(rows: pa.Table, spec: MergeSpec, *, keep_deletes: bool = False) -> pa.Table:
    """One row per live key (key order), merged by the spec's engine.

    ``rows`` holds the key columns, ``_rl_seq`` (effective sequence), ``_rl_kind``,
    the sequence field if any, and any subset of the value columns; the result has
    the same columns. Rows may come in any order.
    """
    if rows.num_rows == 0:
        return rows
    positions = merge_positions(rows, spec, keep_deletes=keep_deletes)
    if positions is not None:
        return rows.take(pa.array(positions))
    order = sort_order(rows, spec)
    sorted_rows = rows if order is None else rows.take(pa.array(order))
    return _combine(sorted_rows, _runs(sorted_rows, spec), spec, keep_deletes)


def merge_positions(
    rows: pa.Table, spec: MergeSpec, *, keep_deletes: bool = False
) -> np.ndarray | None:
    """For engines that pick whole rows (deduplicate, first-row): the rows to keep, in key order.

    ``rows`` needs only the key, order and kind columns, so a caller can decide on
    a narrow table and take the wide rows once. None for engines that compute rows.
    """
    if spec.engine not in ("deduplicate", "first-row"):
        return None
    order = sort_order(rows, spec)
    needed = [*spec.key, KIND]
    probe = rows.select(needed) if order is None else rows.select(needed).take(pa.array(order))
    runs = _runs(probe, spec)
    pick = _last_rows if spec.engine == "deduplicate" else _first_rows
    picked = pick(runs, keep_deletes)
    return picked if order is None else order[picked]


def _last_rows(runs: _Runs, keep_deletes: bool) -> np.ndarray:
    ends = runs.ends
    return ends if keep_deletes else ends[~runs.is_delete[ends]]


def _first_rows(runs: _Runs, keep_deletes: bool) -> np.ndarray:
    positions = np.arange(runs.size)
    first = np.minimum.reduceat(np.where(runs.valid(), positions, runs.size), runs.starts)
    picked = first[first < runs.size]
    if keep_deletes:
        # A run's last -D precedes its first valid row, so position order interleaves them.
        picked = np.sort(np.concatenate([picked, runs.last_delete[runs.last_delete >= 0]]))
    return picked


def _combine(sorted_rows: pa.Table, runs: _Runs, spec: MergeSpec, keep_deletes: bool) -> pa.Table:
    """partial-update and aggregation: compute each value column per key run."""
    positions = np.arange(runs.size)
    valid = runs.valid()
    last_valid = np.maximum.reduceat(np.where(valid, positions, -1), runs.starts)
    live = last_valid >= 0
    base = last_valid[live]
    fixed = {*spec.key, SEQ, KIND}
    if spec.sequence_field:
        fixed.add(spec.sequence_field)
    columns = []
    for name in sorted_rows.column_names:
        column = sorted_rows.column(name).combine_chunks()
        if name in fixed:
            columns.append(column.take(pa.array(base)))
            continue
        function = "last-non-null" if spec.engine == "partial-update" else spec.aggregates[name]
        columns.append(_aggregate(column, function, runs, valid, live, base))
    merged = pa.Table.from_arrays(columns, schema=sorted_rows.schema)
    deletes = runs.last_delete[runs.last_delete >= 0]
    if not keep_deletes or len(deletes) == 0:
        return merged
    both = pa.concat_tables([sorted_rows.take(pa.array(deletes)), merged])
    return both.take(pa.array(np.argsort(np.concatenate([deletes, base]), kind="stable")))


def _aggregate(
    column: pa.Array,
    function: str,
    runs: _Runs,
    valid: np.ndarray,
    live: np.ndarray,
    base: np.ndarray,
) -> pa.Array:
    """One value column of the merged rows, for the live runs in run order."""
    if function == "last":
        return column.take(pa.array(base))
    if function in ("min", "max") and pa.types.is_floating(column.type):
        return _float_extreme(column, function, runs, valid, live)
    if function in _HASH_AGGREGATES:
        return _hash_aggregate(column, _HASH_AGGREGATES[function], runs, valid)
    positions = np.arange(runs.size)
    present = valid & np.asarray(column.is_valid().to_numpy(zero_copy_only=False))
    if function == "last-non-null":
        chosen = np.maximum.reduceat(np.where(present, positions, -1), runs.starts)[live]
    elif function == "first-non-null":
        first = np.minimum.reduceat(np.where(present, positions, runs.size), runs.starts)[live]
        chosen = np.where(first == runs.size, -1, first)
    else:
        raise ValueError(f"unknown aggregate function {function!r}")  # validated at create time
    return column.take(pa.array(chosen, mask=chosen < 0))


def _float_extreme(
    column: pa.Array, function: str, runs: _Runs, valid: np.ndarray, live: np.ndarray
) -> pa.Array:
    """min/max of a float column in Java's order (Double.compare, Paimon's): NaN above
    every number, -0.0 below 0.0. Arrow's skip NaN and take either zero."""
    present = valid & np.asarray(column.is_valid().to_numpy(zero_copy_only=False))
    values = np.asarray(column.cast(pa.float64()).fill_null(0.0).to_numpy(), np.float64)
    bits = np.where(np.isnan(values), np.nan, values).view(np.int64)  # one NaN
    # The bits of a float, ordered as the float (negatives reversed), -0.0 below 0.0.
    key = np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)
    if function == "min":
        key = ~key  # reverses the order, without overflow
    key = np.where(present, key, np.iinfo(np.int64).min)
    best = np.maximum.reduceat(key, runs.starts)[runs.run_of]
    positions = np.where(present & (key == best), np.arange(runs.size), -1)
    chosen = np.maximum.reduceat(positions, runs.starts)[live]
    return column.take(pa.array(chosen, mask=chosen < 0))


def _hash_aggregate(column: pa.Array, function: str, runs: _Runs, valid: np.ndarray) -> pa.Array:
    """sum/min/max over the valid rows of each run; nulls are skipped, all-null gives null."""
    chosen = np.flatnonzero(valid)
    grouped = pa.table({"run": pa.array(runs.run_of[chosen]), "v": column.take(pa.array(chosen))})
    result = grouped.group_by("run", use_threads=False).aggregate([("v", function)])
    order = pc.sort_indices(result.column("run"))
    values = result.column(f"v_{function}").take(order).combine_chunks()
    if pa.types.is_decimal(column.type):  # pyarrow < 17 sums in the column's own type
        values = _null_beyond_precision(values, column.type)
    if values.type != column.type:
        # Sums widen (int32 -> int64); the table keeps its type and wraps like Java's ints.
        values = values.cast(column.type, safe=False)
    return values


def _null_beyond_precision(values: pa.Array, dtype: pa.Decimal128Type) -> pa.Array:
    """Decimal sums that do not fit the column's precision, as null.

    A decimal has no wrap-around: cast unchecked, such a sum would be an invalid value
    of the column's type, which statistics, filters and Parquet refuse. Null is Paimon's
    answer (Flink's DecimalData) and Spark's without ANSI mode.
    """
    digits = dtype.precision - dtype.scale
    largest = Decimal(f"{'9' * digits or '0'}.{'9' * dtype.scale}")
    bound = pa.scalar(largest, values.type)
    fits = pc.and_(pc.greater_equal(values, pc.negate(bound)), pc.less_equal(values, bound))
    return pc.if_else(fits, values, pa.scalar(None, values.type))
