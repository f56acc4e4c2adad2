"""A Ray Dataset's blocks as a Spark DataFrame (RayDP), whatever the installed pandas.

RayDP's ``Dataset.to_spark`` turns each Arrow block into pandas on the Spark workers and
hands the frames to PySpark 3.5's ``mapInPandas``. With pandas 3 a string column becomes
pandas' Arrow-backed ``str``, which PySpark 3.5 converts to a ``ChunkedArray`` where it
expects an ``Array``: ``TypeError: Expected Array, got ChunkedArray``. This is RayDP's
conversion (the same holder actor, the same locality-aware DataFrame of object refs)
with that one step changed: string columns are handed over as Python objects, as pandas
2 does.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa


def blocks_to_spark(ds: Any, spark: Any) -> Any:
    """``ds`` (a Ray Dataset of Arrow blocks) as a Spark DataFrame of ``spark``."""
    import pandas as pd
    import ray
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructType
    from raydp.spark.dataset import get_locations
    from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

    arrow_schema = ds.schema()
    arrow_schema = getattr(arrow_schema, "base_schema", arrow_schema)
    blocks = ds.to_arrow_refs()
    if not isinstance(arrow_schema, pa.Schema) or not blocks:
        return ds.to_spark(spark)  # RayDP's own path and its own refusals
    schema = StructType()
    for field in arrow_schema:
        schema.add(field.name, from_arrow_type(field.type), nullable=field.nullable)
    holder_name = spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX
    holder = ray.get_actor(holder_name)
    df_id = uuid.uuid4()
    ray.get(holder.add_objects.remote(df_id, blocks))
    reader = spark.sparkContext._jvm.org.apache.spark.sql.raydp.ObjectStoreReader
    jdf = reader.createRayObjectRefDF(spark._jsparkSession, get_locations(blocks))
    blocks_df = DataFrame(jdf, spark)
    address = ray.get(holder.get_ray_address.remote())
    namespace = ray.get_runtime_context().namespace

    def frames(parts: Iterable[Any]) -> Iterator[Any]:
        if not ray.is_initialized():
            ray.init(address=address, namespace=namespace, logging_level=logging.WARN)
        owner = ray.get_actor(holder_name)
        for part in parts:
            refs = [ray.get(owner.get_object.remote(df_id, i)) for i in part["idx"]]
            frames = [strings_as_objects(ray.get(ref).to_pandas()) for ref in refs]
            yield pd.concat(frames)

    return blocks_df.mapInPandas(frames, schema)


def strings_as_objects(df: Any) -> Any:
    """``df`` with pandas string columns as Python objects, which PySpark 3.5 converts."""
    import pandas as pd

    for name, dtype in df.dtypes.items():
        if isinstance(dtype, pd.StringDtype):
            df[name] = df[name].astype(object)
    return df
