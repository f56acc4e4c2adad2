"""Scan planning and reading: streaming, small splits, row-group slicing, pruning, time travel."""

from __future__ import annotations

import itertools
import pickle
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raylake
from raylake import col
from raylake.errors import InvalidArgumentError, SnapshotNotFoundError
from raylake.table import Split, Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("x", pa.float64())])


def rows(start: int, count: int, dt: str = "2024-01-01") -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table({"id": ids, "dt": [dt] * count, "x": ids / 10.0}, schema=SCHEMA)


def files_planned(tbl: Table, **kwargs: object) -> int:
    return sum(len(s.files) for s in tbl.scan(**kwargs).plan())  # type: ignore[arg-type]


@pytest.fixture
def days(tmp_path: Path) -> Table:
    """Three partitions, one commit each, with disjoint id ranges."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"])
    for i, day in enumerate(["2024-01-01", "2024-01-02", "2024-01-03"]):
        tbl.write(rows(i * 1000, 1000, day))
    return tbl


def test_to_batches_streams(days: Table) -> None:
    batches = days.to_batches(filter="x >= 50")
    assert isinstance(batches, Iterator)
    first = next(batches)
    assert isinstance(first, pa.RecordBatch)
    rest = list(batches)
    assert len(rest) >= 1  # one per file at least: never one materialized table
    assert all(b.schema == SCHEMA for b in rest)
    assert first.num_rows + sum(b.num_rows for b in rest) == 2500


def test_to_batches_of_an_empty_table(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    assert list(tbl.to_batches()) == []
    assert tbl.to_arrow().schema == SCHEMA
    assert tbl.count() == 0


def test_projection_and_filter_on_an_unprojected_column(days: Table) -> None:
    out = days.to_arrow(columns=["x", "id"], filter="dt = '2024-01-02' and id < 1003")
    assert out.column_names == ["x", "id"]
    assert out.sort_by("id").to_pydict() == {"x": [100.0, 100.1, 100.2], "id": [1000, 1001, 1002]}
    assert days.to_arrow(columns=[]).num_rows == 3000


def test_count(days: Table) -> None:
    assert days.count() == 3000
    assert days.count(filter="id >= 2500") == 500
    assert days.count(filter=(col("dt") == "2024-01-01") | (col("id") == 2999)) == 1001
    assert days.count(filter="id < 0") == 0


def test_splits_are_small_and_picklable(days: Table) -> None:
    splits = days.scan(columns=["id"], filter="x > 1").plan()
    assert len(splits) == 3
    for split in splits:
        data = pickle.dumps(split)
        assert len(data) < 2048
        clone = pickle.loads(data)
        assert clone == split
        assert pa.Table.from_batches(list(days.read_split(clone))).num_rows == 1000
    assert {s.partition for s in splits} == {("2024-01-01",), ("2024-01-02",), ("2024-01-03",)}
    assert all(s.snapshot_id == 3 and s.row_count == 1000 for s in splits)


def test_read_context_pickles_for_workers(days: Table) -> None:
    scan = days.scan(columns=["id"], filter="id >= 10")
    ctx = pickle.loads(pickle.dumps(scan.read_context()))
    split = scan.plan()[0]
    assert sum(b.num_rows for b in ctx.read(split)) == 990
    assert len(pickle.dumps(scan.read_context())) < 4096


@pytest.fixture
def big_file(tmp_path: Path) -> Table:
    """One file of 20 row groups of 500 rows."""
    tbl = raylake.create_table(
        str(tmp_path / "big"),
        SCHEMA,
        options={"write.row-group-rows": 500, "read.split.target-size": 5 * 500 * 24},
    )
    tbl.write(rows(0, 10_000))
    return tbl


def test_a_large_file_becomes_row_group_splits(big_file: Table) -> None:
    path = Path(big_file.uri) / big_file.scan().plan()[0].files[0].path
    assert pq.ParquetFile(path).num_row_groups == 20
    splits = big_file.scan().plan()
    assert len(splits) > 1
    assert all(len(s.files) == 1 and s.files[0].row_groups is not None for s in splits)
    groups = [g for s in splits for g in s.files[0].row_groups]  # type: ignore[union-attr]
    assert groups == list(range(20))  # every row group exactly once, in order
    assert sum(s.row_count for s in splits) == 10_000
    union = pa.Table.from_batches(
        itertools.chain.from_iterable(big_file.read_split(s) for s in splits), schema=SCHEMA
    )
    assert union.sort_by("id").equals(big_file.to_arrow().sort_by("id"))


def test_projection_makes_fewer_larger_splits(big_file: Table) -> None:
    """Split sizes are estimated from the projected columns' in-memory bytes."""
    all_columns = big_file.scan().plan()
    one_column = big_file.scan(columns=["id"]).plan()
    assert len(one_column) < len(all_columns)


