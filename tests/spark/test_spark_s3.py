"""Spark executors (RayDP: Spark on the session's Ray cluster) write and read a table on
the S3 server with credentials given only in storage_options on the driver."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("moto")

import raylake
import raylake.spark
from raylake.testing.s3server import LocalS3Server

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def s3() -> Iterator[LocalS3Server]:
    with LocalS3Server() as server:
        yield server


def test_spark_write_and_read_on_s3(spark: Any, s3: LocalS3Server) -> None:
    if any(k.startswith("AWS_ACCESS") or k.startswith("AWS_SECRET") for k in os.environ):
        pytest.skip("AWS credentials in the environment would hide the test")  # pragma: no cover
    options = s3.storage_options
    uri = f"s3://{s3.create_bucket()}/spark"
    df = spark.createDataFrame([(i, i * 0.5) for i in range(100)], "id long, x double")
    snap = raylake.spark.write(
        df.repartition(3), uri, primary_key=["id"], buckets=2, storage_options=options
    )
    assert snap is not None
    out = raylake.spark.read(spark, uri, filter="id < 40", storage_options=options)
    assert sorted(r.id for r in out.collect()) == list(range(40))
