"""Table.changes: a bounded change read equals the difference of the model's states.

Random sequences of appends, upserts, deletes, compactions and overwrites; for every
pair of snapshots (start, end), the changes equal the diff of the model's states at
start and end (primary-key tables: per key +I/-D/-U+U; append tables: rows added and
rows removed), with and without the row kind, with value and key filters.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.version import Version
from property_depth import examples

import raylake
from raylake.errors import (
    InvalidArgumentError,
    SnapshotExpiredError,
    SnapshotNotFoundError,
    UnknownColumnError,
)
from raylake.table import ChangesScan, Table
from raylake.table import scan as scan_module
from raylake.table.append import AppendKind
from raylake.table.changes import DiffSplit, InsertSplit

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
Row = tuple[int, int]

keys = st.lists(st.integers(0, 12), min_size=1, max_size=5, unique=True)
operation = st.one_of(
    st.tuples(st.just("write"), keys),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("compact"), st.booleans()),
    st.tuples(st.just("overwrite"), keys),
)


def _pk_diff(before: dict[int, int], after: dict[int, int]) -> set[tuple[int, int, str]]:
    rows: set[tuple[int, int, str]] = set()
    for k in before.keys() | after.keys():
        if k not in before:
            rows.add((k, after[k], "+I"))
        elif k not in after:
            rows.add((k, before[k], "-D"))
        elif before[k] != after[k]:
            rows |= {(k, before[k], "-U"), (k, after[k], "+U")}
    return rows


def _append_diff(before: set[Row], after: set[Row]) -> set[tuple[int, int, str]]:
    return {(*r, "+I") for r in after - before} | {(*r, "-D") for r in before - after}


def _changes(tbl: Table, start: Any, end: Any, **kwargs: Any) -> set[tuple[int, int, str]]:
    got = tbl.changes(start, end, include_row_kind=True, **kwargs).to_arrow()
    rows = list(zip(*(got.column(c).to_pylist() for c in ("id", "v", "_rl_kind"))))
    assert len(rows) == len(set(rows)), "a change row appears twice"
    return set(rows)


class _Model:
    """Applies operations to a table and to a model; the model's state per snapshot."""

    def __init__(self, tbl: Table, pk: bool) -> None:
        self.tbl, self.pk = tbl, pk
        self.state: Any = {} if pk else set()
        self.states: dict[int, Any] = {0: self.copy()}
        self.version = 0
        self.next_id = 100

    def copy(self) -> Any:
        return dict(self.state) if self.pk else set(self.state)

    def rows(self, ks: list[int]) -> pa.Table:
        self.version += 1
        if not self.pk:
            ks = list(range(self.next_id, self.next_id + len(ks)))
            self.next_id += len(ks)
        return pa.table({"id": ks, "v": [self.version % 4] * len(ks)}, schema=SCHEMA)

    def apply(self, op: str, arg: Any) -> None:
        if op in ("write", "overwrite"):
            data = self.rows(arg)
            if op == "overwrite":
                self.tbl.write(data, mode="overwrite")
            else:
                self.tbl.write(data)
            new = dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist()))
            if op == "overwrite":
                self.state = {} if self.pk else set()
            if self.pk:
                self.state.update(new)
            else:
                self.state |= set(new.items())
        elif op == "delete" and self.pk:
            self.tbl.delete(pa.table({"id": arg}, schema=pa.schema([SCHEMA.field("id")])))
            for k in arg:
                self.state.pop(k, None)
        elif op == "compact" and self.pk:
            self.tbl.compact(full=arg)
        latest = self.tbl.latest_snapshot()
        for sid in range(max(self.states) + 1, (latest.id if latest else 0) + 1):
            self.states[sid] = self.copy()


def _table(directory: Path, pk: bool, producer: str) -> Table:
    if not pk:
        return raylake.create_table(str(directory / "t"), SCHEMA)
    return raylake.create_table(
        str(directory / "t"), SCHEMA, primary_key=["id"], buckets=2,
        options={"changelog-producer": producer},
    )  # fmt: skip


