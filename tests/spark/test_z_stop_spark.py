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


def test_a_session_of_the_same_name_starts_right_after_stop(ray_cluster: Any) -> None:
    """RayDP stops its Spark master actor asynchronously; a session of the same app name
    made at once failed while the old master still held the actor's name (two docs
    blocks that both make app "etl", run one after the other)."""
    for _ in range(2):
        spark = rs.session("again", on_ray=True)
        assert spark.range(3).count() == 3
        rs.stop()
