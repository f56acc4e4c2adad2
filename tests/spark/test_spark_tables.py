"""PySpark writes and reads raylake tables; Spark and Python writers agree row for row."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import raylake
import raylake.spark as rs
from raylake.errors import SchemaMismatchError

pytestmark = pytest.mark.spark

ROWS = [(i, f"2024-01-0{1 + i % 3}", float(i) / 2, f"u{i % 7}") for i in range(300)]
DDL = "id long, dt string, v double, user string"


def _df(spark: Any, rows: list[tuple[Any, ...]] = ROWS) -> Any:
    return spark.createDataFrame(rows, DDL)


def _sorted(pa_table: pa.Table, key: str = "id") -> list[dict[str, Any]]:
    return pa_table.sort_by(key).to_pylist()


def _spark_rows(df: Any, key: str = "id") -> list[dict[str, Any]]:
    return sorted((r.asDict(recursive=True) for r in df.collect()), key=lambda r: r[key])


def test_spark_write_then_python_read(spark: Any, warehouse: Path) -> None:
    uri = str(warehouse / "events")
    snap = rs.write(_df(spark), uri, partition_by=["dt"])
    assert snap is not None and snap.commit_kind == "APPEND"
    tbl = raylake.open_table(uri)
    assert tbl.table_schema.partition_keys == ("dt",)
    expected = [dict(zip(["id", "dt", "v", "user"], r)) for r in ROWS]
    assert _sorted(tbl.to_arrow()) == expected
    rs.write(_df(spark, ROWS[:10]), uri)  # append again: a second snapshot
    assert tbl.count() == 310 and tbl.count(snapshot_id=snap.id) == 300
    # Only committed files exist: no leftovers of the job.
    live = {p for s in tbl.scan().plan() for p in s.paths}
    on_disk = {rel for rel, _ in tbl.file_io.list_files("data")}
    assert on_disk == live


def test_python_write_then_spark_read_equals_to_arrow(spark: Any, warehouse: Path) -> None:
    uri = str(warehouse / "py")
    df = pd.DataFrame(ROWS, columns=["id", "dt", "v", "user"])
    tbl = raylake.from_pandas(df.iloc[:200], uri, partition_by=["dt"])
    first = tbl.latest_snapshot()
    assert first is not None
    tbl.write(pa.Table.from_pandas(df.iloc[200:], preserve_index=False))
    cases: list[dict[str, Any]] = [
        {},
        {"columns": ["id", "v"]},
        {"filter": "dt = '2024-01-02' and v > 20"},
        {"columns": ["user"], "filter": "id < 50", "snapshot_id": first.id},
        {"as_of": first.time_millis},
    ]
    for args in cases:
        expected = tbl.to_arrow(**args)
        got = rs.read(spark, uri, **args)
        assert got.columns == expected.column_names, args
        key = "user" if args.get("columns") == ["user"] else "id"
        assert _spark_rows(got, key) == sorted(expected.to_pylist(), key=lambda r: r[key]), args


def test_primary_key_writes_agree_with_python_and_the_model(spark: Any, warehouse: Path) -> None:
    uri = str(warehouse / "users")
    model: dict[int, tuple[str, float]] = {}

    def apply(rows: list[tuple[Any, ...]]) -> None:
        model.update({r[0]: (r[1], r[2]) for r in rows})

    rs.write(_df(spark), uri, primary_key=["id"], buckets=4)
    apply(ROWS)
    tbl = raylake.open_table(uri)
    pandas_rows = [(i, "2024-02-01", -1.0, "p") for i in range(250, 400)]
    tbl.write(pd.DataFrame(pandas_rows, columns=["id", "dt", "v", "user"]))
    apply(pandas_rows)
    spark_rows = [(i, "2024-03-01", 7.0, "s") for i in range(0, 400, 3)]
    rs.write(_df(spark, spark_rows), uri, mode="upsert")
    apply(spark_rows)
    state = {r["id"]: (r["dt"], r["v"]) for r in tbl.to_arrow().to_pylist()}
    assert state == model
    got = {r["id"]: (r["dt"], r["v"]) for r in rs.read(spark, uri).collect()}
    assert got == model
    filtered = rs.read(spark, uri, filter="v > 5", columns=["id"])
    assert sorted(r.id for r in filtered.collect()) == sorted(
        k for k, v in model.items() if v[1] > 5
    )


def test_spark_writes_trigger_compaction_by_the_policy(spark: Any, warehouse: Path) -> None:
    """The driver's commit goes through the table: its compaction policy applies."""
    uri = str(warehouse / "compacted")
    options = {"compaction.max-overlapping-files": 2}
    for version in range(3):
        rows = [(i, "d", float(version), "u") for i in range(40)]
        rs.write(_df(spark, rows), uri, primary_key=["id"], buckets=2, options=options)
    tbl = raylake.open_table(uri)
    assert [s.commit_kind for s in tbl.snapshots()] == ["APPEND", "APPEND", "APPEND", "COMPACT"]
    assert max(n for split in tbl.scan().plan() for n in split.sections) == 1
    assert set(tbl.to_arrow().column("v").to_pylist()) == {2.0}


