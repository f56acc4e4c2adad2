"""Spark <-> Ray hand-off: through RayDP's object store, or through a raylake table.

``to_ray(df)`` is RayDP's in-memory hand-off (``from_spark_recoverable`` in RayDP's
fault-tolerant mode, the default of ``raydp.init_spark``): fast, but the data
lives in the Spark executors' object-store blocks and is gone with them.
``to_ray(df, via="table", uri=...)`` writes the DataFrame as one snapshot and
returns ``read_lake(uri, snapshot_id=...)``: pinned (later commits do not change
it), fault tolerant (a failed read task re-reads its files), and alive after
``raydp.stop_spark()``. None of the anchors offers the second.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import DataFrame, SparkSession

from raylake.errors import EnvironmentSetupError, MissingDependencyError, RaylakeError
from raylake.spark.write import SparkWriteMode, write

if TYPE_CHECKING:
    from ray.data import Dataset


def to_ray(
    df: DataFrame,
    *,
    via: Literal["raydp", "table"] = "raydp",
    uri: str | None = None,
    mode: SparkWriteMode = "overwrite",
    storage_options: Mapping[str, Any] | None = None,
    **write_args: Any,
) -> Dataset:
    """A Ray Dataset of ``df``'s rows.

    ``via="raydp"`` (needs a Spark-on-Ray session, ``raylake.spark.session(on_ray=True)``)
    hands the executors' Arrow blocks to Ray. ``via="table"`` writes ``df`` to the
    table at ``uri`` as one snapshot (``mode="overwrite"`` by default, so the dataset
    holds exactly ``df``'s rows; other arguments go to :func:`raylake.spark.write`)
    and reads that snapshot with Ray Data.
    """
    if via == "table":
        if uri is None:
            raise RaylakeError("to_ray(df, via='table') needs uri= (where to write the table)")
        snap = write(df, uri, mode=mode, storage_options=storage_options, **write_args)
        from raylake.datasource import read_lake

        snapshot_id = snap.id if snap is not None else None
        return read_lake(uri, snapshot_id=snapshot_id, storage_options=storage_options)
    if via != "raydp":
        raise RaylakeError(f"to_ray(via={via!r}): use 'raydp' or 'table'")
    ray = _ray()
    from raydp.spark import from_spark_recoverable

    try:
        return from_spark_recoverable(df)
    except Exception as exc:  # RayDP raises a bare Exception outside fault-tolerant mode
        if "fault_tolerant_mode" not in str(exc):
            raise
        return ray.data.from_spark(df)


def from_ray(ds: Dataset, spark: SparkSession) -> DataFrame:
    """A Spark DataFrame of a Ray Dataset's rows (through RayDP; needs a Spark-on-Ray session)."""
    _ray()
    return ds.to_spark(spark)  # type: ignore[attr-defined, no-any-return]


def _ray() -> Any:
    try:
        import ray
        import ray.data
        import raydp  # noqa: F401 - adds Dataset.to_spark and ray.data.from_spark
    except ImportError as exc:
        raise MissingDependencyError("raydp", "spark") from exc
    if not ray.is_initialized():
        raise EnvironmentSetupError(
            "the RayDP hand-off needs a running Ray cluster and a Spark-on-Ray session: "
            "ray.init(), then raylake.spark.session(on_ray=True)"
        )
    return ray
