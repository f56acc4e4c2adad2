"""A Ray Dataset's blocks as a Spark DataFrame (RayDP), in the types of docs/spark.md.

This is RayDP's conversion (the same holder actor, the same locality-aware DataFrame of
object refs) with its last step changed: RayDP turns each Arrow block into pandas and
hands the frames to ``mapInPandas``, which loses what pandas cannot hold. An int64
column with a null became float64 (2**60 + 1 arrived as 2**60), a map column failed in
the Spark task, a ``timestamp[us]`` became Spark's ``timestamp`` rather than
``timestamp_ntz``, uint8/uint64/float16 were refused by PySpark, and pandas 3's
Arrow-backed strings failed in PySpark 3.5 (``Expected Array, got ChunkedArray``). Here
the blocks go to ``mapInArrow`` as Arrow, cast to the Spark schema raylake reads a table
of the same Arrow schema as (widening what Spark lacks, as ``raylake.spark.read`` does).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

import pyarrow as pa

from raylake.spark.batches import to_spark_batch
from raylake.spark.types import spark_arrow_schema, spark_schema_of


def blocks_to_spark(ds: Any, spark: Any) -> Any:
    """``ds`` (a Ray Dataset of Arrow blocks) as a Spark DataFrame of ``spark``."""
    import ray
    from pyspark.sql import DataFrame
    from raydp.spark.dataset import get_locations
    from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

    wrapped = ds.schema()
    arrow_schema = getattr(wrapped, "base_schema", wrapped)
    if type(arrow_schema).__name__ == "PandasBlockSchema":
        # ray.data.from_pandas: RayDP takes Arrow blocks only
        ds = ds.map_batches(_as_arrow, batch_format="pyarrow", zero_copy_batch=True)
        wrapped = ds.schema()
        arrow_schema = getattr(wrapped, "base_schema", wrapped)
    if not isinstance(arrow_schema, pa.Schema):
        return ds.to_spark(spark)  # RayDP's own path and its own refusals
    # Ray's zero-column blocks carry a placeholder column that is not the Dataset's.
    visible = set(getattr(wrapped, "names", arrow_schema.names))
    arrow_schema = pa.schema([f for f in arrow_schema if f.name in visible])
    if not arrow_schema.names:  # read_lake(columns=[]), to count: the rows without columns
        return spark.range(ds.count()).select()
    schema = spark_schema_of(arrow_schema)  # a type Spark lacks: named here, before any job
    blocks = ds.to_arrow_refs()
    if not blocks:
        return spark.createDataFrame([], schema)
    holder_name = spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX
    holder = ray.get_actor(holder_name)
    df_id = uuid.uuid4()
    ray.get(holder.add_objects.remote(df_id, blocks))
    reader = spark.sparkContext._jvm.org.apache.spark.sql.raydp.ObjectStoreReader
    jdf = reader.createRayObjectRefDF(spark._jsparkSession, get_locations(blocks))
    blocks_df = DataFrame(jdf, spark).select("idx")
    source = _Blocks(
        ray.get(holder.get_ray_address.remote()),
        ray.get_runtime_context().namespace,
        holder_name,
        df_id,
    )
    return blocks_df.mapInArrow(partial(_batches, source, spark_arrow_schema(arrow_schema)), schema)


def _as_arrow(batch: pa.Table) -> pa.Table:
    return batch


class _Blocks:
    """Where a Spark task fetches the blocks: RayDP's holder actor, on the driver's cluster."""

    def __init__(self, address: str, namespace: str, holder: str, df_id: uuid.UUID) -> None:
        self.address, self.namespace, self.holder, self.df_id = address, namespace, holder, df_id

    def get(self, indices: Iterable[int]) -> Iterator[pa.Table]:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, namespace=self.namespace, logging_level=logging.WARN)
        owner = ray.get_actor(self.holder)
        for i in indices:
            yield ray.get(ray.get(owner.get_object.remote(self.df_id, i)))


def _batches(
    source: _Blocks, target: pa.Schema, parts: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    for part in parts:
        for block in source.get(part.column("idx").to_pylist()):
            if block.num_rows == 0:  # Dataset.filter leaves empty blocks, some without columns
                continue
            for batch in block.select(target.names).to_batches():
                yield to_spark_batch(batch, target)
