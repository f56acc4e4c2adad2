"""Table.merge: SQL MERGE semantics on append and primary-key tables, the files an
append merge rewrites, retries after a concurrent commit, and input refused by name."""

from __future__ import annotations

from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import raylake
from raylake.errors import (
    CommitConflictError,
    FilterError,
    FilterParseError,
    MergeCardinalityError,
    MergeError,
    SchemaMismatchError,
    UnknownColumnError,
    UnsupportedOperationError,
)
from raylake.table import Table
from raylake.table.merge import commit as merge_commit
from raylake.table.merge import execute, primary_key

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("n", pa.int64()),
        ("v", pa.float32()),
        ("dt", pa.string()),
    ]
)


def make(tmp_path: Path, kind: str, **kw: Any) -> Table:
    pk = {"primary_key": ["id"]} if kind == "pk" else {}
    return raylake.create_table(str(tmp_path / kind), SCHEMA, **pk, **kw)


def rows(tbl: Table, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    return tbl.to_arrow(snapshot_id=snapshot_id).sort_by("id").to_pylist()


def data(ids: list[int], n: list[Any], dt: str = "a") -> pa.Table:
    return pa.table(
        {"id": ids, "n": n, "v": [float(i) for i in ids], "dt": [dt] * len(ids)}, schema=SCHEMA
    )


def data_files(tbl: Table) -> set[str]:
    root = Path(tbl.uri.removeprefix("file://"))
    return {str(p.relative_to(root)) for p in (root / "data").rglob("*") if p.is_file()}


@pytest.fixture(params=["append", "pk"])
def kind(request: Any) -> str:
    return str(request.param)


def test_the_clauses_of_the_issue(tmp_path: Path, kind: str) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2, 3, 4], [10, 20, 30, 40]))
    source = pa.table(
        {"id": [2, 3, 5], "n": [1, 2, 3], "v": [0.5, 0.5, 0.5], "deleted": [False, True, False]}
    )
    result = (
        tbl.merge(source, on="id")
        .when_matched_delete(predicate="s.deleted")
        .when_matched_update({"n": "t.n + s.n", "v": "s.v"})
        .when_not_matched_insert()
        .when_not_matched_by_source_update({"n": "t.n * 2"}, predicate="t.id > 3")
        .execute()
    )
    assert (result.inserted, result.updated, result.deleted) == (1, 2, 1)
    assert result.snapshot_id == tbl.latest_snapshot().id == 2
    assert [(r["id"], r["n"], r["v"], r["dt"]) for r in rows(tbl)] == [
        (1, 10, 1.0, "a"),
        (2, 21, 0.5, "a"),
        (4, 80, 4.0, "a"),
        (5, 3, 0.5, None),
    ]
    assert rows(tbl, 1) == data([1, 2, 3, 4], [10, 20, 30, 40]).to_pylist()


def test_first_matching_clause_wins_and_null_predicates_are_false(
    tmp_path: Path, kind: str
) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2, 3, 4], [10, 20, None, 40]))
    source = pa.table({"id": [1, 2, 3, 4], "n": [5, 100, 7, 8]})
    result = (
        tbl.merge(source, on="id")
        .when_matched_update({"n": "s.n"}, predicate="s.n > t.n")  # null t.n: not taken
        .when_matched_delete(predicate="s.n > 7")
        .when_matched_update({"n": "coalesce(t.n, 0) - 1"})
        .execute()
    )
    assert (result.updated, result.deleted) == (3, 1)
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(1, 9), (2, 100), (3, -1)]


def test_a_clause_evaluates_only_the_rows_no_earlier_clause_took(tmp_path: Path, kind: str) -> None:
    # WHEN conditions are tried in order, as a CASE: a later predicate (or value) that
    # divides by zero on a row an earlier clause took failed the whole merge.
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2, 3, 4], [10, 10, 0, 10]))
    source = pa.table({"id": [1, 2, 5, 6], "d": [0, 2, 0, 2]})
    result = (
        tbl.merge(source, on="id")
        .when_matched_delete(predicate="s.d = 0")
        .when_matched_update({"n": "t.n / s.d"}, predicate="t.n / s.d > 1")
        .when_not_matched_insert({"id": "s.id", "n": 0}, predicate="s.d = 0")
        .when_not_matched_insert({"id": "s.id", "n": "10 / s.d"}, predicate="10 / s.d > 1")
        .when_not_matched_by_source_delete(predicate="t.n = 0")
        .when_not_matched_by_source_update({"n": "100 / t.n"}, predicate="100 / t.n > 1")
        .execute()
    )
    assert (result.inserted, result.updated, result.deleted) == (2, 2, 2)
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(2, 5), (4, 10), (5, 0), (6, 5)]
    # A value is computed only for the rows its clause takes.
    result = (
        tbl.merge(pa.table({"id": [2, 4], "d": [0, 5]}), on="id")
        .when_matched_update({"n": "t.n / s.d"}, predicate="s.d != 0")
        .execute()
    )
    assert result.updated == 1
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(2, 5), (4, 2), (5, 0), (6, 5)]


