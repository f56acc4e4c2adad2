"""raylake on a 3-node Ray cluster (a head without CPUs and two worker nodes, each with its
own raylet and object store) against the S3 server, with credentials only in
storage_options on the driver: no AWS variables anywhere.

Run by tests/multinode/test_multinode.py with the project's Python; prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import clear_aws_environment, private_ray_tmpdir

clear_aws_environment()
private_ray_tmpdir()

import pyarrow as pa  # noqa: E402
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import raylake  # noqa: E402
from raylake import LakeDatasink, LakeDatasource, StreamingJob  # noqa: E402
from raylake.testing.s3server import LocalS3Server  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64())])
OUT_SCHEMA = pa.schema([("id", pa.int64()), ("node", pa.string())])


def rows(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "x": pa.compute.multiply(ids, 0.5)}, schema=SCHEMA)


def tag_with_node(batch: pa.Table) -> pa.Table:
    node = ray.get_runtime_context().get_node_id()
    return pa.table({"id": batch["id"], "node": pa.array([node] * batch.num_rows, pa.string())})


def _node_of(actor: Any) -> str:
    return str(ray.get_runtime_context().get_node_id())


def train_loop(config: dict[str, Any]) -> None:
    import ray.train
    import torch

    from raylake.train.torch import LakeIterableDataset

    dataset = LakeIterableDataset(config["table"], columns=["id"], batch_size=50)
    ids = [int(i) for b in torch.utils.data.DataLoader(dataset, batch_size=None) for i in b["id"]]
    rank = ray.train.get_context().get_world_rank()
    node = ray.get_runtime_context().get_node_id()
    with open(os.path.join(config["out_dir"], f"rank-{rank}.json"), "w") as f:
        json.dump({"ids": ids, "node": node}, f)


def read_and_write(uri: str, dst: str, options: dict[str, Any]) -> dict[str, Any]:
    ds = ray.data.read_datasource(
        LakeDatasource(uri, storage_options=options), override_num_blocks=4
    )
    read_ids = sorted(ds.to_pandas()["id"].tolist())
    ds.map_batches(lambda b: {"id": b["id"], "x": b["x"] * 2}, batch_format="numpy").write_datasink(
        LakeDatasink(dst, storage_options=options)
    )
    out = raylake.open_table(dst, storage_options=options)
    return {
        "read": read_ids == list(range(300)),
        "written": sorted(out.to_arrow()["id"].to_pylist()) == list(range(300)),
        "sink_snapshots": len(out.snapshots()),
    }


def streaming(uri: str, bucket: str, options: dict[str, Any]) -> dict[str, Any]:
    sink = f"s3://{bucket}/stream-out"
    raylake.create_table(sink, OUT_SCHEMA, storage_options=options)
    job = StreamingJob(
        uri, tag_with_node, consumer_id="multinode", num_shards=2, sink_uri=sink,
        storage_options=options, sink_storage_options=options,
        actor_options={"num_cpus": 1},  # one CPU per worker node: one shard on each
    )  # fmt: skip
    with job:
        job.wait_ready()
        actor_nodes = {ray.get(a.__ray_call__.remote(_node_of)) for a in job.actors}
        job.run(
            until_snapshot=raylake.open_table(uri, storage_options=options).latest_snapshot().id
        )
    out = raylake.open_table(sink, storage_options=options).to_arrow()
    return {
        "stream_rows": sorted(out["id"].to_pylist()) == list(range(300)),
        "stream_nodes": len(set(out["node"].to_pylist())),
        "stream_actor_nodes": len(actor_nodes),
    }


def train(uri: str, options: dict[str, Any]) -> dict[str, Any]:
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    tbl = raylake.open_table(uri, storage_options=options)  # travels without its secrets
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"table": tbl, "out_dir": out_dir},
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        )
        trainer.fit()
        ranks = [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("rank-*.json"))]
    ids = [i for r in ranks for i in r["ids"]]
    return {
        "train_ranks": len(ranks),
        "train_rows": sorted(ids) == list(range(300)),
        "train_nodes": len({r["node"] for r in ranks}),
    }


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    report: dict[str, Any] = {"nodes": len([n for n in ray.nodes() if n["Alive"]])}
    try:
        with LocalS3Server() as s3:
            options = s3.storage_options
            bucket = s3.create_bucket()
            uri = f"s3://{bucket}/src"
            # Two buckets: the stream's shards split by bucket (a stable hash of the key).
            tbl = raylake.create_table(
                uri, SCHEMA, primary_key=["id"], buckets=2, storage_options=options
            )
            for start in range(0, 300, 100):
                tbl.write(rows(start, 100))
            report |= read_and_write(uri, f"s3://{bucket}/dst", options)
            report |= streaming(uri, bucket, options)
            report |= train(uri, options)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(report))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
