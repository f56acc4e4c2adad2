"""Spark <-> Ray hand-off: through RayDP's object store, or through a raylake table.

``to_ray(df)`` is RayDP's in-memory hand-off (``from_spark_recoverable`` in RayDP's
fault-tolerant mode, the default of ``raydp.init_spark``): fast, but the data
lives in the Spark executors' object-store blocks and is gone with them.
``to_ray(df, via="table", uri=...)`` writes the DataFrame as one snapshot and
returns ``read_lake(uri, snapshot_id=...)``: pinned (later commits do not change
it), fault tolerant (a failed read task re-reads its files), and alive after
``raydp.stop_spark()``. None of the anchors offers the second.

The table is a staging path: like Spark's ``DataFrameWriter`` (``mode="error"``, the
default), it refuses a table that exists, before any Spark job runs. Writing into one
takes ``mode="overwrite"``/``"append"``/``"upsert"``, said explicitly (issue 15: a
doc that handed off into the table it had read replaced that table).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import DataFrame, SparkSession

from raylake.arguments import check_choice
from raylake.errors import (
    EnvironmentSetupError,
    InvalidArgumentError,
    InvalidOptionError,
    MissingDependencyError,
    TableAlreadyExistsError,
)
from raylake.spark.session import check_dataframe, check_session
from raylake.spark.write import SparkWriteMode, write
from raylake.table import table_exists

if TYPE_CHECKING:
    from ray.data import Dataset


HandoffMode = Literal["error", "overwrite", "append", "upsert"]
_HANDOFF_MODES = ("error", "overwrite", "append", "upsert")


def to_ray(
    df: DataFrame,
    *,
    via: Literal["raydp", "table"] = "raydp",
    uri: str | None = None,
    mode: HandoffMode = "error",
    storage_options: Mapping[str, Any] | None = None,
    **write_args: Any,
) -> Dataset:
    """A Ray Dataset of ``df``'s rows.

    ``via="raydp"`` (needs a Spark-on-Ray session, ``raylake.spark.session(on_ray=True)``)
    hands the executors' Arrow blocks to Ray. ``via="table"`` writes ``df`` to a new
    table at ``uri`` as one snapshot and reads that snapshot with Ray Data; other
    arguments go to :func:`raylake.spark.write`. ``mode="error"`` (the default) raises
    :class:`TableAlreadyExistsError` if a table exists at ``uri``, before any Spark job
    runs; ``"overwrite"`` replaces its rows with ``df``'s, ``"append"``/``"upsert"``
    add them (the dataset is then the table's new state).
    """
    check_dataframe(df)
    if via == "table":
        if uri is None:
            raise InvalidArgumentError("uri", uri, "where to write the table, with via='table'")
        if mode not in _HANDOFF_MODES:
            raise InvalidOptionError("mode", mode, f"expected one of {list(_HANDOFF_MODES)}")
        if mode == "error" and table_exists(uri, storage_options=storage_options):
            raise TableAlreadyExistsError(
                uri,
                "to_ray(df, via='table') writes to a new table: pass another uri, or "
                "mode='overwrite' to replace this table's rows with the DataFrame's "
                "(mode='append'/'upsert' to add them)",
            )
        write_mode: SparkWriteMode | None = None if mode == "error" else mode
        snap = write(df, uri, mode=write_mode, storage_options=storage_options, **write_args)
        from raylake.datasource import read_lake

        snapshot_id = snap.id if snap is not None else None
        return read_lake(uri, snapshot_id=snapshot_id, storage_options=storage_options)
    check_choice("via", via, ("raydp", "table"))
    _refuse_table_arguments(uri, mode, storage_options, write_args)
    ray = _ray(df.sparkSession)
    if not df.columns:  # RayDP's Arrow blocks of no columns lose their rows
        return ray.data.range(df.count()).select_columns([])
    from raydp.spark import from_spark_recoverable

    try:
        return from_spark_recoverable(df)
    except Exception as exc:  # RayDP raises a bare Exception outside fault-tolerant mode
        if "fault_tolerant_mode" not in str(exc):
            raise
        return ray.data.from_spark(df)


def _refuse_table_arguments(
    uri: str | None, mode: str, storage_options: Any, write_args: Mapping[str, Any]
) -> None:
    """The RayDP hand-off writes no table: an argument of the table hand-off given without
    ``via="table"`` (``to_ray(df, uri=...)``) was ignored, and nothing was written."""
    given = [name for name, value in (("uri", uri), ("storage_options", storage_options)) if value]
    given += [*(["mode"] if mode != "error" else []), *write_args]
    if given:
        raise InvalidArgumentError(
            "via", "raydp", f"'table' with {', '.join(given)} (the RayDP hand-off writes no table)"
        )


def from_ray(ds: Dataset, spark: SparkSession) -> DataFrame:
    """A Spark DataFrame of a Ray Dataset's rows (through RayDP; needs a Spark-on-Ray session)."""
    check_session(spark)
    ray = _ray(spark)
    if not isinstance(ds, ray.data.Dataset):
        raise InvalidArgumentError("ds", ds, "a ray.data.Dataset")
    from raylake.spark.ray_blocks import blocks_to_spark

    return blocks_to_spark(ds, spark)


def _ray(spark: SparkSession) -> Any:
    """Ray, after checking that ``spark`` runs on it (RayDP), before anything executes."""
    try:
        import ray
        import ray.data
        import raydp  # noqa: F401 - adds Dataset.to_spark and ray.data.from_spark
        from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX
    except ImportError as exc:
        raise MissingDependencyError("raydp", "spark") from exc
    if not ray.is_initialized():
        raise EnvironmentSetupError(
            "the RayDP hand-off needs a running Ray cluster and a Spark-on-Ray session: "
            "ray.init(), then raylake.spark.session(on_ray=True)"
        )
    context = spark.sparkContext
    try:  # the actor RayDP's hand-off looks up; a local session has none
        ray.get_actor(context.appName + RAYDP_SPARK_MASTER_SUFFIX)
    except ValueError:
        raise EnvironmentSetupError(
            f"the RayDP hand-off needs a Spark-on-Ray session, but Spark app "
            f"{context.appName!r} runs on master {context.master!r}: start Spark with "
            "raylake.spark.session(on_ray=True), or hand off through a table "
            "(to_ray(df, via='table', uri=...), raylake.spark.read)"
        ) from None
    return ray
