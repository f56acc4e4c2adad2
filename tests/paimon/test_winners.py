"""A merged section's winners: taken in file order, and the decision kept per process
under the section's files (a second read of a snapshot does not sort its keys again)."""

from __future__ import annotations

from typing import Any

from paimon_util import FIXTURES, expected, rows_by_key
from test_compacted import compact

import raylake
from raylake.paimon import winners

PK = str(FIXTURES / "pk_deduplicate" / "table")


def _merged_sections(tbl: Any, snapshot_id: int | None = None) -> int:
    splits = tbl.scan(snapshot_id=snapshot_id).plan()
    return sum(len(s) > 1 for split in splits for s in split.merge_sections())


def test_a_second_read_reuses_the_decision() -> None:
    winners.clear_cache()
    tbl = raylake.open_table(PK)
    sections = _merged_sections(tbl)
    assert sections > 1
    first = tbl.to_arrow()
    assert winners.cached_sections() == sections
    second = tbl.to_arrow()
    assert winners.cached_sections() == sections
    assert second.equals(first)
    assert rows_by_key(second, ["id"]) == rows_by_key(expected("pk_deduplicate", 5), ["id"])


def test_a_key_filter_or_other_files_never_reuse_a_decision(paimon_copy: Any) -> None:
    winners.clear_cache()
    tbl = raylake.open_table(PK)
    got = tbl.to_arrow(filter="id < 12")
    assert winners.cached_sections() == 0  # a key-filtered section is not its files' rows
    want = [r for r in rows_by_key(expected("pk_deduplicate", 5), ["id"]) if r["id"] < 12]
    assert rows_by_key(got, ["id"]) == want
    # Earlier snapshots and a compacted copy have other files: other decisions.
    for sid in (2, 3, 4):
        assert rows_by_key(tbl.to_arrow(snapshot_id=sid), ["id"]) == rows_by_key(
            expected("pk_deduplicate", sid), ["id"]
        )
    table = paimon_copy("pk_deduplicate")
    copy = raylake.open_table(str(table))
    before = winners.cached_sections()
    assert rows_by_key(copy.to_arrow(), ["id"]) == rows_by_key(
        expected("pk_deduplicate", 5), ["id"]
    )
    assert winners.cached_sections() > before  # another table: its own entries
    sid = compact(table, lambda e: e["_FILE"]["_LEVEL"] == 0 and e["_BUCKET"] == 0, newest=True)
    assert rows_by_key(copy.to_arrow(snapshot_id=sid), ["id"]) == rows_by_key(
        expected("pk_deduplicate", 5), ["id"]
    )