def test_spark_and_python_route_keys_to_the_same_buckets(spark: Any, warehouse: Path) -> None:
    rows = [(i * 7919 % 1000, "d", float(i), "u") for i in range(500)]
    by_spark = str(warehouse / "by_spark")
    rs.write(_df(spark, rows), by_spark, primary_key=["id", "user"], buckets=5)
    by_python = raylake.create_table(
        str(warehouse / "by_python"),
        raylake.open_table(by_spark).schema,
        primary_key=["id", "user"],
        buckets=5,
    )
    by_python.write(pd.DataFrame(rows, columns=["id", "dt", "v", "user"]))

    def keys_by_bucket(tbl: raylake.Table) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for split in tbl.scan().plan():
            ids = {i for b in tbl.read_split(split, columns=["id"]) for i in b["id"].to_pylist()}
            out.setdefault(split.bucket, set()).update(ids)
        return out

    assert keys_by_bucket(raylake.open_table(by_spark)) == keys_by_bucket(by_python)


def test_overwrite_replaces_the_table(spark: Any, warehouse: Path) -> None:
    uri = str(warehouse / "ow")
    rs.write(_df(spark), uri)
    snap = rs.write(_df(spark, ROWS[:5]), uri, mode="overwrite")
    assert snap is not None and snap.commit_kind == "OVERWRITE"
    assert raylake.open_table(uri).count() == 5


def test_overwrite_follows_the_sessions_partition_overwrite_mode(
    spark: Any, warehouse: Path
) -> None:
    """A session with ``partitionOverwriteMode=dynamic`` keeps the partitions the
    DataFrame has no rows in, as Spark's own writers do; the keyword overrides it."""
    uri = str(warehouse / "dynamic")
    rs.write(_df(spark), uri, partition_by=["dt"])
    day_two = [(1000 + i, "2024-01-02", 0.0, "new") for i in range(4)]
    key = "spark.sql.sources.partitionOverwriteMode"
    spark.conf.set(key, "DYNAMIC")
    try:
        snap = rs.write(_df(spark, day_two), uri, mode="overwrite")
        assert snap is not None and snap.commit_kind == "OVERWRITE"
        counts = raylake.open_table(uri).to_pandas().groupby("dt").size().to_dict()
        assert counts == {"2024-01-01": 100, "2024-01-02": 4, "2024-01-03": 100}
        assert rs.write(_df(spark, []), uri, mode="overwrite") is None  # replaces nothing
        rs.write(_df(spark, day_two[:1]), uri, mode="overwrite", partition_overwrite_mode="static")
        assert raylake.open_table(uri).count() == 1
        rs.write(_df(spark), uri)  # a session setting never turns an append into anything else
        assert raylake.open_table(uri).count() == 301
    finally:
        spark.conf.unset(key)
    rs.write(_df(spark, day_two), uri, mode="overwrite")  # static again: the whole table
    assert raylake.open_table(uri).count() == 4


