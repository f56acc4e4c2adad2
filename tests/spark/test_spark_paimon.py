"""raylake.spark.read on a Paimon table: merged rows through raylake's reader in Spark tasks."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark

FIXTURES = Path(__file__).resolve().parent.parent / "paimon" / "fixtures"


def test_spark_reads_a_merged_paimon_table(spark: Any) -> None:
    import raylake.spark

    name = "pk_partitioned"
    frame = raylake.spark.read(spark, str(FIXTURES / name / "table"), filter="x > 1")
    got = sorted((r["id"], r["dt"], r["name"]) for r in frame.collect())
    want = pq.read_table(FIXTURES / name / "expected" / "snapshot-6.parquet").to_pylist()
    assert got == sorted((r["id"], r["dt"], r["name"]) for r in want if r["x"] > 1)


def test_spark_floors_nanoseconds_before_1970(spark: Any) -> None:
    """Spark keeps microseconds: a Java-written TIMESTAMP(9) of 1899 keeps its own
    microsecond (Arrow's cast truncated toward zero, a microsecond later)."""
    import raylake
    import raylake.spark

    uri = str(FIXTURES.parent / "java_fixtures" / "parquet_append_complex_data")
    rows = raylake.spark.read(spark, uri, columns=["f4"]).collect()
    got = sorted((r["f4"] for r in rows if r["f4"] is not None), key=str)
    nanos = raylake.open_table(uri).to_arrow(columns=["f4"]).column("f4").drop_null()
    micros = [n // 1000 for n in nanos.cast(pa.int64()).to_pylist()]
    want = pa.array(micros, pa.int64()).cast(pa.timestamp("us")).to_pylist()
    assert got == sorted(want, key=str)
    assert min(got).microsecond == 1001  # 1899-01-01 00:59:20.001001001


def test_spark_floors_nested_nanoseconds() -> None:
    """Timestamps in structs, lists and maps are floored too: a safe cast of the nested
    column refused their nanoseconds in the Spark task."""
    from raylake.spark.batches import to_spark_batch

    ns = pa.array([-2240521239998998998, 1, None], pa.timestamp("ns"))
    batch = pa.RecordBatch.from_arrays(
        [
            pa.StructArray.from_arrays([ns], names=["t"]),
            pa.ListArray.from_arrays([0, 0, 1, 2, 3], ns).slice(1),
            pa.MapArray.from_arrays([0, 1, 2, 3], pa.array(["a", "b", "c"]), ns),
        ],
        names=["s", "l", "m"],
    )
    us = pa.timestamp("us")
    target = pa.schema(
        [("s", pa.struct([("t", us)])), ("l", pa.list_(us)), ("m", pa.map_(pa.string(), us))]
    )
    out = to_spark_batch(batch.slice(0, 2), target).to_pylist()
    first = [out[0]["s"]["t"], out[0]["l"][0], out[0]["m"][0][1]]
    assert [(t.year, t.second, t.microsecond) for t in first] == [(1899, 20, 1001)] * 3
    assert out[1]["m"] == [("b", dt.datetime(1970, 1, 1))]