def test_split_size_override(big_file: Table) -> None:
    assert len(big_file.scan().with_split_size(1 << 30).plan()) == 1
    tiny = big_file.scan().with_split_size(1).plan()
    assert len(tiny) == 20
    assert sum(s.row_count for s in tiny) == 10_000


def test_split_union_with_filter_and_projection(big_file: Table) -> None:
    scan = big_file.scan(columns=["x"], filter="id >= 1234 and id < 8765")
    splits = scan.plan()
    union = pa.Table.from_batches(
        [
            b
            for s in splits
            for b in big_file.read_split(s, columns=["x"], filter="id >= 1234 and id < 8765")
        ],
        schema=pa.schema([("x", pa.float64())]),
    )
    assert union.sort_by("x").equals(scan.to_arrow().sort_by("x"))
    assert union.num_rows == 8765 - 1234


@pytest.mark.parametrize(("open_cost", "splits"), [(1, 1), (4 << 20, 8), (2 << 20, 4)])
def test_open_file_cost_packs_small_files(tmp_path: Path, open_cost: int, splits: int) -> None:
    tbl = raylake.create_table(
        str(tmp_path),
        SCHEMA,
        options={"read.split.open-file-cost": open_cost, "read.split.target-size": 4 << 20},
    )
    for i in range(8):
        tbl.write(rows(i * 10, 10))
    planned = tbl.scan().plan()
    assert len(planned) == splits
    assert sum(len(s.files) for s in planned) == 8


def test_partition_pruning(days: Table) -> None:
    assert files_planned(days) == 3
    assert files_planned(days, filter="dt = '2024-01-02'") == 1
    assert files_planned(days, filter="dt in ('2024-01-01', '2024-01-03')") == 2
    assert files_planned(days, filter="dt > '2024-01-05'") == 0
    assert days.count(filter="dt = '2024-01-02'") == 1000


def test_statistics_pruning(days: Table) -> None:
    assert files_planned(days, filter="id >= 2000") == 1
    assert files_planned(days, filter="id < 1000 or id > 2990") == 2
    assert files_planned(days, filter="x = 150.5") == 1
    assert files_planned(days, filter="id is null") == 0
    assert files_planned(days, filter="not (id < 2000)") == 1
    assert days.to_arrow(filter="x = 150.5").column("id").to_pylist() == [1505]


def test_null_partition_values(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA, partition_by=["dt"])
    tbl.write(pa.table({"id": [1, 2, 3], "dt": ["a", None, "__NULL__"], "x": [1.0, 2.0, 3.0]}))
    assert (Path(tbl.uri) / "data" / "dt=__NULL__").is_dir()
    assert files_planned(tbl, filter="dt is null") == 1
    assert tbl.to_arrow(filter="dt is null").column("id").to_pylist() == [2]
    assert tbl.to_arrow(filter="dt = '__NULL__'").column("id").to_pylist() == [3]
    assert sorted(tbl.to_arrow(filter="dt is not null").column("id").to_pylist()) == [1, 3]
    assert {s.partition for s in tbl.scan().plan()} == {("a",), (None,), ("__NULL__",)}


