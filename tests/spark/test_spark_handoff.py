"""RayDP hand-off Spark -> Ray -> Spark, and the table hand-off (pinned, fault tolerant)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
import raylake.spark as rs
from raylake.errors import RaylakeError, TableAlreadyExistsError

pytestmark = [pytest.mark.spark, pytest.mark.ray]

DDL = "id long, name string, score double, day date, at timestamp, amount decimal(10,2)"
ROWS = [
    (i, f"n{i}", i / 4, dt.date(2024, 1, 1 + i % 28),
     dt.datetime(2024, 1, 1, 0, 0, i % 60, tzinfo=dt.timezone.utc), Decimal(i) / 100)
    for i in range(200)
]  # fmt: skip


def test_raydp_round_trip_keeps_rows_and_types(spark: Any) -> None:
    df = spark.createDataFrame(ROWS, DDL)
    ds = rs.to_ray(df)
    assert ds.count() == len(ROWS)
    assert sorted(ds.to_pandas()["id"].tolist()) == list(range(200))
    back = rs.from_ray(ds, spark)
    assert back.schema == df.schema
    assert sorted(back.collect()) == sorted(df.collect())


def test_table_hand_off_is_pinned(spark: Any, warehouse: Path) -> None:
    uri = str(warehouse / "handoff")
    df = spark.createDataFrame(ROWS, DDL)
    ds = rs.to_ray(df, via="table", uri=uri)
    raylake.open_table(uri).write(pa.table({"id": [999]}).append_column(
        "name", pa.array(["late"])).append_column("score", pa.array([0.0])).append_column(
        "day", pa.array([dt.date(2024, 2, 1)])).append_column(
        "at", pa.array([dt.datetime(2024, 2, 1)], pa.timestamp("us", tz="UTC"))).append_column(
        "amount", pa.array([Decimal("1.00")], pa.decimal128(10, 2))))  # fmt: skip
    assert ds.count() == len(ROWS)  # the later commit is not in the pinned dataset
    assert sorted(ds.to_pandas()["id"].tolist()) == list(range(200))


def test_table_hand_off_needs_a_uri(spark: Any) -> None:
    with pytest.raises(RaylakeError, match="uri must be where to write the table"):
        rs.to_ray(spark.range(3), via="table")


def test_table_hand_off_never_replaces_a_table_unasked(
    spark: Any, warehouse: Path, spark_jobs: Any
) -> None:
    """Reading a table and handing off into the same uri once replaced the table with
    the filtered rows (docs/spark.md did that): an existing table is refused before any
    Spark job runs, unless the mode says what to do with it."""
    uri = str(warehouse / "events")
    tbl = raylake.create_table(uri, pa.schema([("id", pa.int64()), ("score", pa.float64())]))
    tbl.write(pa.table({"id": list(range(100)), "score": [i / 10 for i in range(100)]}))
    before = tbl.latest_snapshot()
    df = rs.read(spark, uri, filter="score > 6")
    jobs_before = spark_jobs()
    with pytest.raises(TableAlreadyExistsError, match="mode='overwrite'"):
        rs.to_ray(df, via="table", uri=uri)
    assert spark_jobs() == jobs_before
    assert tbl.latest_snapshot() == before and tbl.count() == 100
    with pytest.raises(RaylakeError, match="mode"):
        rs.to_ray(df, via="table", uri=str(warehouse / "other"), mode="replace")  # type: ignore[arg-type]

    ds = rs.to_ray(df, via="table", uri=uri, mode="overwrite")  # asked for: replaced
    assert sorted(ds.to_pandas()["id"].tolist()) == list(range(61, 100))
    assert spark_jobs() != jobs_before  # the control: this test's jobs are counted
    assert tbl.count() == 39 and tbl.to_arrow(snapshot_id=before.id).num_rows == 100


def test_from_ray_keeps_values_and_types_pandas_cannot_hold(spark: Any) -> None:
    """The blocks reached Spark through pandas: an int64 with a null became float64
    (2**60 + 1 arrived as 2**60), a map failed in the Spark task, a timestamp without a
    zone became Spark's ``timestamp``, and uint8, uint64 or float16 were refused."""
    import ray

    big = 2**60 + 1
    block = pa.table(
        {
            "i": pa.array([big, None], pa.int64()),
            "s": pa.array([{"a": big}, {"a": None}], pa.struct([("a", pa.int64())])),
            "m": pa.array([[("k", big)], None], pa.map_(pa.string(), pa.int64())),
            "ntz": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3, 4), None], pa.timestamp("us")),
            "u8": pa.array([255, None], pa.uint8()),
            "u64": pa.array([2**64 - 1, None], pa.uint64()),
            "f16": pa.array([1.5, None], pa.float16()),
        }
    )
    back = rs.from_ray(ray.data.from_arrow([block, block.slice(1)]), spark)
    assert back.schema.simpleString() == (
        "struct<i:bigint,s:struct<a:bigint>,m:map<string,bigint>,ntz:timestamp_ntz,"
        "u8:smallint,u64:decimal(20,0),f16:float>"
    )
    rows = [r.asDict(recursive=True) for r in back.collect()]
    nulls = dict.fromkeys(block.column_names)
    assert rows == [
        {"i": big, "s": {"a": big}, "m": {"k": big}, "ntz": dt.datetime(2024, 1, 1, 1, 2, 3, 4),
         "u8": 255, "u64": Decimal(2**64 - 1), "f16": 1.5},
        {**nulls, "s": {"a": None}},
        {**nulls, "s": {"a": None}},
    ]  # fmt: skip


