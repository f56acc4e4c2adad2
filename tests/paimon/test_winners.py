"""A merged section's winners, decided by the merge-on-read kernel and kept per process
under the section's files (a second read of a snapshot does not decide again)."""

from __future__ import annotations

from typing import Any

from paimon_util import FIXTURES, expected, rows_by_key
from test_compacted import compact

import raylake
from raylake.table.pk import kernel

PK = str(FIXTURES / "pk_deduplicate" / "table")


def _cached() -> int:
    return kernel.decision_cache_info()["entries"]


def _merged_sections(tbl: Any, snapshot_id: int | None = None) -> int:
    splits = tbl.scan(snapshot_id=snapshot_id).plan()
    return sum(len(s) > 1 for split in splits for s in split.merge_sections())


def test_a_second_read_reuses_the_decision() -> None:
    kernel.clear_decisions()
    tbl = raylake.open_table(PK)
    sections = _merged_sections(tbl)
    assert sections > 1
    first = tbl.to_arrow()
    assert _cached() == sections
    second = tbl.to_arrow()
    assert _cached() == sections
    assert second.equals(first)
    assert rows_by_key(second, ["id"]) == rows_by_key(expected("pk_deduplicate", 5), ["id"])


def test_a_filtered_read_decides_whole_sections_and_other_files_never_reuse_one(
    paimon_copy: Any,
) -> None:
    kernel.clear_decisions()
    tbl = raylake.open_table(PK)
    got = tbl.to_arrow(filter="id < 12")
    kept = _cached()
    assert kept > 0  # decided on all rows of the files the filter kept: it comes after
    hits = kernel.decision_cache_info()["hits"]
    assert tbl.to_arrow(filter="id < 12").equals(got)
    assert _cached() == kept and kernel.decision_cache_info()["hits"] == hits + kept
    want = [r for r in rows_by_key(expected("pk_deduplicate", 5), ["id"]) if r["id"] < 12]
    assert rows_by_key(got, ["id"]) == want
    # Earlier snapshots and a compacted copy have other files: other decisions.
    for sid in (2, 3, 4):
        assert rows_by_key(tbl.to_arrow(snapshot_id=sid), ["id"]) == rows_by_key(
            expected("pk_deduplicate", sid), ["id"]
        )
    table = paimon_copy("pk_deduplicate")
    copy = raylake.open_table(str(table))
    before = _cached()
    assert rows_by_key(copy.to_arrow(), ["id"]) == rows_by_key(
        expected("pk_deduplicate", 5), ["id"]
    )
    assert _cached() > before  # another table: its own entries
    sid = compact(table, lambda e: e["_FILE"]["_LEVEL"] == 0 and e["_BUCKET"] == 0, newest=True)
    assert rows_by_key(copy.to_arrow(snapshot_id=sid), ["id"]) == rows_by_key(
        expected("pk_deduplicate", 5), ["id"]
    )
