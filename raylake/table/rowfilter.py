"""Filtering rows after the scan: read the filter's columns too, filter, then project.

Used wherever a filter cannot go into the Parquet scan: a NaN-sensitive filter
(pyarrow prunes row groups by NaN-blind statistics), a value filter that must
run after a primary-key merge, a Ray expression raylake cannot convert.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc


def widen(
    columns: Sequence[str] | None, needed: Collection[str], all_columns: Sequence[str]
) -> list[str] | None:
    """``columns`` plus the ``needed`` ones it lacks, in table order (None: every column)."""
    if columns is None:
        return None
    present = set(columns)
    return [*columns, *(c for c in all_columns if c in needed and c not in present)]


def filter_rows(
    batches: Iterable[pa.RecordBatch],
    row_filter: pc.Expression | None,
    columns: Sequence[str] | None,
) -> Iterator[pa.RecordBatch]:
    """Keep the rows that pass ``row_filter``, then only ``columns`` (None: all)."""
    for batch in batches:
        kept = pa.Table.from_batches([batch])
        if row_filter is not None:
            kept = kept.filter(row_filter)
        if columns is not None:
            kept = kept.select(list(columns))
        yield from kept.to_batches()