def test_partition_values_that_need_escaping(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA, partition_by=["dt"])
    odd = ["a/b", "c=d", "sp ace", "ü", "..", ""]
    tbl.write(pa.table({"id": range(6), "dt": odd, "x": [0.0] * 6}, schema=SCHEMA))
    for value in odd:
        assert tbl.to_arrow(filter=col("dt") == value).column("dt").to_pylist() == [value]
    data_dir = Path(tbl.uri) / "data"
    files = list(data_dir.rglob("*.parquet"))
    assert len(files) == 6
    assert all(p.parent.parent.parent == data_dir for p in files)  # one directory level each


def test_partition_values_longer_than_a_file_name(tmp_path: Path) -> None:
    """A file system names a directory in at most 255 bytes, and percent-encoding
    triples a non-ASCII value: long values are named by their start and a digest."""
    tbl = raylake.create_table(str(tmp_path), SCHEMA, partition_by=["dt"])
    long = ["x" * 300, "x" * 299 + "y", "é" * 50, "数据" * 50, "a/" * 200]
    tbl.write(pa.table({"id": range(5), "dt": long, "x": [0.0] * 5}, schema=SCHEMA))
    tbl.write(pa.table({"id": [5], "dt": [long[0]], "x": [1.0]}, schema=SCHEMA))
    for i, value in enumerate(long):
        got = tbl.to_arrow(filter=col("dt") == value).column("id").to_pylist()
        assert sorted(got) == ([0, 5] if i == 0 else [i])
    directories = {p.parent.parent for p in (Path(tbl.uri) / "data").rglob("*.parquet")}
    assert len(directories) == 5  # apart, and the same value's files in one place
    assert all(len(d.name.encode()) <= 255 for d in directories)


# -- time travel ---------------------------------------------------------------------------


@pytest.fixture
def history(tmp_path: Path) -> Table:
    tbl = raylake.create_table(str(tmp_path / "h"), SCHEMA, partition_by=["dt"])
    for i in range(3):
        if i:
            time.sleep(0.01)  # distinct commit milliseconds, so each time names one snapshot
        tbl.write(rows(i * 10, 10, f"2024-01-0{i + 1}"))
    return tbl


def test_time_travel_by_id(history: Table) -> None:
    assert [history.count(snapshot_id=i) for i in (1, 2, 3)] == [10, 20, 30]
    old = history.to_arrow(snapshot_id=2, filter="id >= 5", columns=["id"])
    assert sorted(old.column("id").to_pylist()) == list(range(5, 20))


def test_time_travel_by_timestamp(history: Table) -> None:
    snaps = history.snapshots()
    assert [s.time_millis for s in snaps] == sorted(s.time_millis for s in snaps)
    for snap in snaps:
        expected = snap.total_record_count
        assert history.count() >= expected
        assert history.scan(as_of=snap.time_millis).count() == expected
        assert history.scan(as_of=snap.time).count() == expected  # aware datetime
        naive_local = snap.time.astimezone().replace(tzinfo=None)
        assert history.scan(as_of=naive_local).count() == expected
        just_before_next = snap.time + timedelta(microseconds=999)
        assert history.scan(as_of=just_before_next).count() == expected
        # pandas' Timestamp is a datetime: naive is local time here too (it crashed)
        assert history.scan(as_of=pd.Timestamp(naive_local)).count() == expected
        assert history.scan(as_of=pd.Timestamp(snap.time)).count() == expected
    last = pd.Timestamp(snaps[-1].time.astimezone().replace(tzinfo=None))
    expired = history.expire_snapshots(older_than=last, dry_run=True)
    assert expired.expired_snapshot_ids == (1, 2)
    future = datetime.now(timezone.utc) + timedelta(days=1)
    assert history.to_arrow(as_of=future).num_rows == 30


def test_count_travels_in_time_as_scans_do(history: Table) -> None:
    """``count`` takes ``as_of`` (epoch milliseconds or a datetime) as every read does."""
    for snap in history.snapshots():
        expected = snap.total_record_count
        assert history.count(as_of=snap.time_millis) == expected
        assert history.count(as_of=snap.time) == expected
        assert history.count(as_of=snap.time, filter="id >= 5") == expected - 5
    with pytest.raises(SnapshotNotFoundError, match="no snapshot at or before"):
        history.count(as_of=history.snapshot(1).time_millis - 1)
    with pytest.raises(InvalidArgumentError):
        history.count(snapshot_id=1, as_of=history.snapshot(1).time)


