"""Per-file column statistics, gathered from the Arrow data as it is written."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raylake.format.types import has_min_max
from raylake.pyvalues import exact_type


class StatsCollector:
    """Running min/max/null count per column, updated once per row group (vectorized)."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._stats: dict[str, dict[str, Any]] = {
            f.name: (
                {"min": None, "max": None, "null_count": 0}
                if has_min_max(f.type)
                else {"null_count": 0}
            )
            for f in schema
        }
        # Float columns that held a NaN: their bounds are unknown for good (see expr/pruning.py:
        # NaN is unordered, so a [min, max] that ignores it could prune a file that matches).
        self._unbounded: set[str] = set()
        self.column_sizes = [0] * len(schema)

    def update(self, pa_table: pa.Table) -> None:
        for i, f in enumerate(self._schema):
            column = pa_table.column(i)
            self.column_sizes[i] += column.nbytes
            entry = self._stats[f.name]
            entry["null_count"] += column.null_count
            if "min" not in entry or f.name in self._unbounded:
                continue
            if column.null_count == len(column):
                continue
            if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
                self._unbounded.add(f.name)
                entry["min"] = entry["max"] = None
                continue
            try:
                lo, hi = _min_max(column)
            except (OverflowError, ValueError):
                # a date beyond Python's years 1 to 9999: stored, its bounds unknown
                self._unbounded.add(f.name)
                entry["min"] = entry["max"] = None
                continue
            entry["min"] = lo if entry["min"] is None else min(entry["min"], lo)
            entry["max"] = hi if entry["max"] is None else max(entry["max"], hi)

    def result(self) -> dict[str, dict[str, Any]]:
        return {name: dict(entry) for name, entry in self._stats.items()}


def _min_max(column: pa.ChunkedArray) -> tuple[Any, Any]:
    if pa.types.is_duration(column.type):
        # pyarrow has no min_max kernel for durations; their order is that of the int64 counts.
        bounds = pc.min_max(column.cast(pa.int64())).as_py()
        return (
            pa.scalar(bounds["min"], column.type).as_py(),
            pa.scalar(bounds["max"], column.type).as_py(),
        )
    # time64[ns] as its nanoseconds: a datetime.time would cut the maximum below the values
    bounds = pc.min_max(column.cast(exact_type(column.type))).as_py()
    return bounds["min"], bounds["max"]