def test_sources_of_every_accepted_kind(tmp_path: Path, kind: str) -> None:
    class Stream:
        def __init__(self, table: pa.Table) -> None:
            self.table = table

        def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
            return self.table.__arrow_c_stream__(requested_schema)

    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [1, 2]))
    sources = [
        pd.DataFrame({"id": [1], "n": [10]}),
        pa.RecordBatchReader.from_batches(
            pa.schema([("id", pa.int64()), ("n", pa.int64())]),
            [pa.record_batch({"id": [2], "n": [20]})],
        ),
        Stream(pa.table({"id": [3], "n": [30]})),
    ]
    for source in sources:
        tbl.merge(source, on="id").when_matched_update().when_not_matched_insert().execute()
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(1, 10), (2, 20), (3, 30)]


def test_on_as_a_condition_with_a_residual(tmp_path: Path, kind: str) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2, 3], [1, 2, 3]))
    source = pa.table({"key": [1, 2, 3], "n": [10, 20, 30]})
    result = (
        tbl.merge(source, on="t.id = s.key and s.n >= 20")
        .when_matched_update({"n": "s.n"})
        .execute()
    )
    assert result.updated == 2
    assert [r["n"] for r in rows(tbl)] == [1, 20, 30]


def test_a_target_row_matched_twice_is_refused_before_anything_is_written(
    tmp_path: Path, kind: str
) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [1, 2]))
    before = data_files(tbl)
    merge = tbl.merge(pa.table({"id": [2, 1, 2], "n": [5, 6, 7]}), on="id")
    with pytest.raises(MergeCardinalityError, match=r"\{'id': 2\} matched 2 source rows"):
        merge.when_matched_update().execute()
    assert data_files(tbl) == before and tbl.latest_snapshot().id == 1
    # Only inserts: duplicate source rows are each inserted (SQL), nothing matched twice.
    tbl2 = make(tmp_path / "2", kind)
    tbl2.merge(pa.table({"id": [7], "n": [1]}), on="id").when_not_matched_insert().execute()
    assert tbl2.count() == 1


def test_an_append_merge_rewrites_only_the_files_holding_changed_rows(tmp_path: Path) -> None:
    tbl = make(tmp_path, "append", partition_by=["dt"])
    for i in range(4):  # four files with disjoint key ranges, two partitions
        tbl.write(data(list(range(i * 10, i * 10 + 10)), [0] * 10, dt="ab"[i % 2]))
    before = data_files(tbl)
    source = pa.table({"id": [21, 25, 100], "n": [1, 2, 3], "dt": ["a", "a", "b"]})
    result = (
        tbl.merge(source, on=["id", "dt"])
        .when_matched_update({"n": "s.n"})
        .when_not_matched_insert()
        .execute()
    )
    assert (result.updated, result.inserted, result.files_rewritten) == (2, 1, 1)
    snap = tbl.latest_snapshot()
    assert snap.commit_kind == "OVERWRITE"
    live = {p for s in tbl.scan().plan() for p in s.paths}
    assert len(before - live) == 1 and len(live - before) == 2  # one rewritten, one insert
    assert tbl.count() == 41 and tbl.count(filter="n > 0") == 3
    # Streams and changes see the rewrite as an overwrite: the old rows out, new ones in.
    changes = tbl.changes(snap.id - 1, include_row_kind=True).to_arrow()
    assert changes.num_rows == 10 + 11


def test_a_primary_key_merge_writes_only_changed_rows(tmp_path: Path) -> None:
    tbl = make(tmp_path, "pk", buckets=4)
    tbl.write(data(list(range(100)), list(range(100))))
    source = pa.table({"id": [5, 6, 500], "n": [0, 0, 0]})
    result = (
        tbl.merge(source, on="id")
        .when_matched_update({"n": "s.n"}, predicate="t.n > 5")
        .when_not_matched_insert()
        .execute()
    )
    assert (result.updated, result.inserted) == (1, 1)
    changes = tbl.changes(1, include_row_kind=True).to_arrow().sort_by("id")
    assert list(zip(changes["id"].to_pylist(), changes["_rl_kind"].to_pylist())) == [
        (6, "-U"),
        (6, "+U"),
        (500, "+I"),
    ]
    written = sum(f.row_count for f in _added_files(tbl))
    assert written == 2


def _added_files(tbl: Table) -> list[Any]:
    from raylake.format.manifest import ADD, data_files_from_table, read_entries

    snap = tbl.latest_snapshot()
    entries = read_entries(tbl.file_io, snap.delta_manifests, tbl.table_schema)
    added = entries.filter(pc.equal(entries["kind"], ADD))
    return data_files_from_table(added, tbl.table_schema)


