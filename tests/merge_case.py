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


def change_schema_meanwhile(monkeypatch: Any, merger: type, uri: str) -> list[int]:
    """After ``merger``'s first check of a merge, another writer adds column ``z`` and
    writes rows 1 and 2 (n = 10, 20) with it: a concurrent change between the merge's
    planning and its read. Returns the list that holds that write's snapshot id."""
    import raylake

    checked = merger.checked  # type: ignore[attr-defined]
    meanwhile: list[int] = []

    def checked_then_changed(self: Any) -> Any:
        out = checked(self)
        if not meanwhile:
            other = raylake.open_table(uri)
            with other.update_schema() as u:
                u.add_column("z", pa.string())
            rows = pa.table({"id": [1, 2], "n": [10, 20], "z": ["a", "b"]})
            meanwhile.append(other.write(rows, schema_mode="merge").id)
        return out

    monkeypatch.setattr(merger, "checked", checked_then_changed)
    return meanwhile


def rows_after_change(uri: str) -> list[tuple[Any, ...]]:
    """The rows of a table, as (id, n, z), sorted."""
    import raylake

    tbl = raylake.open_table(uri)
    return sorted(((r["id"], r["n"], r["z"]) for r in tbl.to_arrow().to_pylist()), key=str)


def expected_after_change(primary_key: list[str]) -> list[tuple[Any, ...]]:
    """The rows after a merge that added 1 to ``n`` of id 1 while
    :func:`change_schema_meanwhile` ran: the column kept (an append table also keeps the
    first rows, which the other writer appended to, not replaced)."""
    kept = [] if primary_key else [(1, 2, None), (2, 2, None)]
    return sorted([*kept, (1, 11, "a"), (2, 20, "b")], key=str)
