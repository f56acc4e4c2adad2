"""Runs last among the Spark tests (file order): the table hand-off outlives Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import raylake.spark as rs

pytestmark = [pytest.mark.spark, pytest.mark.ray]


def test_table_hand_off_reads_after_stop_spark(spark: Any, warehouse: Path) -> None:
    df = spark.range(0, 500).selectExpr("id", "id * 2 as twice")
    ds = rs.to_ray(df, via="table", uri=str(warehouse / "survivor"))
    rs.stop()  # RayDP's executors and their object-store blocks are gone now
    assert sorted(ds.to_pandas()["id"].tolist()) == list(range(500))
    assert int(ds.sum("twice")) == 2 * sum(range(500))
