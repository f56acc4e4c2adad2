"""Spark pipelines: PySpark writes and reads raylake tables; RayDP hands DataFrames to Ray.

    spark = raylake.spark.session(app_name="etl")        # local, or Spark on Ray
    raylake.spark.write(df, uri, mode="upsert", primary_key=["id"], buckets=8)
    raylake.spark.merge(df, uri, on="id").when_matched_update().when_not_matched_insert().execute()
    df = raylake.spark.read(spark, uri, filter="dt = '2024-01-01'")
    ds = raylake.spark.to_ray(df, via="table", uri=staging)  # a new table: pinned, fault tolerant

Needs the ``spark`` extra (``pip install raylake[spark]``) and a Java runtime.
"""

from __future__ import annotations

from raylake.errors import MissingDependencyError

try:
    import pyspark  # noqa: F401
except ImportError as exc:
    raise MissingDependencyError("pyspark", "spark") from exc

from raylake.spark.handoff import from_ray, to_ray
from raylake.spark.merge import merge
from raylake.spark.read import read
from raylake.spark.session import JAVA_OPTIONS, session, stop
from raylake.spark.types import arrow_schema_of, spark_schema_of
from raylake.spark.write import write

__all__ = [
    "JAVA_OPTIONS",
    "arrow_schema_of",
    "from_ray",
    "merge",
    "read",
    "session",
    "spark_schema_of",
    "stop",
    "to_ray",
    "write",
]