@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    pk=st.booleans(),
    producer=st.sampled_from(["none", "input", "lookup"]),
    ops=st.lists(operation, min_size=1, max_size=7),
)
def test_changes_equal_the_diff_of_the_model_states(
    pk: bool, producer: str, ops: list[tuple[str, Any]]
) -> None:
    directory = Path(tempfile.mkdtemp())
    try:
        model = _Model(_table(directory, pk, producer), pk)
        for op, arg in ops:
            model.apply(op, arg)
        diff = _pk_diff if pk else _append_diff
        ids = sorted(model.states)
        for start in ids:
            for end in ids[ids.index(start) :]:
                if end == 0:
                    continue
                expected = diff(model.states[start], model.states[end])
                assert _changes(model.tbl, start, end) == expected, (start, end)
                # Value filters apply to the change rows, after the diff.
                flt = {r for r in expected if r[1] >= 2}
                assert _changes(model.tbl, start, end, filter="v >= 2") == flt
                # Key filters may prune, and give the same rows.
                keyed = {r for r in expected if r[0] < 6}
                assert _changes(model.tbl, start, end, filter="id < 6") == keyed
        # Without the row kind: upserts only.
        last = ids[-1]
        upserts = {r[:2] for r in diff(model.states[0], model.states[last]) if r[2] in "+I+U"}
        plain = model.tbl.changes(0, columns=["id", "v"]).to_arrow()
        assert plain.schema.names == ["id", "v"]
        assert set(zip(plain.column("id").to_pylist(), plain.column("v").to_pylist())) == upserts
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# -- a scan like any other ----------------------------------------------------------------


def _pk_table(warehouse: Path, **options: str) -> Table:
    tbl = raylake.create_table(
        str(warehouse / "p"), SCHEMA, primary_key=["id"], buckets=4, options=options
    )
    tbl.write(pa.table({"id": list(range(100)), "v": [0] * 100}, schema=SCHEMA))
    tbl.write(pa.table({"id": [3, 50, 200], "v": [1, 1, 1]}, schema=SCHEMA))
    return tbl


def test_changes_is_a_scan_of_picklable_splits(warehouse: Path) -> None:
    tbl = _pk_table(warehouse)
    scan = tbl.changes(1, include_row_kind=True)
    assert isinstance(scan, ChangesScan)
    splits = scan.plan()
    assert splits and all(isinstance(s, DiffSplit) for s in splits)
    rows = pa.Table.from_batches(
        [b for s in splits for b in scan.read_split(s)], schema=scan.output_schema
    )
    assert rows.sort_by("id").equals(scan.to_arrow().sort_by("id"))
    assert pa.table(scan).num_rows == rows.num_rows == 5  # -U/+U twice, +I once
    assert scan.to_arrow_reader().read_all().num_rows == 5
    assert sum(b.num_rows for b in scan.to_batches()) == 5


def test_a_diff_split_carries_its_files_and_reads_without_planning(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tbl = _pk_table(warehouse)
    scan = tbl.changes(1, include_row_kind=True)
    splits = scan.plan()
    expected = scan.read_context().read_table(splits)

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("a change split planned a snapshot again")

    monkeypatch.setattr(scan_module.TableScan, "plan", boom)
    monkeypatch.setattr(scan_module, "pruned_live_files", boom)
    assert scan.read_context().read_table(splits).equals(expected)


def test_only_changed_buckets_are_read(warehouse: Path) -> None:
    tbl = _pk_table(warehouse)
    touched = {s.bucket for s in tbl.changes(1).plan()}
    assert touched and len(touched) <= 3 < len({s.bucket for s in tbl.scan().plan()}) + 1


def test_lookup_changelog_ranges_read_changelog_files(warehouse: Path) -> None:
    tbl = _pk_table(warehouse, **{"changelog-producer": "lookup"})
    tbl.write(pa.table({"id": [3, 7], "v": [0, 5]}, schema=SCHEMA))  # 3 changes back
    scan = tbl.changes(1, include_row_kind=True)
    assert all(type(s).__name__ == "ChangelogSplit" for s in scan.plan())
    got = scan.to_arrow().sort_by([("id", "ascending"), ("_rl_kind", "ascending")])
    assert got.to_pylist() == [
        {"id": 7, "v": 5, "_rl_kind": "+U"},
        {"id": 7, "v": 0, "_rl_kind": "-U"},
        {"id": 50, "v": 1, "_rl_kind": "+U"},
        {"id": 50, "v": 0, "_rl_kind": "-U"},
        {"id": 200, "v": 1, "_rl_kind": "+I"},
    ]


def test_append_changes_are_the_rows_committed_in_the_range(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "a"), SCHEMA, partition_by=["v"])
    for v in range(3):
        tbl.write(pa.table({"id": [v * 10, v * 10 + 1], "v": [v, v]}, schema=SCHEMA))
    scan = tbl.changes(1, filter="v = 2")
    assert all(isinstance(s, InsertSplit) for s in scan.plan())
    assert len(scan.plan()) == 1  # pruned by partition
    assert scan.to_arrow().sort_by("id").to_pylist() == [{"id": 20, "v": 2}, {"id": 21, "v": 2}]
    assert tbl.changes(3).to_arrow().num_rows == 0


