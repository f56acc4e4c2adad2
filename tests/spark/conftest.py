"""One real Spark-on-Ray session (RayDP) for all Spark tests, on the session's Ray cluster."""

from __future__ import annotations

from collections.abc import Iterator
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