def _commit_meanwhile(monkeypatch: Any, tbl: Table, times: int, write: Any) -> list[int]:
    """Make another writer commit (for real) after the merge read and wrote, just
    before it commits, on its first ``times`` attempts."""
    real = merge_commit.commit_merge
    calls: list[int] = []

    def commit(*args: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            write(raylake.open_table(tbl.uri))
        return real(*args)

    for module in (execute, primary_key):  # each calls the commit it imported
        monkeypatch.setattr(module, "commit_merge", commit)
    return calls


def test_a_concurrent_change_to_what_the_merge_read_makes_it_retry(
    tmp_path: Path, kind: str, monkeypatch: Any
) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [1, 2]))

    def other(t: Table) -> None:  # changes the row the merge updates
        if t.is_primary_key_table:
            t.write(data([1], [100]))
        else:
            t.write(data([1, 2], [100, 2]), mode="overwrite")

    calls = _commit_meanwhile(monkeypatch, tbl, 1, other)
    result = (
        tbl.merge(pa.table({"id": [1], "n": [1]}), on="id")
        .when_matched_update({"n": "t.n + s.n"})
        .execute()
    )
    assert result.attempts == 2 and len(calls) == 2
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(1, 101), (2, 2)]


def test_a_merge_whose_concurrent_commits_were_expired_retries(
    tmp_path: Path, kind: str, monkeypatch: Any
) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [1, 2]))

    def other(t: Table) -> None:  # two commits after the merge's read, then expiration
        t.write(data([3], [3]))
        t.write(data([4], [4]))
        t.expire_snapshots(retain_last=1)

    _commit_meanwhile(monkeypatch, tbl, 1, other)
    result = (
        tbl.merge(pa.table({"id": [1, 5], "n": [10, 5]}), on="id")
        .when_matched_update({"n": "t.n + s.n"})
        .when_not_matched_insert()
        .execute()
    )
    assert result.attempts == 2
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(1, 11), (2, 2), (3, 3), (4, 4), (5, 5)]


def test_a_merge_whose_files_are_replaced_and_expired_while_it_reads_retries(
    tmp_path: Path, kind: str, monkeypatch: Any
) -> None:
    """Another process overwrites the table twice and expires the first's files while the
    merge reads them (was: a bare FileNotFoundError)."""
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [1, 2]))
    module, name = (primary_key, "_lookup") if kind == "pk" else (execute, "_read_files")
    read = getattr(module, name)
    meanwhile: list[int] = []

    def replaced_then_read(*args: Any) -> Any:
        if not meanwhile:
            other = raylake.open_table(tbl.uri)
            other.write(data([1, 3], [30, 3]), mode="overwrite")
            other.write(data([1, 4], [40, 4]), mode="overwrite")
            meanwhile.append(len(other.expire_snapshots(retain_last=1).deleted_data_files))
        return read(*args)

    monkeypatch.setattr(module, name, replaced_then_read)
    result = (
        tbl.merge(pa.table({"id": [1], "n": [1]}), on="id")
        .when_matched_update({"n": "t.n + s.n"})
        .execute()
    )
    assert meanwhile[0] > 0 and result.attempts == 2
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(1, 41), (4, 4)]


def test_a_merge_by_a_table_opened_before_a_schema_change_keeps_newer_columns(
    tmp_path: Path, kind: str
) -> None:
    stale = make(tmp_path, kind)
    stale.write(data([1, 2], [1, 2]))
    fresh = raylake.open_table(stale.uri)
    with fresh.update_schema() as u:
        u.add_column("z", pa.string())
    fresh.write(pa.table({"id": [3, 4], "n": [3, 4], "z": ["c", "d"]}), schema_mode="merge")
    result = (
        stale.merge(pa.table({"id": [3], "n": [30]}), on="id")
        .when_matched_update({"n": "s.n"})
        .execute()
    )
    assert result.updated == 1
    got = [(r["id"], r["n"], r["z"]) for r in rows(fresh)]
    assert got == [(1, 1, None), (2, 2, None), (3, 30, "c"), (4, 4, "d")]


def test_a_schema_change_between_planning_and_reading_makes_the_merge_retry(
    tmp_path: Path, kind: str, monkeypatch: Any
) -> None:
    """Another process adds a column and writes rows with it after the merge loaded the
    schema and before it read the snapshot (was: those rows rewritten without it)."""
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [1, 2]))
    name = "_merge_primary_key" if kind == "pk" else "_merge_append"
    real = getattr(execute, name)
    meanwhile: list[int] = []

    def changed_then_merge(*args: Any) -> Any:
        if not meanwhile:
            other = raylake.open_table(tbl.uri)
            with other.update_schema() as u:
                u.add_column("z", pa.string())
            new = pa.table({"id": [1, 2], "n": [10, 20], "z": ["a", "b"]})
            meanwhile.append(other.write(new, schema_mode="merge").id)  # type: ignore[union-attr]
        return real(*args)

    monkeypatch.setattr(execute, name, changed_then_merge)
    result = (
        tbl.merge(pa.table({"id": [1], "n": [1]}), on="id")
        .when_matched_update({"n": "t.n + s.n"})
        .execute()
    )
    got = [(r["id"], r["n"], r["z"]) for r in raylake.open_table(tbl.uri).to_arrow().to_pylist()]
    kept = [(1, 2, None), (2, 2, None)] if kind == "append" else []  # appended, not upserted
    assert sorted(got, key=str) == sorted([*kept, (1, 11, "a"), (2, 20, "b")], key=str)
    assert meanwhile and result.attempts == 2