def test_from_ray_passes_over_the_empty_blocks_a_filter_leaves(spark: Any) -> None:
    """Dataset.filter leaves empty blocks, some with no columns at all: the Spark task
    selected the schema's columns in each and failed with KeyError."""
    import ray

    ds = ray.data.range(100, override_num_blocks=4).filter(lambda r: r["id"] < 10)
    back = rs.from_ray(ds, spark)
    assert sorted(r.id for r in back.collect()) == list(range(10))


def test_hand_offs_of_no_columns_keep_their_rows(spark: Any, warehouse: Path) -> None:
    """read(columns=[]) counts rows; handed to Ray, RayDP's blocks of no columns lost
    them all (0 rows), and from_ray of read_lake(columns=[]) gave 0 rows, or after the
    Dataset ran, refused Ray's placeholder column of type null."""
    import ray

    uri = str(warehouse / "no_columns")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": range(5)}))
    assert rs.to_ray(rs.read(spark, uri, columns=[])).count() == 5
    assert rs.to_ray(spark.range(7).select()).count() == 7
    ds = raylake.read_lake(uri, columns=[])
    assert rs.from_ray(ds, spark).count() == 5
    assert ds.count() == 5 and rs.from_ray(ds, spark).count() == 5
    assert rs.from_ray(ray.data.range(3).select_columns([]), spark).columns == []


def test_from_ray_takes_pandas_blocks(spark: Any) -> None:
    """ray.data.from_pandas: RayDP refused its blocks with a bare RuntimeError."""
    import pandas as pd
    import ray

    frame = pd.DataFrame({"a": [1, 2], "s": ["x", None]})
    back = rs.from_ray(ray.data.from_pandas(frame), spark)
    rows = sorted((r.asDict() for r in back.collect()), key=lambda r: r["a"])
    assert rows == [{"a": 1, "s": "x"}, {"a": 2, "s": None}]


def test_table_arguments_without_via_table_are_refused(spark: Any, warehouse: Path) -> None:
    """to_ray(df, uri=...) forgot via='table': it handed off through RayDP, ignoring the
    uri (and mode, partition_by, ...), and wrote nothing."""
    df = spark.createDataFrame(ROWS[:3], DDL)
    uri = str(warehouse / "staged")
    for kwargs in ({"uri": uri}, {"mode": "overwrite"}, {"uri": uri, "partition_by": ["day"]}):
        with pytest.raises(RaylakeError, match=r"via must be 'table' with (uri|mode)"):
            rs.to_ray(df, **kwargs)
    assert not (warehouse / "staged").exists()
