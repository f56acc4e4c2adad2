"""Tables after a compaction (pypaimon cannot compact: built from the spec, paimon_spec.py).

A compaction DELETEs level-0 files and ADDs sorted runs at higher levels; the DELETE
entries must cancel the earlier ADDs, files of several levels must merge, and a
first-row table shows only what compaction has looked up (Paimon skips level 0 in
batch reads of first-row tables).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from paimon_spec import commit, data_file, live_entries
from paimon_util import expected, rows_by_key

import raylake

DELETE_KINDS = (1, 3)


def _rows(table: Path, entry: dict[str, Any]) -> pa.Table:
    return pq.read_table(next(table.rglob(entry["_FILE"]["_FILE_NAME"])))


def _merge(rows: pa.Table, newest: bool) -> pa.Table:
    """Each key's newest (or oldest) version, retracts dropped after choosing (or before,
    for first-row)."""
    if not newest:
        rows = rows.filter(
            pc.invert(pc.is_in(rows.column("_VALUE_KIND"), pa.array(DELETE_KINDS, pa.int8())))
        )
    order = "descending" if newest else "ascending"
    rows = rows.sort_by([("_KEY_id", "ascending"), ("_SEQUENCE_NUMBER", order)])
    keys = rows.column("_KEY_id").to_pylist()
    first = [i for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    picked = rows.take(pa.array(first, pa.int64()))
    live = pc.invert(pc.is_in(picked.column("_VALUE_KIND"), pa.array(DELETE_KINDS, pa.int8())))
    return picked.filter(live)


def compact(
    table: Path, chosen: Callable[[dict[str, Any]], bool], *, newest: bool, level: int = 5
) -> int:
    """One COMPACT snapshot: the chosen live files of each bucket become one file at ``level``."""
    by_bucket: dict[int, list[dict[str, Any]]] = {}
    for entry in live_entries(table):
        if chosen(entry):
            by_bucket.setdefault(entry["_BUCKET"], []).append(entry)
    added, deleted = [], []
    for entries in by_bucket.values():
        merged = _merge(pa.concat_tables([_rows(table, e) for e in entries]), newest)
        if merged.num_rows:
            added.append(data_file(table, entries[0], merged, level=level))
        deleted += entries
    return commit(table, kind="COMPACT", added=added, deleted=deleted)


def test_first_row_shows_what_compaction_looked_up(paimon_copy: Any) -> None:
    table = paimon_copy("pk_first_row")
    tbl = raylake.open_table(str(table))
    assert tbl.to_arrow().num_rows == 0  # as pypaimon: level-0 files are not read
    sid = compact(table, lambda e: True, newest=False)
    got = rows_by_key(tbl.to_arrow(snapshot_id=sid), ["id"])
    assert got == [{"id": k, "name": f"n{k}-v0", "x": k * 0.5, "op": "+I"} for k in range(40)]
    assert tbl.count() == 40  # compacted files only: counted from the manifests


def test_first_row_merges_across_levels(paimon_copy: Any) -> None:
    """A newer version of a key at a lower level than the first one still loses."""
    table = paimon_copy("pk_first_row")
    compact(table, lambda e: True, newest=False, level=5)
    # A level-1 run on top of level 5: a newer version of a key, and a new key.
    tbl = raylake.open_table(str(table))
    before = rows_by_key(tbl.to_arrow(), ["id"])
    template = next(e for e in live_entries(table) if e["_BUCKET"] == 0)
    key = template_key(table, template)
    newer = pa.table(
        {
            "_KEY_id": pa.array([key, 1000], pa.int64()),
            "_SEQUENCE_NUMBER": pa.array([10_000, 10_001], pa.int64()),
            "_VALUE_KIND": pa.array([2, 0], pa.int8()),
            "id": pa.array([key, 1000], pa.int64()),
            "name": ["newer", "new key"],
            "x": [99.0, 1.0],
            "op": ["+U", "+I"],
        }
    )
    commit(table, kind="COMPACT", added=[data_file(table, template, newer, level=1)])
    new_key = {"id": 1000, "name": "new key", "x": 1.0, "op": "+I"}
    assert rows_by_key(tbl.to_arrow(), ["id"]) == [*before, new_key]


def template_key(table: Path, entry: dict[str, Any]) -> int:
    return int(_rows(table, entry).column("_KEY_id")[0].as_py())


def test_a_partial_compaction_merges_levels_and_cancels_deleted_files(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    want = rows_by_key(expected("pk_deduplicate", 5), ["id"])
    oldest = sorted(live_entries(table), key=lambda e: e["_FILE"]["_MAX_SEQUENCE_NUMBER"])
    early = {e["_FILE"]["_FILE_NAME"] for e in oldest if e["_FILE"]["_MAX_SEQUENCE_NUMBER"] < 25}
    sid = compact(table, lambda e: e["_FILE"]["_FILE_NAME"] in early, newest=True)
    tbl = raylake.open_table(str(table))
    assert rows_by_key(tbl.to_arrow(), ["id"]) == want
    files = {f.path.rsplit("/", 1)[-1]: f.level for s in tbl.scan().plan() for f in s.files}
    assert not early & set(files)  # the DELETE entries cancelled the compacted files
    assert {0, 5} <= set(files.values())
    assert rows_by_key(tbl.to_arrow(snapshot_id=sid - 1), ["id"]) == want


def test_a_full_compaction_reads_without_merging(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    compact(table, lambda e: True, newest=True)
    tbl = raylake.open_table(str(table))
    splits = tbl.scan().plan()
    assert all(n == 1 for s in splits for n in s.sections)
    assert rows_by_key(tbl.to_arrow(), ["id"]) == rows_by_key(expected("pk_deduplicate", 5), ["id"])
    assert tbl.count() == 37