def test_a_concurrent_write_elsewhere_needs_no_retry(
    tmp_path: Path, kind: str, monkeypatch: Any
) -> None:
    tbl = make(tmp_path, kind, buckets=4) if kind == "pk" else make(tmp_path, kind)
    tbl.write(data([1], [1]))

    def other(t: Table) -> None:  # an append of other keys (other buckets for these keys)
        t.write(data([3], [3]))

    _commit_meanwhile(monkeypatch, tbl, 1, other)
    result = tbl.merge(pa.table({"id": [1], "n": [5]}), on="id").when_matched_update().execute()
    from raylake.table.pk.bucket import bucket_ids

    if kind == "pk" and bucket_ids([pa.array([1])], 4)[0] == bucket_ids([pa.array([3])], 4)[0]:
        pytest.skip("keys 1 and 3 share a bucket")
    assert result.attempts == 1
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(1, 5), (3, 3)]


def test_conflicts_past_the_retries_raise_and_leave_no_files(
    tmp_path: Path, kind: str, monkeypatch: Any
) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [1, 2]))
    counter = iter(range(100, 200))

    def other(t: Table) -> None:
        if t.is_primary_key_table:
            t.write(data([1], [next(counter)]))
        else:
            t.write(data([1, 2], [next(counter), 2]), mode="overwrite")

    _commit_meanwhile(monkeypatch, tbl, execute.MAX_ATTEMPTS, other)
    merge = tbl.merge(pa.table({"id": [1, 9], "n": [1, 9]}), on="id")
    merge.when_matched_update().when_not_matched_insert()
    before_other = data_files(tbl)
    with pytest.raises(CommitConflictError, match=r"the merge read|removed by a concurrent"):
        merge.execute()
    others = {p for s in tbl.scan().plan() for p in s.paths}
    leftover = data_files(tbl) - before_other - others
    # What the other writer replaced stays until expiry; nothing the merge wrote is left.
    assert all(p in {q for s in tbl.snapshots() for q in _paths_of(tbl, s)} for p in leftover)
    assert 9 not in tbl.to_arrow().column("id").to_pylist()


def _paths_of(tbl: Table, snap: Any) -> set[str]:
    return {p for s in tbl.scan(snapshot_id=snap.id).plan() for p in s.paths}


def test_schema_mode_merge_adds_the_sources_new_columns(tmp_path: Path, kind: str) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [1, 2]))
    source = pa.table({"id": [2, 3], "n": [20, 30], "label": ["x", "y"]})
    with pytest.raises(UnknownColumnError):
        tbl.merge(source, on="id").when_matched_update({"label": "s.label"}).execute()
    tbl.merge(
        source, on="id", schema_mode="merge"
    ).when_matched_update().when_not_matched_insert().execute()
    assert tbl.schema.names == [*SCHEMA.names, "label"]
    assert [(r["id"], r["n"], r["label"]) for r in rows(tbl)] == [
        (1, 1, None),
        (2, 20, "x"),
        (3, 30, "y"),
    ]


def test_expressions_literals_and_types(tmp_path: Path, kind: str) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2, 3], [10, 20, 30]))
    source = pa.table({"id": [1, 2, 3, 4], "w": [2.5, None, 1.0, 4.0]})
    (
        tbl.merge(source, on="t.id = s.id")
        .when_matched_update({"v": "t.v * coalesce(s.w, 1) + 1", "n": "t.n / 3", "dt": "'z'"})
        .when_not_matched_insert({"id": "s.id", "n": 7, "dt": None}, predicate="s.w in (4.0)")
        .execute()
    )
    got = [(r["id"], r["n"], r["v"], r["dt"]) for r in rows(tbl)]
    assert got == [(1, 3, 3.5, "z"), (2, 6, 3.0, "z"), (3, 10, 4.0, "z"), (4, 7, None, None)]


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        ("t.v + 1", "2.5"),
        ("t.v + s.v", "1.75"),
        ("t.v * 2", "3"),
        ("coalesce(s.v, 0) + t.v", "1.75"),
        ("t.v * s.v", "0.375"),
        ("t.v + s.w", "2.50001"),  # decimal(38, 18) + decimal(10, 5)
    ],
)
def test_arithmetic_on_decimal_38_columns_is_exact(
    tmp_path: Path, kind: str, update: str, expected: str
) -> None:
    # decimal(38, 18), Spark's usual type: every result needs over 38 digits' type (was:
    # FilterError "Decimal precision out of range [1, 38]: 39", 77 for `*`).
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.decimal128(38, 18))])
    pk = {"primary_key": ["id"]} if kind == "pk" else {}
    tbl = raylake.create_table(str(tmp_path / "dec"), schema, **pk)
    tbl.write(pa.table({"id": [1, 2], "v": [Decimal("1.5"), Decimal("1")]}, schema=schema))
    source = pa.table(
        {
            "id": [1, 2],
            "v": pa.array([Decimal("0.25"), Decimal("0.25")], pa.decimal128(38, 18)),
            "w": pa.array([Decimal("1.00001"), Decimal(0)], pa.decimal128(10, 5)),
        }
    )
    # The predicate computes as the value does: it takes id 1 only.
    merge = tbl.merge(source, on="id").when_matched_update({"v": update}, predicate="t.v + 1 > 2")
    assert merge.execute().updated == 1
    assert tbl.to_arrow().sort_by("id")["v"].to_pylist() == [Decimal(expected), Decimal(1)]


