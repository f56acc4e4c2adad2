"""Spark in local-cluster mode (2 executor JVMs, each with its own Python workers) writes
and reads a raylake table on the S3 server with storage_options; no AWS variables.

Run by tests/multinode/test_multinode.py with the project's Python; prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys

from common import clear_aws_environment

clear_aws_environment()

import raylake  # noqa: E402
import raylake.spark  # noqa: E402
from raylake.testing.s3server import LocalS3Server  # noqa: E402


def main() -> None:
    with LocalS3Server() as s3:
        options = s3.storage_options
        bucket = s3.create_bucket()
        spark = raylake.spark.session(
            "raylake-multinode", on_ray=False, master="local-cluster[2,1,1024]",
            configs={"spark.task.maxFailures": "1"},
        )  # fmt: skip
        try:
            df = spark.createDataFrame([(i, float(i) / 2) for i in range(200)], "id long, x double")
            df = df.repartition(4)
            uri = f"s3://{bucket}/spark"
            raylake.spark.write(df, uri, primary_key=["id"], buckets=2, storage_options=options)
            read = raylake.spark.read(spark, uri, filter="id >= 10", storage_options=options)
            rows = sorted(r.id for r in read.collect())
            executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
            out = raylake.open_table(uri, storage_options=options).to_arrow()
        finally:
            raylake.spark.stop()
    print(json.dumps({
        "rows": rows == list(range(10, 200)),
        "table_rows": out.num_rows,
        "executors": executors,
        "aws_env": sorted(k for k in os.environ if k.startswith("AWS_ACCESS")),
    }))  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()