def test_every_spark_type_round_trips(spark: Any, warehouse: Path) -> None:
    ddl = (
        "b boolean, i8 tinyint, i16 smallint, i32 int, i64 bigint, f32 float, f64 double, "
        "dec decimal(12,3), s string, bin binary, d date, ts timestamp, tsn timestamp_ntz, "
        "arr array<int>, m map<string,bigint>, st struct<x:int,y:string>"
    )
    row = (
        True, 1, 2, 3, 4, 1.5, 2.5, Decimal("123.456"), "text", b"\x00\x01",
        dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
        dt.datetime(2024, 1, 2, 3, 4, 5), [1, None, 3], {"k": 9}, {"x": 1, "y": "z"},
    )  # fmt: skip
    nulls = tuple([None] * len(row))
    df = spark.createDataFrame([row, nulls], ddl)
    uri = str(warehouse / "types")
    rs.write(df, uri)
    tbl = raylake.open_table(uri)
    assert tbl.schema.field("dec").type == pa.decimal128(12, 3)
    assert tbl.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert tbl.schema.field("tsn").type == pa.timestamp("us")
    assert tbl.schema.field("m").type == pa.map_(pa.string(), pa.int64())
    back = rs.read(spark, uri)
    assert back.schema == df.schema
    assert sorted(back.collect(), key=str) == sorted(df.collect(), key=str)


def test_arrow_only_types_are_widened_for_spark(spark: Any, warehouse: Path) -> None:
    data = pa.table(
        {
            "u8": pa.array([1, 255], pa.uint8()),
            "u64": pa.array([1, 2**64 - 1], pa.uint64()),
            "ns": pa.array([1_000, 2_001], pa.timestamp("ns")),
            "emb": pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2)),
        }
    )
    uri = str(warehouse / "arrow_types")
    raylake.create_table(uri, data.schema).write(data)
    got = rs.read(spark, uri).orderBy("u8").collect()
    assert [r.u8 for r in got] == [1, 255]
    assert [int(r.u64) for r in got] == [1, 2**64 - 1]
    assert [r.emb for r in got] == [[1.0, 2.0], [3.0, 4.0]]
    # Spark keeps microseconds: nanoseconds are truncated.
    assert [r.ns.microsecond for r in got] == [1, 2]


@pytest.mark.parametrize("primary_key", [[], ["id"]])
def test_arrow_only_types_read_by_spark_write_and_merge_back(
    spark: Any, warehouse: Path, primary_key: list[str]
) -> None:
    """A DataFrame read from a table goes back into it: uint64 read as decimal(20, 0)
    was refused as another kind by write and merge, and so was a map of uint64."""
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "u64": pa.array([5, 2**64 - 1], pa.uint64()),
            "u8": pa.array([1, 255], pa.uint8()),
            "emb": pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2)),
            "m": pa.array([[("k", 2**64 - 1)], None], pa.map_(pa.string(), pa.uint64())),
        }
    )
    uri = str(warehouse / "arrow_types_back")
    tbl = raylake.create_table(uri, data.schema, primary_key=primary_key)
    tbl.write(data)
    df = rs.read(spark, uri)
    merged = rs.merge(df, uri, on="id").when_matched_update().execute()
    assert merged.updated == 2
    rs.write(df, uri, mode="overwrite")
    assert tbl.to_arrow().sort_by("id").to_pylist() == data.to_pylist()
    negative = spark.createDataFrame([(3, Decimal(-1))], "id long, u64 decimal(20, 0)")
    with pytest.raises(SchemaMismatchError, match="column 'u64'"):
        rs.merge(negative, uri, on="id").when_not_matched_insert().execute()
    assert tbl.to_arrow().sort_by("id").to_pylist() == data.to_pylist()