def test_a_decimal_result_its_column_cannot_hold_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.decimal128(38, 18))])
    tbl = raylake.create_table(str(tmp_path / "dec"), schema)
    tbl.write(pa.table({"id": [1], "v": [Decimal("1.5")]}, schema=schema))
    source = pa.table({"id": [1]})
    merge = tbl.merge(source, on="id").when_matched_update({"v": "t.v * 100000000000000000000"})
    with pytest.raises(SchemaMismatchError, match=r"'v'.*does not fit in precision 38"):
        merge.execute()  # 1.5e20 needs 21 + 18 digits
    # 1.5 * 1.5 is computed as decimal(19, 18) * decimal(19, 18), by the digits the
    # values use; 1e19 * 1e19 needs decimal(38, 18)'s: a result type of 77 digits.
    tbl.write(pa.table({"id": [2], "v": [Decimal(10**19)]}, schema=schema))
    merge = tbl.merge(pa.table({"id": [1, 2]}), on="id")
    with pytest.raises(FilterError, match=r"t\.v \* t\.v.*more than 76 digits"):
        merge.when_matched_update({"v": "t.v * t.v"}).execute()
    assert tbl.latest_snapshot().id == 2


def test_a_time_of_day_literal_converts_into_a_time_column(tmp_path: Path) -> None:
    # Arrow casts no text to a time: '10:30' (as filters take it) was refused.
    schema = pa.schema([("id", pa.int64()), ("at", pa.time64("ns"))])
    tbl = raylake.create_table(str(tmp_path / "times"), schema)
    tbl.write(pa.table({"id": [1], "at": [time(1)]}, schema=schema))
    (
        tbl.merge(pa.table({"id": [1, 2]}), on="id")
        .when_matched_update({"at": "'10:30:00.000000001'"})
        .when_not_matched_insert({"id": "s.id", "at": "'23:59'"})
        .execute()
    )
    got = tbl.to_arrow().sort_by("id").column("at").cast(pa.int64()).to_pylist()
    assert got == [(10 * 60 + 30) * 60 * 10**9 + 1, (23 * 60 + 59) * 60 * 10**9]
    with pytest.raises(SchemaMismatchError, match="from 00:00:00 to 23:59"):
        tbl.merge(pa.table({"id": [1]}), on="id").when_matched_update({"at": "'25:00'"}).execute()
    assert tbl.latest_snapshot().id == 2


@pytest.mark.parametrize("tz", ["UTC", None])
def test_a_timestamp_literal_value_is_read_as_a_predicate_reads_it(
    tmp_path: Path, tz: str | None
) -> None:
    # Arrow's cast refused '2024-02-01 00:00:00' and '2024-02-01' into a column with a
    # time zone, and '...Z' into one without, where a predicate reads all three.
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz=tz))])
    tbl = raylake.create_table(str(tmp_path / "stamps"), schema)
    tbl.write(pa.table({"id": [1], "at": [datetime(2024, 1, 31, 10)]}, schema=schema))
    day = "'2024-02-01 00:00:00Z'" if tz is None else "'2024-02-01 00:00:00'"
    result = (
        tbl.merge(pa.table({"id": [1, 2, 3]}), on="id")
        .when_matched_update({"at": day}, predicate="t.at = '2024-01-31 10:00:00'")
        .when_not_matched_insert({"id": "s.id", "at": "'2024-02-01'"}, predicate="s.id = 2")
        .when_not_matched_insert({"id": "s.id", "at": "'2024-02-01T09:00:00+09:00'"})
        .execute()
    )
    assert (result.updated, result.inserted) == (1, 2)
    got = tbl.to_arrow().sort_by("id").column("at").cast(pa.int64()).to_pylist()
    midnight = int(datetime(2024, 2, 1, tzinfo=timezone.utc).timestamp()) * 10**6
    assert got == [midnight, midnight, midnight]
    with pytest.raises(SchemaMismatchError, match=r"'at'.*finer than the column"):
        tbl.merge(pa.table({"id": [1]}), on="id").when_matched_update(
            {"at": "'2024-02-01 00:00:00.0000001'"}
        ).execute()
    assert tbl.latest_snapshot().id == 2


