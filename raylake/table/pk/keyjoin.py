"""Narrowing rows to a set of primary keys, whatever columns the rows have."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

_ROW = "_rl_row"  # the reserved prefix: no key column has the name


def rows_with_keys(rows: pa.Table, keys: pa.Table, names: Sequence[str]) -> pa.Table:
    """The rows of ``rows`` whose ``names`` columns equal those of a row of ``keys``, in
    their order and with their schema. Only the key columns and row positions are
    joined: Arrow's join refuses a table with a nested (list, struct, map) column
    beside its keys, which a primary-key table may have."""
    names = list(names)
    positions = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    probe = rows.select(names).append_column(_ROW, positions)
    hit = probe.join(keys.select(names), keys=names, join_type="left semi")
    return rows.take(np.sort(hit.column(_ROW).to_numpy()))
