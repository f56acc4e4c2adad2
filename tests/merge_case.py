"""The merge case that the Ray and Spark merges are checked on against Table.merge:
a 200-row target, a source of matches, non-matches, deletes and null-guarded inserts."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

SCHEMA = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), ("n", pa.int64()), ("s", pa.string())]
)


def merge_clauses(merger: Any) -> Any:
    """A delete, a conditional update and a conditional insert, in SQL's order."""
    return (
        merger.when_matched_delete(predicate="s.s = 'del'")
        .when_matched_update({"n": "t.n + s.n", "s": "s.s"}, predicate="s.n > 0")
        .when_not_matched_insert(predicate="s.n is not null")
    )


def target_rows() -> pa.Table:
    return pa.table(
        {"k": range(200), "n": [i % 7 for i in range(200)], "s": ["a"] * 200}, schema=SCHEMA
    )


def source_rows() -> list[tuple[int, int, str]]:
    """Every third key up to 300: a third of them match; some delete, some update."""
    return [
        (k, -1 if i % 5 == 0 else i, "del" if i % 4 == 0 else "u")
        for i, k in enumerate(range(0, 300, 3))
    ]


def source_table() -> pa.Table:
    rows = source_rows()
    return pa.table(
        {"k": [r[0] for r in rows], "n": [r[1] for r in rows], "s": [r[2] for r in rows]}
    )