def test_numpy_numbers_and_pandas_missing_values_are_literals(tmp_path: Path, kind: str) -> None:
    # What df.n.max() and df.v.unique() hand back: numpy's int64 and bool were refused as
    # not being literals.
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2], [10, 20]))
    source = pa.table({"id": [1, 2, 3], "f": [True, False, True]})
    (
        tbl.merge(source, on="id")
        .when_matched_update({"n": np.int64(5), "v": np.float32(0.5)}, predicate="s.f = true")
        .when_matched_update({"n": pd.NA, "v": np.float64(1.5)})
        .when_not_matched_insert({"id": "s.id", "n": np.uint8(7), "v": np.bool_(True)})
        .execute()
    )
    got = [(r["id"], r["n"], r["v"]) for r in rows(tbl)]
    assert got == [(1, 5, 0.5), (2, None, 1.5), (3, 7, 1.0)]
    with pytest.raises(MergeError, match="quoted literal"):
        tbl.merge(source, on="id").when_matched_update({"dt": date(2024, 1, 31)})


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda m: m, MergeError, "at least one clause"),
        (lambda m: m.when_matched_update({"nope": "s.n"}), UnknownColumnError, "nope"),
        (lambda m: m.when_matched_update({"n": "s.nope"}), UnknownColumnError, "s.nope"),
        (lambda m: m.when_matched_delete(predicate="t.nope > 1"), UnknownColumnError, "t.nope"),
        (lambda m: m.when_matched_update({"n": "s.dt"}), SchemaMismatchError, "'n'"),
        (lambda m: m.when_matched_update({"n": "s.n"}, predicate="s.n"), Exception, "boolean"),
        (lambda m: m.when_matched_update({"dt": "s.n"}), MergeError, "partition column 'dt'"),
    ],
)
def test_bad_clauses_are_refused_before_any_work(
    tmp_path: Path, build: Any, error: type, match: str
) -> None:
    tbl = make(tmp_path, "append", partition_by=["dt"])
    tbl.write(data([1], [1]))
    with pytest.raises(error, match=match):
        build(tbl.merge(pa.table({"id": [1], "n": [2], "dt": ["a"]}), on="id")).execute()
    assert tbl.latest_snapshot().id == 1


def test_bad_on_and_sources_are_refused(tmp_path: Path) -> None:
    tbl = make(tmp_path, "pk")
    tbl.write(data([1], [1]))
    src = pa.table({"id": [1], "n": [2]})
    with pytest.raises(UnknownColumnError, match="key"):
        tbl.merge(src, on="key").when_matched_update().execute()
    with pytest.raises(UnknownColumnError, match=r"s\.nope"):
        tbl.merge(src, on="t.id = s.nope").when_matched_update().execute()
    with pytest.raises(MergeError, match="no equality"):
        tbl.merge(src, on="t.id > s.id").when_matched_update().execute()
    with pytest.raises(SchemaMismatchError, match="'id'"):
        tbl.merge(pa.table({"id": ["x"]}), on="id").when_matched_delete().execute()
    with pytest.raises(MergeError, match="primary-key column 'id'"):
        tbl.merge(src, on="id").when_matched_update({"id": "s.id + 1"}).execute()
    with pytest.raises(FilterParseError, match="needs a qualifier"):
        tbl.merge(src, on="id").when_matched_update({"n": "n + 1"})
    with pytest.raises(FilterParseError, match="only columns of the source"):
        tbl.merge(src, on="id").when_not_matched_insert(predicate="t.n > 1")
    with pytest.raises(FilterParseError, match="unknown function"):
        tbl.merge(src, on="id").when_matched_update({"n": "abs(s.n)"})
    assert tbl.latest_snapshot().id == 1


def test_other_merge_engines_are_refused(tmp_path: Path) -> None:
    tbl = make(tmp_path, "pk", options={"merge-engine": "partial-update"})
    with pytest.raises(UnsupportedOperationError, match="partial-update"):
        tbl.merge(pa.table({"id": [1]}), on="id").when_not_matched_insert().execute()


def test_a_merge_into_an_empty_table_inserts(tmp_path: Path, kind: str) -> None:
    tbl = make(tmp_path, kind)
    result = (
        tbl.merge(data([1, 2], [1, 2]), on="id")
        .when_matched_delete()
        .when_not_matched_insert()
        .execute()
    )
    assert (result.inserted, result.snapshot_id) == (2, 1)
    nothing = tbl.merge(data([9], [9]), on="id").when_matched_delete().execute()
    assert (nothing.deleted, nothing.snapshot_id) == (0, 1)


def test_streams_expiration_and_the_cli_see_a_merge_like_any_commit(
    tmp_path: Path, kind: str
) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2, 3], [1, 2, 3]))
    reader = tbl.stream(start="latest-new", include_row_kind=True)
    merged = (
        tbl.merge(pa.table({"id": [2, 9], "n": [20, 90]}), on="id")
        .when_matched_update()
        .when_not_matched_insert()
        .execute()
    )
    plan = reader.poll()
    assert plan is not None and plan.snapshot_id == merged.snapshot_id
    got = plan.to_arrow()
    if kind == "pk":  # the merge's changes, row by row
        pairs = sorted(zip(got["id"].to_pylist(), got["_rl_kind"].to_pylist()))
        assert pairs == sorted([(2, "-U"), (2, "+U"), (9, "+I")])
    else:  # the rewritten file appears as an overwrite: the table as it now is
        assert plan.commit_kind == "OVERWRITE"
        assert sorted(got["id"].to_pylist()) == [1, 2, 3, 9]
    tbl.expire_snapshots(retain_last=1)
    assert [(r["id"], r["n"]) for r in rows(tbl)] == [(1, 1), (2, 20), (3, 3), (9, 90)]
    from raylake.cli import main

    assert main(["snapshots", tbl.uri]) == 0


