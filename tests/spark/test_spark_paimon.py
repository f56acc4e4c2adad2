"""raylake.spark.read on a Paimon table: merged rows through raylake's reader in Spark tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
