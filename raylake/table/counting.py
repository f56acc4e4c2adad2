"""Exact row counts of planned splits, in one place (``TableScan.count``, the training
loaders' piece counts, the Ray datasource's task metadata).

A split's count comes from the metadata when the table kind can tell it there
(``TableKind.exact_row_count``: no filter, and no overlapping files to merge);
otherwise from a counting read of that split alone that decodes no output column,
only what the filter and the kind's merge need.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from raylake.errors import RaylakeError
from raylake.expr import AlwaysTrue
from raylake.table.kind import kind_of
from raylake.table.split import Split

if TYPE_CHECKING:
    from raylake.table.scan import ReadContext


def metadata_counts(context: ReadContext, splits: Sequence[Split]) -> list[int | None]:
    """Each split's row count from metadata alone; None where reading decides it."""
    if not isinstance(context.filter, AlwaysTrue):
        return [None] * len(splits)
    kind = kind_of(context.table_schema)
    return [kind.exact_row_count(s) for s in splits]


def metadata_total(context: ReadContext, splits: Sequence[Split]) -> int | None:
    """The splits' rows from metadata alone, or None if any split needs reading."""
    counts = metadata_counts(context, splits)
    return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


def count_rows(context: ReadContext, splits: Sequence[Split]) -> int:
    """The splits' rows after the filter and the merge (the splits that need reading
    share one counting read)."""
    counts = metadata_counts(context, splits)
    rest = [s for s, c in zip(splits, counts) if c is None]
    counted = _counting(context).read_all(rest) if rest else iter(())
    return sum(c or 0 for c in counts) + sum(b.num_rows for b in counted)


def exact_counts(context: ReadContext, splits: Sequence[Split]) -> tuple[int, ...]:
    """Each split's rows after the filter and the merge; the splits that need reading
    are counted on a few threads (pyarrow decodes without the GIL)."""
    counts = metadata_counts(context, splits)
    missing = [i for i, c in enumerate(counts) if c is None]
    if missing:
        counting = _counting(context)

        def count(i: int) -> int:
            return sum(b.num_rows for b in counting.read_all([splits[i]]))

        threads = max(1, min(len(missing), os.cpu_count() or 1))
        with ThreadPoolExecutor(threads, thread_name_prefix="raylake-count") as pool:
            for i, n in zip(missing, pool.map(count, missing)):
                counts[i] = n
    result = tuple(int(c or 0) for c in counts)
    if any(c < 0 for c in result):
        raise RaylakeError(f"negative row count in a plan: {result}")
    return result


def _counting(context: ReadContext) -> ReadContext:
    """The context reading no output column: only the filter's and the merge's."""
    return replace(context, columns=())
