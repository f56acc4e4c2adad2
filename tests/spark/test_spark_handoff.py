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
