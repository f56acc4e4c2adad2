"""Per-file column statistics, gathered from the Arrow data as it is written."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raylake.table.types import has_min_max


class StatsCollector:
    """Running min/max/null count per column, updated once per row group (vectorized)."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._stats: dict[str, dict[str, Any]] = {
            f.name: ({"min": None, "max": None, "null_count": 0} if has_min_max(f.type) else {
                "null_count": 0
            })
            for f in schema
        }
        self.column_sizes = [0] * len(schema)

    def update(self, pa_table: pa.Table) -> None:
        for i, f in enumerate(self._schema):
            column = pa_table.column(i)
            self.column_sizes[i] += column.nbytes
            entry = self._stats[f.name]
            entry["null_count"] += column.null_count
            if "min" not in entry or column.null_count == len(column):
                continue
            bounds = pc.min_max(column).as_py()
            lo, hi = bounds["min"], bounds["max"]
            if lo is None:  # all NaN
                continue
            entry["min"] = lo if entry["min"] is None else min(entry["min"], lo)
            entry["max"] = hi if entry["max"] is None else max(entry["max"], hi)

    def result(self) -> dict[str, dict[str, Any]]:
        return {name: dict(entry) for name, entry in self._stats.items()}
