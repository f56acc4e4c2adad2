"""Ray reads, writes and a StreamingJob on an S3 server that faults 5% of requests (and
answers 30% of the snapshot creates with an error after carrying them out): every row
exactly once."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")

import raylake  # noqa: E402
from raylake import read_lake, write_lake  # noqa: E402
from raylake.streaming import StreamingJob, read_lake_stream  # noqa: E402
from raylake.testing.faults import FaultPlan  # noqa: E402
from raylake.testing.s3server import LocalS3Server  # noqa: E402

pytestmark = pytest.mark.ray
# Workers cannot import this test module: ship its functions (the job function) by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64())])


def _data(n: int, offset: int = 0) -> pa.Table:
    ids = np.arange(offset, offset + n, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * 0.5}, schema=SCHEMA)


def identity(batch: pa.Table) -> pa.Table:
    return batch


@pytest.fixture
def faulty(s3_server: LocalS3Server) -> Iterator[LocalS3Server]:
    yield s3_server
    s3_server.set_faults(None)


def test_ray_reads_writes_and_a_streaming_job_under_faults_are_exact(
    ray_cluster: Any, faulty: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    bucket = faulty.create_bucket()
    src, dst, sink = (f"s3://{bucket}/{name}" for name in ("src", "dst", "sink"))
    source = raylake.create_table(src, SCHEMA, storage_options=storage_options)
    raylake.create_table(sink, SCHEMA, storage_options=storage_options)
    faulty.set_faults(FaultPlan.transient(0.05, seed=11, lost_creates=0.3))
    for i in range(3):
        source.write(_data(200, i * 200))
    ds = read_lake(src, storage_options=storage_options, override_num_blocks=3)
    assert sorted(ds.to_pandas()["id"].tolist()) == list(range(600))
    write_lake(ds, dst, storage_options=storage_options)
    job = StreamingJob(
        src, identity, consumer_id="copy", num_shards=2, sink_uri=sink,
        storage_options=storage_options, sink_storage_options=storage_options,
    )  # fmt: skip
    with job:
        job.run(until_snapshot=3)
        source.write(_data(200, 600))
        job.run(until_snapshot=4)
    injected = faulty.fault_stats()["injected"]
    faulty.set_faults(None)
    assert sum(injected.values()) > 0
    for uri, rows in ((dst, 600), (sink, 800)):
        out = raylake.open_table(uri, storage_options=storage_options).to_arrow()
        assert sorted(out["id"].to_pylist()) == list(range(rows)), uri


def test_read_lake_stream_under_faults_reads_every_row_once(
    ray_cluster: Any, faulty: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    src = f"s3://{faulty.create_bucket()}/src"
    source = raylake.create_table(src, SCHEMA, storage_options=storage_options)
    faulty.set_faults(FaultPlan.transient(0.05, seed=12, lost_creates=0.3))
    for i in range(3):
        source.write(_data(100, i * 100))
    options = {"consumer_id": "ray", "storage_options": storage_options, "poll_interval": 0.01}
    seen: list[int] = []
    stream = read_lake_stream(src, start="earliest", **options)
    for ds in stream.datasets(timeout=0):
        seen += ds.to_pandas()["id"].tolist()
        stream.checkpoint()
    stream.close()
    for i in range(3, 5):
        source.write(_data(100, i * 100))
    resumed = read_lake_stream(src, **options)  # from the consumer's checkpoint
    for ds in resumed.datasets(timeout=0):
        seen += ds.to_pandas()["id"].tolist()
        resumed.checkpoint()
    resumed.close()
    injected = faulty.fault_stats()["injected"]
    faulty.set_faults(None)
    assert sum(injected.values()) > 0
    assert sorted(seen) == list(range(500))  # every row once, across the restart