def test_null_structs_of_non_nullable_fields_are_written(spark: Any, warehouse: Path) -> None:
    """Spark marks named_struct's fields non-nullable and sends a null in them under a
    null struct: the write failed in its tasks with pyarrow's "declared non-nullable"."""
    df = spark.sql(
        "SELECT id, CASE WHEN id = 1 THEN NULL ELSE named_struct('a', id) END AS s, "
        "array(named_struct('a', id), NULL) AS ls FROM range(3)"
    )
    uri = str(warehouse / "null_structs")
    rs.write(df, uri)
    assert _sorted(raylake.open_table(uri).to_arrow()) == [
        {"id": 0, "s": {"a": 0}, "ls": [{"a": 0}, None]},
        {"id": 1, "s": None, "ls": [{"a": 1}, None]},
        {"id": 2, "s": {"a": 2}, "ls": [{"a": 2}, None]},
    ]


def test_nested_lists_empty_in_a_whole_partition_are_written(spark: Any, warehouse: Path) -> None:
    """Spark sends an inner list or map with no value in its batch with an offsets buffer
    of 0 bytes; pyarrow's nbytes read past it, and the Python worker crashed (a segfault)
    where the writer measured the batch, for append and primary-key tables alike."""
    df = spark.sql(
        "SELECT id, CAST(array() AS array<map<string, bigint>>) AS tags, "
        "CAST(NULL AS array<array<array<bigint>>>) AS deep, "
        "CAST(map() AS map<string, array<string>>) AS m FROM range(3)"
    ).coalesce(1)
    expected = [{"id": i, "tags": [], "deep": None, "m": []} for i in range(3)]
    for name, keys in (("empty_append", ()), ("empty_pk", ("id",))):
        uri = str(warehouse / name)
        rs.write(df, uri, primary_key=list(keys))
        assert _sorted(raylake.open_table(uri).to_arrow()) == expected


def test_evolved_tables_read_in_spark_and_merge_spark_columns(
    spark: Any, warehouse: Path, spark_jobs: Any
) -> None:
    """Issue 18: Spark reads old files by field id; schema_mode="merge" adds columns."""
    from raylake.errors import SchemaMismatchError

    uri = str(warehouse / "evolving")
    schema = pa.schema([("id", pa.int64()), ("v", pa.int32()), ("tag", pa.string())])
    tbl = raylake.create_table(uri, schema)
    tbl.write(pa.table({"id": [1, 2], "v": [10, 20], "tag": ["a", "b"]}, schema=schema))
    with tbl.update_schema() as u:
        u.rename_column("v", "v2")
        u.update_column("v2", pa.int64())
        u.delete_column("tag")
    assert _spark_rows(rs.read(spark, uri)) == [{"id": 1, "v2": 10}, {"id": 2, "v2": 20}]
    assert _spark_rows(rs.read(spark, uri, snapshot_id=1))[0] == {"id": 1, "v": 10, "tag": "a"}
    df = spark.createDataFrame([(3, "new")], "id long, note string")
    jobs = spark_jobs()
    with pytest.raises(SchemaMismatchError):
        rs.write(df, uri)
    assert spark_jobs() == jobs  # refused before any Spark job
    rs.write(df, uri, schema_mode="merge")
    assert raylake.open_table(uri).schema.names == ["id", "v2", "note"]
    assert _sorted(raylake.open_table(uri).to_arrow()) == [
        {"id": 1, "v2": 10, "note": None},
        {"id": 2, "v2": 20, "note": None},
        {"id": 3, "v2": None, "note": "new"},
    ]


def test_a_failed_merge_mode_write_adds_no_column(spark: Any, warehouse: Path) -> None:
    """The new columns were added before the Spark job, and stayed when its tasks failed
    (here on a null in a column that may not hold one)."""
    uri = str(warehouse / "strict")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    raylake.create_table(uri, schema)
    df = spark.createDataFrame([(None, "x")], "id long, note string")
    with pytest.raises(Exception, match="id"):
        rs.write(df, uri, schema_mode="merge")
    assert raylake.open_table(uri).schema.names == ["id"]
