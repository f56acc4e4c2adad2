"""One real Spark-on-Ray session (RayDP) for all Spark tests, on the session's Ray cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("raydp")


@pytest.fixture(scope="package")
def spark(ray_cluster: Any) -> Iterator[Any]:
    import raylake.spark

    session = raylake.spark.session("raylake-tests", on_ray=True)
    # Small Arrow batches, so that a task sees several (the retry tests need that).
    session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    yield session
    raylake.spark.stop()


@pytest.fixture
def spark_jobs(spark: Any, request: pytest.FixtureRequest) -> Iterator[Callable[[], list[int]]]:
    """Puts the Spark jobs this test starts in a job group of their own; calling the
    fixture lists them (to check that bad input is refused before any job runs)."""
    context = spark.sparkContext
    group = request.node.name
    context.setJobGroup(group, group)
    yield lambda: list(context.statusTracker().getJobIdsForGroup(group))
    context.setLocalProperty("spark.jobGroup.id", None)