def test_float_keys_match_as_sql_equality_does(tmp_path: Path) -> None:
    """-0.0 = 0.0 (the hash join compares bits, so keys are normalised first); NaN
    equals nothing, as in filters, so a NaN source row is inserted, never matched."""
    schema = pa.schema([("k", pa.float64()), ("v", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"k": [0.0, 1.0, float("nan")], "v": [0, 0, 0]}, schema=schema))
    assert tbl.count(filter="k = -0.0") == 1
    source = pa.table({"k": [-0.0, float("nan")], "v": [99, 7]}, schema=schema)
    result = (
        tbl.merge(source, on="t.k = s.k")
        .when_matched_update({"v": "s.v"})
        .when_not_matched_insert()
        .execute()
    )
    assert (result.updated, result.inserted) == (1, 1)
    got = sorted((r["k"], r["v"]) for r in tbl.to_arrow().to_pylist() if r["k"] == r["k"])
    assert got == [(0.0, 99), (1.0, 0)]
    assert tbl.count(filter="k != 0.0 and k != 1.0") == 2  # both NaN rows


@pytest.mark.parametrize(
    ("on", "updated"),
    [("t.id = s.id and t.id = s.n", [2]), ("t.id = s.id and t.n = s.id", [2, 3])],
)
def test_one_column_in_two_key_equalities(
    tmp_path: Path, kind: str, on: str, updated: list[int]
) -> None:
    tbl = make(tmp_path, kind)
    tbl.write(data([1, 2, 3], [1, 2, 3]))
    source = pa.table({"id": [2, 3], "n": [2, 4]})
    result = tbl.merge(source, on=on).when_matched_update({"dt": "'hit'"}).execute()
    assert result.updated == len(updated)
    assert [r["id"] for r in rows(tbl) if r["dt"] == "hit"] == updated


