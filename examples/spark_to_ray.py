"""Hybrid pipeline: Spark ETL -> raylake table -> Ray Data -> map_batches.

A Spark job cleans raw click events and upserts per-user features into a
primary-key table (executors write in parallel, the driver commits once); Ray
Data then reads the pinned snapshot and scores it with ``map_batches``. Part of
``make demo``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.data.expressions import col

import raylake
import raylake.spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", default="./warehouse")
    args = parser.parse_args()
    uri = str(Path(args.warehouse).resolve() / "user_features")

    t0 = time.perf_counter()
    spark = raylake.spark.session("raylake-demo", on_ray=False, master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    print(f"\n== Spark ETL (session up in {time.perf_counter() - t0:.1f}s)")
    raw = spark.range(0, 20_000).selectExpr(
        "id % 2000 as user_id",
        "cast(id % 7 as int) as page",
        "rand(42) * 10 as dwell_s",
        "case when id % 97 = 0 then null else 'web' end as source",
    )
    features = (
        raw.where("source is not null")
        .groupBy("user_id")
        .agg({"dwell_s": "avg", "page": "count"})
        .withColumnRenamed("avg(dwell_s)", "avg_dwell_s")
        .withColumnRenamed("count(page)", "clicks")
    )
    snap = raylake.spark.write(features, uri, mode="upsert", primary_key=["user_id"], buckets=4)
    assert snap is not None
    print(f"wrote snapshot {snap.id} of {uri}: {raylake.open_table(uri).count():,} users")
    # A second Spark job upserts corrections for some users: the key decides, not the job.
    fixes = features.where("user_id < 10").selectExpr(
        "user_id", "cast(0 as double) as avg_dwell_s", "clicks"
    )
    snap = raylake.spark.write(fixes, uri)
    assert snap is not None
    print(
        f"upserted 10 corrections: snapshot {snap.id}, still {raylake.open_table(uri).count():,} users"
    )
    raylake.spark.stop()

    print("\n== Ray Data on the pinned snapshot")
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
    )
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        ds = raylake.read_lake(uri, snapshot_id=snap.id)

        def score(batch: pa.Table) -> pa.Table:
            engaged = pc.multiply(batch["avg_dwell_s"], pc.cast(batch["clicks"], pa.float64()))
            return batch.append_column("engagement", engaged)

        scored = ds.map_batches(score, batch_format="pyarrow")
        top = scored.sort("engagement", descending=True).take(3)
        print(f"read {ds.count():,} rows from snapshot {snap.id}; top users by engagement:")
        for row in top:
            print(f"  user {row['user_id']:>5}: {row['engagement']:.1f}")
        zeroed = scored.filter(expr=col("avg_dwell_s") == 0.0).count()
        print(f"users with corrected dwell time: {zeroed}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
