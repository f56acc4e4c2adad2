"""Ray Data reads and writes on the S3 server; workers get credentials, tasks carry none."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

import raylake  # noqa: E402
from raylake import LakeDatasource, read_lake, write_lake  # noqa: E402
from raylake.testing.s3server import LocalS3Server  # noqa: E402

pytestmark = pytest.mark.ray

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64())])


def _data(n: int, offset: int = 0) -> pa.Table:
    ids = np.arange(offset, offset + n, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * 0.5}, schema=SCHEMA)


def test_read_and_write_lake_on_s3(
    ray_cluster: Any, s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    src = f"s3://{s3_bucket}/src"
    tbl = raylake.create_table(src, SCHEMA, storage_options=storage_options)
    for i in range(3):
        tbl.write(_data(100, i * 100))
    ds = read_lake(src, filter="id >= 50", storage_options=storage_options, override_num_blocks=3)
    doubled = ds.map_batches(lambda b: {"id": b["id"], "x": b["x"] * 2}, batch_format="numpy")
    dst = f"s3://{s3_bucket}/dst"
    snap = write_lake(doubled, dst, storage_options=storage_options, primary_key=["id"])
    assert snap is not None
    out = raylake.open_table(dst, storage_options=storage_options).to_arrow().sort_by("id")
    assert out["id"].to_pylist() == list(range(50, 300))
    assert out["x"].to_pylist() == [i * 1.0 for i in range(50, 300)]


def test_read_tasks_carry_no_secret(
    s3_server: LocalS3Server, s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    uri = f"s3://{s3_bucket}/tasks"
    raylake.create_table(uri, SCHEMA, storage_options=storage_options).write(_data(10))
    source = LakeDatasource(uri, storage_options=storage_options)
    tasks = source.get_read_tasks(4)
    assert tasks
    for task in tasks:
        blob = ray.cloudpickle.dumps(task)
        assert s3_server.secret_key.encode() not in blob
    assert s3_server.secret_key.encode() not in pickle.dumps(source)


def test_ray_read_parquet_works_on_local_files(ray_cluster: Any, tmp_path: Path) -> None:
    """Ray 2.60's read_parquet imports fsspec's HTTP filesystem: aiohttp must be installed."""
    for i in range(3):
        pq.write_table(_data(10, i * 10), tmp_path / f"part-{i}.parquet")
    ds = ray.data.read_parquet(str(tmp_path))
    assert sorted(ds.to_pandas()["id"].tolist()) == list(range(30))
