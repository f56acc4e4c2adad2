"""raylake.spark.read equals Table.to_arrow() where Spark's own reader would differ:
old dates and timestamps, projections of no columns, paths with glob characters."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
import raylake.spark as rs

pytestmark = pytest.mark.spark

OLD = pa.table(
    {
        "id": [1, 2],
        "d": [dt.date(1000, 1, 1), dt.date(2024, 1, 1)],
        "t": pa.array([dt.datetime(1800, 1, 1), dt.datetime(2024, 1, 1)], pa.timestamp("us")),
    }
)


@pytest.mark.parametrize("rebase", [None, "LEGACY"])
def test_read_old_dates_and_timestamps_as_written(
    spark: Any, warehouse: Path, rebase: str | None
) -> None:
    """pyarrow writes the proleptic Gregorian calendar; Spark's session default refuses
    such values before 1582 (dates) or 1900 (timestamps), LEGACY shifts them."""
    tbl = raylake.create_table(str(warehouse / "old"), OLD.schema)
    tbl.write(OLD)
    key = "spark.sql.parquet.datetimeRebaseModeInRead"
    if rebase is not None:
        spark.conf.set(key, rebase)
    try:
        rows = rs.read(spark, tbl.uri).orderBy("id").collect()
    finally:
        spark.conf.unset(key)
    assert [r.asDict() for r in rows] == OLD.to_pylist()


@pytest.mark.parametrize("primary_key", [[], ["id"]])
@pytest.mark.parametrize("filter", [None, "k = 1"])
def test_read_of_no_columns_keeps_the_row_count(
    spark: Any, warehouse: Path, primary_key: list[str], filter: str | None
) -> None:
    data = pa.table({"id": list(range(30)), "k": [i % 3 for i in range(30)]})
    tbl = raylake.create_table(str(warehouse / "t"), data.schema, primary_key=primary_key)
    tbl.write(data)
    expected = tbl.to_arrow(columns=[], filter=filter).num_rows
    assert expected in (10, 30)
    df = rs.read(spark, tbl.uri, columns=[], filter=filter)
    assert df.columns == [] and df.count() == expected


@pytest.mark.parametrize("directory", ["runs[2024]", "exp{a}", "what?*"])
def test_read_a_table_under_a_path_with_glob_characters(
    spark: Any, warehouse: Path, directory: str
) -> None:
    tbl = raylake.create_table(
        str(warehouse / directory / "events"), pa.schema([("id", pa.int64())])
    )
    tbl.write(pa.table({"id": [1, 2, 3]}))
    assert sorted(r.id for r in rs.read(spark, tbl.uri).collect()) == [1, 2, 3]
