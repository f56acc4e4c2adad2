"""Paimon's ``sequence.field``: the user's columns that order the versions of a key.

Paimon compares the sequence fields of two versions in the order the option names
them, lexicographically (its ``UserDefinedSeqComparator``): per field a null is older
than any value, whatever ``sequence.field.sort-order`` says, and ``descending`` turns
the order of non-null values around; FLOAT/DOUBLE compare as Java's
``Double.compare`` (NaN newest, -0.0 before 0.0). Versions that tie are ordered by
``_SEQUENCE_NUMBER``.

raylake's merge kernel orders by one sequence column (nulls first). A single
ascending, non-floating field is handed to it as it is; otherwise the section's rows
get one int64 column, :data:`ORDER`: the dense rank of their sequence values under
Paimon's comparison (equal values, equal rank), computed over all rows merged
together, so that the kernel's sort by (key, ORDER, sequence number) is Paimon's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ORDER = "_rl_paimon_order"

_FLIP = np.int64(0x7FFF_FFFF_FFFF_FFFF)


def order_column(fields: Sequence[str], ascending: bool, schema: pa.Schema) -> str | None:
    """The column the merge kernel orders a key's versions by (before the sequence
    number): the field itself, :data:`ORDER` (see :func:`with_order`), or None."""
    if not fields:
        return None
    if len(fields) == 1 and ascending and not pa.types.is_floating(schema.field(fields[0]).type):
        return fields[0]
    return ORDER


def with_order(rows: pa.Table, fields: Sequence[str], ascending: bool) -> pa.Table:
    """``rows`` with :data:`ORDER` appended: the dense rank of each row's sequence
    values under Paimon's comparison (0 is the oldest)."""
    n = rows.num_rows
    if n == 0:
        return rows.append_column(ORDER, pa.array([], pa.int64()))
    direction = "ascending" if ascending else "descending"
    ranks = [_dense_rank(_comparable(rows.column(f)), direction) for f in fields]
    if len(ranks) == 1:
        return rows.append_column(ORDER, pa.array(ranks[0]))
    # Lexicographic: the first field decides, the next breaks its ties (np.lexsort
    # takes its primary key last).
    order = np.lexsort(ranks[::-1])
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for rank in ranks:
        ordered = rank[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    combined = np.empty(n, dtype=np.int64)
    combined[order] = np.cumsum(new) - 1
    return rows.append_column(ORDER, pa.array(combined))


def _dense_rank(values: pa.Array, direction: str) -> np.ndarray:
    """Dense ranks of ``values`` in ``direction``, from 1; a null ranks 0 (Paimon
    compares a null as older than any value in either direction)."""
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False))
    rank = np.zeros(len(values), dtype=np.int64)
    if valid.any():
        present = values.filter(pa.array(valid))
        found = pc.rank(present, sort_keys=direction, tiebreaker="dense")
        rank[valid] = np.asarray(found.to_numpy(), dtype=np.int64)
    return rank


def _comparable(column: pa.ChunkedArray) -> pa.Array:
    """A column Arrow sorts as Paimon compares it: floats as int64 keys in the order of
    Java's ``Double.compare`` (Arrow puts NaN among the nulls and ties -0.0 with 0.0)."""
    arr = column.combine_chunks()
    if isinstance(arr, pa.DictionaryArray):
        arr = arr.dictionary_decode()
    if not pa.types.is_floating(arr.type):
        return arr
    values = np.asarray(arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False))
    values = np.where(np.isnan(values), np.nan, values)  # one NaN, the positive one
    bits = values.view(np.int64)
    keys = np.where(bits < 0, bits ^ _FLIP, bits)
    return pa.array(keys, mask=np.asarray(arr.is_null().to_numpy(zero_copy_only=False)))