def test_time_ranges(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "p"), SCHEMA, primary_key=["id"], buckets=2)
    for v in range(3):
        if v:
            time.sleep(0.01)  # commits in distinct milliseconds: each time names one snapshot
        tbl.write(pa.table({"id": [v, 10], "v": [v, v]}, schema=SCHEMA))
    snaps = tbl.snapshots()
    by_id = _changes(tbl, 1, 3)
    assert _changes(tbl, snaps[0].time, snaps[2].time) == by_id
    before_all = snaps[0].time - timedelta(days=1)
    assert _changes(tbl, before_all, snaps[2].time) == _changes(tbl, 0, 3)
    assert _changes(tbl, snaps[1].time + timedelta(microseconds=1), None) == _changes(tbl, 2, 3)


# -- bad input -----------------------------------------------------------------------------


def test_bad_input_raises_specific_errors_before_reading(warehouse: Path) -> None:
    tbl = _pk_table(warehouse)
    with pytest.raises(InvalidArgumentError, match="start must be at or before end"):
        tbl.changes(2, 1)
    with pytest.raises(SnapshotNotFoundError, match="snapshot 9 does not exist"):
        tbl.changes(1, 9)
    with pytest.raises(SnapshotNotFoundError, match="snapshot 7 does not exist"):
        tbl.changes(7)
    with pytest.raises(InvalidArgumentError, match="start must be"):
        tbl.changes("1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="start must be"):
        tbl.changes(-1)
    with pytest.raises(InvalidArgumentError, match="end must be"):
        tbl.changes(0, 0)
    with pytest.raises(InvalidArgumentError, match="include_row_kind"):
        tbl.changes(1, include_row_kind="yes")  # type: ignore[arg-type]
    with pytest.raises(UnknownColumnError):
        tbl.changes(1, columns=["nope"])
    with pytest.raises(TypeError):
        tbl.changes(1, 2, ["id"])  # type: ignore[misc]
    with pytest.raises(SnapshotNotFoundError, match="no snapshot at or before"):
        tbl.changes(0, tbl.snapshots()[0].time - timedelta(days=1))


def test_expired_start_raises_snapshot_expired(warehouse: Path) -> None:
    tbl = _pk_table(warehouse)
    tbl.write(pa.table({"id": [1], "v": [9]}, schema=SCHEMA))
    tbl.expire_snapshots(retain_last=1)
    with pytest.raises(SnapshotExpiredError, match=r"snapshot 1 of .* expired: the earliest"):
        tbl.changes(1)
    with pytest.raises(SnapshotExpiredError):
        tbl.changes(tbl.snapshots()[0].time - timedelta(days=1))
    # From the empty table, the changes are the whole current state.
    assert tbl.changes(0).to_arrow().num_rows == tbl.count()


@pytest.mark.parametrize(("later_writes", "retain"), [(0, 1), (2, 2)])
def test_changes_from_the_empty_table_after_an_expired_compaction(
    warehouse: Path, later_writes: int, retain: int
) -> None:
    """An append table whose compacted files expiration deleted (FileNotFoundError of a
    data file), or whose compaction snapshot expired too (SnapshotExpiredError naming
    it): changes(0) put the end's files back as the files the compaction
    replaced, where from the empty table they are the change as they are."""
    tbl = raylake.create_table(str(warehouse / "t"), pa.schema([("id", pa.int64())]))
    for i in range(3):
        tbl.write(pa.table({"id": [i]}))
    tbl.compact(full=True)
    for i in range(later_writes):
        tbl.write(pa.table({"id": [7 + i]}))
    tbl.expire_snapshots(retain_last=retain)
    got = tbl.changes(0).to_arrow().column("id").to_pylist()
    assert sorted(got) == sorted(tbl.to_arrow().column("id").to_pylist())


def test_a_stream_catch_up_is_the_same_change_read(warehouse: Path) -> None:
    tbl = _pk_table(warehouse)
    for v in range(2, 6):
        tbl.write(pa.table({"id": [v, 60 + v], "v": [v, v]}, schema=SCHEMA))
    tbl.delete("id = 3")
    reader = tbl.stream(start=1, include_row_kind=True, catch_up_after=1, prefetch=False)
    reader.poll()  # the full state at snapshot 1
    plan = reader.poll()
    assert plan is not None and plan.kind == "diff" and plan.first_snapshot_id == 2
    changes = tbl.changes(1, include_row_kind=True)
    assert plan.splits == tuple(changes.plan())
    assert plan.to_arrow().sort_by("id").equals(changes.to_arrow().sort_by("id"))
    reader.close()


@pytest.mark.parametrize("producer", ["none", "input", "lookup"])
def test_changes_without_columns_count_their_rows(warehouse: Path, producer: str) -> None:
    """``columns=[]`` asks for the rows only (a count), as ``to_arrow(columns=[])`` does:
    a primary-key table's change rows were dropped with their columns."""
    tbl = _pk_table(warehouse, **{"changelog-producer": producer})
    tbl.write(pa.table({"id": [4, 300], "v": [2, 2]}, schema=SCHEMA))
    for start in (1, 2):
        every = tbl.changes(start).to_arrow().num_rows
        assert every > 0
        assert tbl.changes(start, columns=[]).to_arrow().num_rows == every
        assert sum(b.num_rows for b in tbl.changes(start, columns=[]).to_batches()) == every
    counts = []
    for columns in (None, []):
        stream = tbl.stream(start="earliest", columns=columns, prefetch=False)
        counts.append(sum(plan.to_arrow().num_rows for plan in stream.plans(timeout=0)))
        stream.close()
    assert counts[0] == counts[1] == tbl.count(snapshot_id=1) + tbl.changes(1).to_arrow().num_rows


# -- pruning, shared scans and Arrow streams ---------------------------------------------------


def test_primary_key_changes_are_pruned_by_partition(warehouse: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("day", pa.string()), ("v", pa.int64())])
    tbl = raylake.create_table(
        str(warehouse / "pd"), schema, primary_key=["id", "day"], partition_by=["day"], buckets=2
    )
    days = ["d1", "d2", "d3"]
    tbl.write(pa.table({"id": [1, 2, 3] * 3, "day": [d for d in days for _ in range(3)],
                        "v": [0] * 9}, schema=schema))  # fmt: skip
    tbl.write(pa.table({"id": [1, 2, 3] * 3, "day": [d for d in days for _ in range(3)],
                        "v": [1] * 9}, schema=schema))  # fmt: skip
    everything = tbl.changes(1).plan()
    assert {s.partition for s in everything} == {(d,) for d in days}
    pruned = tbl.changes(1, filter="day = 'd2'", include_row_kind=True)
    assert {s.partition for s in pruned.plan()} == {("d2",)}
    got = pruned.to_arrow().sort_by([("id", "ascending"), ("_rl_kind", "ascending")])
    assert got.column("day").to_pylist() == ["d2"] * 6
    assert got.column("_rl_kind").to_pylist() == ["+U", "-U"] * 3