def test_time_travel_before_the_first_snapshot(history: Table) -> None:
    first = history.snapshot(1)
    with pytest.raises(SnapshotNotFoundError, match="no snapshot at or before"):
        history.to_arrow(as_of=first.time_millis - 1)
    with pytest.raises(SnapshotNotFoundError):
        history.to_arrow(as_of=datetime(2000, 1, 1, tzinfo=timezone.utc))


def test_a_time_no_datetime_holds_in_utc_is_said_in_epoch_milliseconds(
    history: Table, tmp_path: Path
) -> None:
    """Year 1 east of UTC is year 0 in UTC, and 10**18 ms after year 9999: the message
    that no snapshot is that early was a ValueError, "year 0 is out of range"."""
    year_1_east = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
    with pytest.raises(SnapshotNotFoundError, match=r"or before -62135614800000 ms from the"):
        history.to_arrow(as_of=year_1_east)
    with pytest.raises(SnapshotNotFoundError, match=r"or before -62135614800000 ms from the"):
        history.changes(start=1, end=year_1_east)
    empty = raylake.create_table(str(tmp_path / "empty"), pa.schema([("id", pa.int64())]))
    with pytest.raises(SnapshotNotFoundError, match=r"or before 10{18} ms .*years 1 to 9999"):
        empty.to_arrow(as_of=10**18)


def test_time_travel_survives_overwrites(history: Table) -> None:
    history.write(rows(100, 1, "2024-01-01"), mode="overwrite")
    assert history.count() == 1
    assert history.count(snapshot_id=3) == 30
    assert history.count(snapshot_id=1) == 10


def test_snapshot_metadata(history: Table) -> None:
    snaps = history.snapshots()
    assert [s.id for s in snaps] == [1, 2, 3]
    assert [s.parent_id for s in snaps] == [None, 1, 2]
    assert [s.commit_kind for s in snaps] == ["APPEND"] * 3
    assert [s.total_record_count for s in snaps] == [10, 20, 30]
    assert all(s.delta_record_count == 10 for s in snaps)
    assert history.latest_snapshot() == snaps[-1]
    snap = history.write(rows(50, 2), properties={"job": "nightly"})
    assert history.snapshot(snap.id).properties == {"job": "nightly"}


def test_splits_name_the_snapshot_they_read(history: Table) -> None:
    splits: list[Split] = history.scan(snapshot_id=2).plan()
    assert {s.snapshot_id for s in splits} == {2}
    history.write(rows(500, 5))  # a later commit does not change what an old plan reads
    assert sum(b.num_rows for s in splits for b in history.read_split(s)) == 20


def _pruning_table(tmp_path: Path) -> tuple[Table, list[dict[str, object]]]:
    """Files whose bounds overlap, touch, hold nulls only, or one repeated value."""
    schema = pa.schema([("n", pa.int32()), ("s", pa.string()), ("d", pa.date32())])
    tbl = raylake.create_table(str(tmp_path / "p"), schema)
    day = [datetime(2024, 1, i).date() for i in range(1, 6)]
    files = [
        [(0, "a", day[0]), (3, "c", day[2])],
        [(3, "c", day[2]), (3, "c", day[2])],
        [(None, None, None), (None, None, None)],
        [(1, "b", day[1]), (None, "d", None), (7, "e", day[4])],
        [(7, "e", day[4])],
    ]
    all_rows: list[dict[str, object]] = []
    for values in files:
        rows_ = [dict(zip(schema.names, v)) for v in values]
        tbl.write(pa.Table.from_pylist(rows_, schema=schema))
        all_rows += rows_
    return tbl, all_rows


