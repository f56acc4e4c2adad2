"""``PaimonTable.changes(start, end)``: the changes of a range of snapshots, checked
against pypaimon's reads of both ends (applying the changes to the state at ``start``
gives the state at ``end``)."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pytest
from paimon_util import FIXTURES, case, expected, rows_by_key
from test_compacted import compact

import raylake
from raylake.errors import InvalidArgumentError, SnapshotExpiredError, SnapshotNotFoundError
from raylake.paimon import UnsupportedPaimonError

# Primary-key tables whose delta files are their changes (deduplicate, no producer).
DELTA_PK = ["pk_deduplicate", "pk_partitioned", "pk_sequence_field"]
APPEND = ["append_bucketed", "append_partitioned", "append_unaware"]


def _table(name: str) -> Any:
    return raylake.open_table(str(FIXTURES / name / "table"))


def _apply(state: pa.Table, changes: pa.Table, key: list[str]) -> list[dict[str, Any]]:
    """``state`` with the change rows applied in order (the last row of a key wins)."""
    rows = {tuple(r[k] for k in key): r for r in state.to_pylist()}
    for row in changes.to_pylist():
        kind = row.pop("_rl_kind")
        if kind in ("+I", "+U"):
            rows[tuple(row[k] for k in key)] = row
        else:
            rows.pop(tuple(row[k] for k in key), None)
    return rows_by_key(pa.Table.from_pylist(list(rows.values()), schema=state.schema), key)


def _before(name: str, start: int, end: int) -> pa.Table:
    """The state at ``start`` (0: the empty table)."""
    return expected(name, start) if start else expected(name, end).schema.empty_table()


def _pairs(name: str) -> list[tuple[str, int, int]]:
    ids = case(name)["snapshots"]
    return [(name, a, b) for b in ids for a in [0, *ids] if a <= b]


@pytest.mark.parametrize(("name", "start", "end"), [p for n in DELTA_PK for p in _pairs(n)])
def test_merged_deltas_take_one_state_to_the_next(name: str, start: int, end: int) -> None:
    key = case(name)["sort"]
    got = _table(name).changes(start, end, include_row_kind=True).to_arrow()
    before = _before(name, start, end)
    assert _apply(before, got, key) == rows_by_key(expected(name, end), key)
    # A key appears once in a range's merged deltas (with sequence.field, whose ends are
    # compared, a changed key also gives its before-image, -U).
    after = [r for r in got.to_pylist() if r["_rl_kind"] != "-U"]
    assert len(after) == len({tuple(r[k] for k in key) for r in after})


@pytest.mark.parametrize(
    ("name", "start", "end"), [(n, a, b) for n, a, b in _pairs("pk_changelog_input") if a < b]
)
def test_changelog_files_in_order_take_one_state_to_the_next(
    name: str, start: int, end: int
) -> None:
    got = _table(name).changes(start, end, include_row_kind=True).to_arrow()
    assert _apply(_before(name, start, end), got, ["id"]) == rows_by_key(
        expected(name, end), ["id"]
    )
    assert got.num_rows == sum(
        _table(name).changelog(s).num_rows for s in range(start + 1, end + 1)
    )


def test_a_changelog_range_keeps_the_recorded_row_kinds() -> None:
    tbl = _table("pk_changelog_input")
    got = tbl.changes(1, 3, include_row_kind=True).to_arrow()
    assert sorted(zip(got["id"].to_pylist(), got["_rl_kind"].to_pylist(), strict=True)) == [
        (0, "-D"),
        (1, "-D"),
        *[(k, "+U") for k in range(4, 10)],
    ]
    # Without the row kind: upserts only.
    upserts = tbl.changes(1, 3).to_arrow()
    assert upserts.column_names == expected("pk_changelog_input", 3).column_names
    assert sorted(upserts["id"].to_pylist()) == list(range(4, 10))


@pytest.mark.parametrize(("name", "start", "end"), [p for n in APPEND for p in _pairs(n)])
def test_an_append_range_is_the_rows_committed_in_it(name: str, start: int, end: int) -> None:
    got = _table(name).changes(start, end).to_arrow()
    after = Counter(tuple(r.items()) for r in expected(name, end).to_pylist())
    if start:
        after -= Counter(tuple(r.items()) for r in expected(name, start).to_pylist())
    assert Counter(tuple(r.items()) for r in got.to_pylist()) == after


def test_compact_snapshots_contribute_nothing(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    sid = compact(table, lambda e: True, newest=True)
    tbl = raylake.open_table(str(table))
    assert tbl.changes(5, sid).to_arrow().num_rows == 0
    whole = tbl.changes(2, sid, include_row_kind=True).to_arrow()
    assert rows_by_key(whole, ["id"]) == rows_by_key(
        tbl.changes(2, 5, include_row_kind=True).to_arrow(), ["id"]
    )


def test_projection_filter_plan_and_splits() -> None:
    tbl = _table("pk_deduplicate")
    changes = tbl.changes(1, columns=["id"], filter="id >= 5", include_row_kind=True)
    assert changes.to_arrow().column_names == ["id", "_rl_kind"]
    splits = changes.plan()
    assert {s.bucket for s in splits} <= set(range(4)) and len(splits) > 1
    assert len({(s.partition, s.bucket) for s in splits}) == len(splits)
    rows = [
        r
        for s in pickle.loads(pickle.dumps(splits))
        for b in changes.read_split(s)
        for r in b.to_pylist()
    ]
    assert sorted(r["id"] for r in rows) == sorted(changes.to_arrow()["id"].to_pylist())
    assert all(r["id"] >= 5 for r in rows)
    assert pa.table(changes).num_rows == len(rows)  # the Arrow stream interface
    # Datetimes: the snapshot current at each time.
    snaps = tbl.snapshots()
    first = datetime.fromtimestamp(snaps[0].time_millis / 1000, timezone.utc)
    last = datetime.fromtimestamp(snaps[-1].time_millis / 1000, timezone.utc)
    assert rows_by_key(tbl.changes(first, last).to_arrow(), ["id"]) == rows_by_key(
        tbl.changes(1, snaps[-1].id).to_arrow(), ["id"]
    )


def test_bad_ranges_and_unreadable_ranges_are_refused() -> None:
    tbl = _table("pk_deduplicate")
    with pytest.raises(InvalidArgumentError, match="start"):
        tbl.changes(4, 2)
    with pytest.raises(InvalidArgumentError, match="end"):
        tbl.changes(1, 0)
    with pytest.raises(InvalidArgumentError, match="include_row_kind"):
        tbl.changes(1, include_row_kind="yes")
    with pytest.raises(SnapshotNotFoundError, match="snapshot 9"):
        tbl.changes(1, 9)
    # Other engines' delta files hold partial rows: they need a changelog producer.
    with pytest.raises(UnsupportedPaimonError, match="of the 'partial-update' merge engine"):
        _table("pk_partial_update").changes(1, 2).to_arrow()
    with pytest.raises(UnsupportedPaimonError, match="of the 'aggregation' merge engine"):
        _table("pk_aggregation").changes(1, 2).to_arrow()
    # (An OVERWRITE in the range gives its net change: test_paimon_overwrite_changes.py.)


def test_a_range_past_the_earliest_snapshot_is_expired(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    for sid in (1, 2):
        (table / "snapshot" / f"snapshot-{sid}").unlink()
    tbl = raylake.open_table(str(table))
    with pytest.raises(SnapshotExpiredError, match="earliest snapshot is 3"):
        tbl.changes(1, 5)
    assert rows_by_key(tbl.changes(2, 5).to_arrow(), ["id"]) == rows_by_key(
        _table("pk_deduplicate").changes(2, 5).to_arrow(), ["id"]
    )


def test_a_range_that_compares_its_expired_start_is_expired(paimon_copy: Any) -> None:
    """A sequence.field table's range compares its start's state, which is gone: it
    raised SnapshotNotFoundError ('does not exist'), not the SnapshotExpiredError of any
    other range past the earliest snapshot."""
    table = paimon_copy("pk_sequence_field")
    for sid in (1, 2):
        (table / "snapshot" / f"snapshot-{sid}").unlink()
    tbl = raylake.open_table(str(table))
    with pytest.raises(SnapshotExpiredError, match=r"snapshot 2 .* earliest snapshot is 3"):
        tbl.changes(2, 5).to_arrow()


def test_a_key_that_moves_partitions_is_deleted_before_it_is_inserted(paimon_copy: Any) -> None:
    """A primary key without the partition key (cross-partition upsert): Paimon moves key
    5 by a -D in its old partition and a +I in the new, in one commit. One split per
    bucket, in partition order, gave the +I (2024-01-01) before the -D (2024-01-02):
    applied in order by key, key 5 was gone."""
    from paimon_spec import commit, data_file, live_entries

    table = paimon_copy("pk_partitioned")
    schema = json.loads((table / "schema" / "schema-0").read_text())
    schema.update(primaryKeys=["id"], options={**schema["options"], "bucket": "-1"})
    (table / "schema" / "schema-0").write_text(json.dumps(schema))
    by_dt = {e["_FILE"]["_FILE_NAME"]: e for e in live_entries(table)}
    paths = {name: str(next(table.rglob(name))) for name in by_dt}

    def moved(kind: int, dt: str) -> dict[str, Any]:
        template = next(e for n, e in by_dt.items() if f"dt={dt}" in paths[n])
        rows = pa.table(
            {
                "_KEY_id": pa.array([5], pa.int64()),
                "_SEQUENCE_NUMBER": pa.array([10_000], pa.int64()),
                "_VALUE_KIND": pa.array([kind], pa.int8()),
                "id": pa.array([5], pa.int64()),
                "name": ["moved"],
                "x": [1.0],
                "dt": [dt],
            }
        )
        return data_file(table, template, rows, level=0)

    sid = commit(table, kind="APPEND", added=[moved(3, "2024-01-02"), moved(0, "2024-01-01")])
    tbl = raylake.open_table(str(table))
    (plan,) = tbl.stream(start=sid, include_row_kind=True).plans(timeout=0)
    for rows in (plan.to_arrow(), tbl.changes(sid - 1, sid, include_row_kind=True).to_arrow()):
        got = [(r["_rl_kind"], r["dt"]) for r in rows.to_pylist()]
        assert got == [("-D", "2024-01-02"), ("+I", "2024-01-01")]