def test_inserts_of_many_splits_share_one_scan(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole-file inserts (an append table's new files, in a bounded read or a stream
    plan) are read by one pyarrow scan over all their splits, not split by split."""
    tbl = raylake.create_table(str(warehouse / "a"), SCHEMA, partition_by=["v"])
    tbl.write(pa.table({"id": [0], "v": [9]}, schema=SCHEMA))
    tbl.write(pa.table({"id": list(range(30)), "v": [i % 3 for i in range(30)]}, schema=SCHEMA))
    reads: list[int] = []
    original = AppendKind.read_batches

    def counted(self: AppendKind, ctx: Any, splits: Any) -> Any:
        reads.append(len(splits))
        return original(self, ctx, splits)

    monkeypatch.setattr(AppendKind, "read_batches", counted)
    scan = tbl.changes(1)
    splits = scan.plan()
    assert len(splits) == 3  # one per partition
    assert scan.to_arrow().num_rows == 30
    assert reads == [3]
    reads.clear()
    plan = tbl.stream(start=1, prefetch=False)
    plan.poll()  # snapshot 1, whole
    step = plan.poll()
    assert step is not None and len(step.splits) == 3
    assert step.to_arrow().num_rows == 30
    assert reads == [3]
    plan.close()


def test_a_changes_scan_is_an_arrow_stream_for_duckdb_and_polars(warehouse: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    tbl = _pk_table(warehouse)
    changes = tbl.changes(1, include_row_kind=True)
    query = "select _rl_kind, count(*) from changes group by 1 order by 1"
    assert duckdb.sql(query).fetchall() == [("+I", 1), ("+U", 2), ("-U", 2)]
    frame = pl.DataFrame(changes)
    assert frame.columns == ["id", "v", "_rl_kind"]
    assert sorted(frame.filter(pl.col("_rl_kind") == "+U")["id"].to_list()) == [3, 50]
    if Version(pl.__version__) >= Version("2"):
        rows = pl.from_arrow(changes)  # polars 2 makes a stream a Series of struct rows
        assert rows.struct.unnest().sort(["id", "_rl_kind"]).equals(frame.sort(["id", "_rl_kind"]))


@pytest.mark.parametrize("producer", ["lookup", "none"])
def test_a_key_changed_only_in_a_deleted_column_has_no_change(
    warehouse: Path, producer: str
) -> None:
    """The lookup changelog of one snapshot was returned as written: a -U/+U pair whose
    images are equal once w is deleted, where the same range without a changelog (and
    of two snapshots with one) gives nothing, as for an unchanged key."""
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("v", pa.int64()), ("w", pa.int64())]
    )
    tbl = raylake.create_table(
        str(warehouse / producer), schema, primary_key=["k"], buckets=1,
        options={"changelog-producer": producer},
    )  # fmt: skip
    tbl.write(pa.table({"k": [1, 2], "v": [10, 20], "w": [0, 0]}, schema=schema))
    tbl.write(pa.table({"k": [1, 2], "v": [10, 21], "w": [5, 0]}, schema=schema))
    with tbl.update_schema() as u:
        u.delete_column("w")
    assert tbl.changes(1, 2, include_row_kind=True).to_arrow().to_pylist() == [
        {"k": 2, "v": 20, "_rl_kind": "-U"},
        {"k": 2, "v": 21, "_rl_kind": "+U"},
    ]


NESTED = {
    "list": (pa.list_(pa.int64()), [[1, None], None], [[1, 2], []]),
    "struct": (pa.struct([("a", pa.int64())]), [{"a": None}, None], [{"a": 1}, {"a": None}]),
    "map": (pa.map_(pa.string(), pa.int64()), [[("x", 1)], None], [[("x", 2)], []]),
    # NaN != NaN: a NaN written again was reported as a change, alone or in a list.
    "float-nan": (pa.float64(), [math.nan, None], [1.0, 2.0]),
    "list-nan": (pa.list_(pa.float32()), [[math.nan], None], [[1.0], []]),
}


@pytest.mark.parametrize("producer", ["lookup", "none"])
@pytest.mark.parametrize("nested", sorted(NESTED))
def test_nested_values_written_again_as_they_were_are_no_change(
    warehouse: Path, producer: str, nested: str
) -> None:
    """pyarrow has no equal kernel for nested types: every key of a table with such a
    column was reported changed (an unchanged key as -U/+U, a key changed and changed
    back too), in changes(), a lookup changelog and a stream's catch-up."""
    kind, old, new = NESTED[nested]
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("c", kind)])
    tbl = raylake.create_table(
        str(warehouse / f"{producer}-{nested}"), schema, primary_key=["k"], buckets=1,
        options={"changelog-producer": producer},
    )  # fmt: skip
    before = pa.table({"k": [1, 2], "c": pa.array(old, kind)}, schema=schema)
    tbl.write(before)  # 1
    tbl.write(pa.table({"k": [1, 2], "c": pa.array(new, kind)}, schema=schema))  # 2
    tbl.write(before)  # 3: changed back
    tbl.write(before)  # 4: the same again
    assert tbl.changes(1, 3).to_arrow().num_rows == 0
    assert tbl.changes(3, 4).to_arrow().num_rows == 0
    assert tbl.changes(1, 2, include_row_kind=True).to_arrow().num_rows == 4  # -U/+U each
    reader = tbl.stream(start=1, catch_up_after=2)
    assert [(p.kind, p.to_arrow().num_rows) for p in reader.plans(timeout=0)] == [
        ("full", 2),
        ("diff", 0),
    ]