def test_pruning_is_sound_for_every_single_predicate(tmp_path: Path) -> None:
    """No predicate may prune a file holding a matching row (checked against the oracle)."""
    from raylake.expr import Compare, In, IsNull, Not, NotIn, NotNull, bind, evaluate_python

    tbl, all_rows = _pruning_table(tmp_path)
    literals = {
        "n": [-1, 0, 1, 3, 5, 7, 8],
        "s": ["", "a", "b", "c", "cc", "e", "f"],
        "d": [datetime(2024, 1, i).date() for i in (1, 2, 3, 4, 5, 6)],
    }
    predicates: list[object] = []
    for column, values in literals.items():
        predicates += [IsNull(column), NotNull(column)]
        for value in values:
            predicates += [Compare(op, column, value) for op in ("=", "!=", "<", "<=", ">", ">=")]
            predicates += [In(column, (value,)), NotIn(column, (value,))]
        predicates += [In(column, tuple(values[:3])), NotIn(column, tuple(values[2:5]))]
    total_files = 5
    pruned_somewhere = 0
    for predicate in [*predicates, *(Not(p) for p in predicates)]:
        bound = bind(predicate, tbl.schema)  # type: ignore[arg-type]
        expected = sum(1 for r in all_rows if evaluate_python(bound, r))
        assert tbl.count(filter=predicate) == expected, predicate  # type: ignore[arg-type]
        planned = files_planned(tbl, filter=predicate)
        pruned_somewhere += planned < total_files
    assert pruned_somewhere > len(predicates) // 2  # the statistics do prune


def test_nan_leaves_float_bounds_unknown(tmp_path: Path) -> None:
    """NaN is unordered: a file holding one must not be pruned by its other values' range."""
    from raylake.format.manifest import read_entries

    tbl = raylake.create_table(str(tmp_path), pa.schema([("x", pa.float64())]))
    tbl.write(pa.table({"x": [3.0, float("nan")]}))
    tbl.write(pa.table({"x": [3.0, 4.0]}))
    entries = read_entries(tbl.file_io, tbl.latest_snapshot().base_manifests, tbl.table_schema)  # type: ignore[union-attr]
    key = tbl.table_schema.stats_key("x")  # the field id, in format version 2
    bounds = sorted(
        ((s[key]["min"], s[key]["max"]) for s in entries.column("stats").to_pylist()),
        key=lambda b: b[0] is not None,
    )
    assert bounds == [(None, None), (3.0, 4.0)]
    assert files_planned(tbl, filter="x != 3") == 2
    assert files_planned(tbl, filter="x > 3.5") == 2
    assert tbl.count(filter="x > 3.5") == 1


def test_nan_is_not_equal_to_a_number(tmp_path: Path) -> None:
    # pyarrow prunes Parquet row groups by statistics that ignore NaN; the filter must
    # still keep NaN rows, which Arrow's own comparison (and evaluate_python) select.
    tbl = raylake.create_table(str(tmp_path), pa.schema([("x", pa.float64())]))
    tbl.write(pa.table({"x": [3.0, float("nan")]}))
    assert tbl.count(filter="x != 3") == 1
    assert tbl.count(filter="x not in (3.0, 4.0)") == 1
    assert tbl.count(filter="not (x = 3)") == 1


def test_partitions_of_numbers_read_in_numeric_order(tmp_path: Path) -> None:
    """Hour 9 before hour 10 (once, by their text, 10 came first), null last."""
    schema = pa.schema([("h", pa.int32()), ("i", pa.int64())])
    hours = raylake.create_table(str(tmp_path / "h"), schema, partition_by=["h"])
    hours.write(pa.table({"h": [10, 9, None, -1, 2], "i": range(5)}, schema=schema))
    assert hours.to_arrow().column("h").to_pylist() == [-1, 2, 9, 10, None]


def test_every_read_that_keeps_plan_order_gives_the_write_order(tmp_path: Path) -> None:
    """40 commits of 3 rows: to_arrow, to_pandas and to_batches all give them in order."""
    schema = pa.schema([("i", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    for k in range(40):
        tbl.write(pa.table({"i": range(3 * k, 3 * k + 3)}, schema=schema))
    written = list(range(120))
    assert tbl.to_arrow().column("i").to_pylist() == written
    assert tbl.to_pandas()["i"].tolist() == written
    assert [i for b in tbl.to_batches() for i in b.column("i").to_pylist()] == written