def test_a_primary_key_of_three_columns_merges(tmp_path: Path) -> None:
    # The source's keys were checked for nulls with one and_kleene of every key column,
    # which takes two: a key of three columns failed with Python's bare TypeError.
    fields = [pa.field(c, pa.int64(), nullable=False) for c in "abc"]
    schema = pa.schema([*fields, ("v", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["a", "b", "c"], buckets=2)
    tbl.write(pa.table({"a": [1, 2], "b": [1, 2], "c": [1, 2], "v": [1, 1]}, schema=schema))
    source = pa.table({"a": [1, 3], "b": [1, 3], "c": [1, 3], "v": [10, 30]}, schema=schema)
    merger = tbl.merge(source, on=["a", "b", "c"])
    result = merger.when_matched_update().when_not_matched_insert().execute()
    assert (result.updated, result.inserted) == (1, 1)
    assert tbl.to_arrow().sort_by("a").column("v").to_pylist() == [10, 1, 30]


def test_a_primary_key_with_a_duration_column_merges(tmp_path: Path) -> None:
    # The source's key range prunes the target's files; pyarrow's min_max has no
    # duration kernel, and its bare ArrowNotImplementedError came out of the merge.
    schema = pa.schema([pa.field("d", pa.duration("ms"), nullable=False), ("v", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["d"], buckets=2)
    tbl.write(pa.table({"d": pa.array([1000, 2000], pa.duration("ms")), "v": [1, 1]}))
    source = pa.table({"d": pa.array([2000, 3000], pa.duration("ms")), "v": [20, 30]})
    merger = tbl.merge(source, on="d").when_matched_update().when_not_matched_insert()
    assert (merger.execute().updated, tbl.count()) == (1, 3)
    assert tbl.to_arrow().sort_by("d").column("v").to_pylist() == [1, 20, 30]


def test_a_merge_update_that_lowers_the_sequence_field_is_written_but_not_read(
    tmp_path: Path,
) -> None:
    """As docs/merge.md says: the sequence field decides which version of a key is read,
    for a merge as for any write; the counts say what the merge wrote."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ts", pa.int64())])
    tbl = raylake.create_table(
        str(tmp_path / "t"), schema, primary_key=["id"], options={"sequence.field": "ts"}
    )
    tbl.write(pa.table({"id": [1, 2], "ts": [10, 10]}, schema=schema))
    source = pa.table({"id": [1, 2], "ts": [5, 20]})
    result = tbl.merge(source, on="id").when_matched_update({"ts": "s.ts"}).execute()
    assert result.updated == 2 and result.snapshot_id == 2
    assert tbl.to_arrow().sort_by("id").to_pylist() == [{"id": 1, "ts": 10}, {"id": 2, "ts": 20}]


def test_inserts_sharing_a_primary_key_are_refused(tmp_path: Path) -> None:
    """A primary-key table keeps one row per key: inserting two would lose one."""
    tbl = make(tmp_path, "pk")
    tbl.write(data([1, 2], [0, 0]))
    before = data_files(tbl)
    source = pa.table({"id": [5, 5, 2], "n": [50, 60, 1]})
    merge = tbl.merge(source, on="id").when_matched_update().when_not_matched_insert()
    with pytest.raises(MergeCardinalityError, match=r"2 source rows would insert .*'id': 5"):
        merge.execute()
    assert data_files(tbl) == before and tbl.latest_snapshot().id == 1
    # After the insert clauses' predicates: one of the two is inserted, nothing is lost.
    merge = tbl.merge(source, on="id").when_not_matched_insert(predicate="s.n > 55")
    assert merge.execute().inserted == 1
    assert [(r["id"], r["n"]) for r in rows(tbl)][-1] == (5, 60)
    # The inserted values decide, not the source's keys: two source keys, one new key.
    merge = tbl.merge(pa.table({"id": [7, 8], "n": [1, 1]}), on="id")
    with pytest.raises(MergeCardinalityError, match="'id': 1") as caught:
        merge.when_not_matched_insert({"id": "s.n", "n": "s.id"}).execute()
    assert (caught.value.key, caught.value.count, caught.value.inserted) == ({"id": 1}, 2, True)


def test_an_append_table_inserts_every_unmatched_source_row(tmp_path: Path) -> None:
    tbl = make(tmp_path, "append")
    tbl.write(data([1], [0]))
    result = tbl.merge(pa.table({"id": [5, 5]}), on="id").when_not_matched_insert().execute()
    assert result.inserted == 2 and tbl.count(filter="id = 5") == 2


def test_a_primary_key_table_with_nested_columns_merges_by_key(tmp_path: Path) -> None:
    """The rows looked up are narrowed to the source's keys without joining their nested
    columns (was: Arrow's ArrowInvalid 'not supported in join non-key field')."""
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("n", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("st", pa.struct([("x", pa.int64()), ("y", pa.string())])),
            ("m", pa.map_(pa.string(), pa.int64())),
        ]
    )
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["id"], buckets=2)
    tbl.write(pa.table({"id": [1, 2, 3], "n": [1, 2, 3], "tags": [["a"], None, []],
                        "st": [{"x": 1, "y": "a"}, None, {"x": 3, "y": None}],
                        "m": [[("k", 1)], None, []]}, schema=schema))  # fmt: skip
    source = pa.table({"id": [1, 2, 4], "n": [10, 20, 40], "st": [None, {"y": "b", "x": 2}, None]})
    result = (
        tbl.merge(source, on="id")
        .when_matched_delete(predicate="s.n = 20")
        .when_matched_update({"n": "s.n"})
        .when_not_matched_insert()
        .execute()
    )
    assert (result.updated, result.deleted, result.inserted) == (1, 1, 1)
    assert tbl.to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "n": 10, "tags": ["a"], "st": {"x": 1, "y": "a"}, "m": [("k", 1)]},
        {"id": 3, "n": 3, "tags": [], "st": {"x": 3, "y": None}, "m": []},
        {"id": 4, "n": 40, "tags": None, "st": None, "m": None},
    ]


def test_a_key_of_another_name_and_a_type_that_casts_joins(tmp_path: Path, kind: str) -> None:
    """``t.id = s.key`` with an int32 key, or a large_string one (polars), joins as a key
    of the target's name does (was: refused as another type); into a primary-key table
    it finds the rows in the buckets the target's type hashes to."""
    tbl = make(tmp_path, kind, buckets=4) if kind == "pk" else make(tmp_path, kind)
    tbl.write(data(list(range(1, 9)), [0] * 8))
    source = pa.table(
        {"key": pa.array([2, 5, 7, 11], pa.int32()), "n": [1, 1, 1, 1], "dt": ["b"] * 4}
    )
    result = (
        tbl.merge(source, on="t.id = s.key")
        .when_matched_update({"n": "s.n"})
        .when_not_matched_insert({"id": "s.key", "n": "s.n"})
        .execute()
    )
    assert (result.updated, result.inserted) == (3, 1)
    assert [(r["id"], r["n"]) for r in rows(tbl) if r["n"]] == [(2, 1), (5, 1), (7, 1), (11, 1)]
    assert tbl.count() == 9
    source = pa.table({"name": pa.array(["a"], pa.large_string()), "n": [7]})
    result = tbl.merge(source, on="t.dt = s.name").when_matched_update({"n": "s.n"}).execute()
    assert result.updated == 8 and tbl.count(filter="n = 7") == 8
    with pytest.raises(SchemaMismatchError, match=r"merge key t\.id has type int64"):
        tbl.merge(pa.table({"key": ["2"]}), on="t.id = s.key").when_matched_delete().execute()
