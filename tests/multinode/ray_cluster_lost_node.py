"""A StreamingJob whose shard's node is lost for good: on a 3-node Ray cluster (a head
without CPUs and two worker nodes), the shard's actor can run only on one worker node
(a resource only that node has); after that node is removed, the next step raises
StreamError after ``ready_timeout`` and stops the actors, where it waited without end.

Run by tests/multinode/test_multinode.py with the project's Python; prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from typing import Any

from common import private_ray_tmpdir

private_ray_tmpdir()

import pyarrow as pa  # noqa: E402
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import raylake  # noqa: E402
from raylake import StreamingJob  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64())])
STEP_WAIT_S = 60  # far longer than ready_timeout: a step that takes it has hung


def identity(rows: pa.Table) -> pa.Table:
    return rows


def lost_shard(cluster: Cluster, only_node: Any, root: str) -> dict[str, Any]:
    source = raylake.create_table(os.path.join(root, "src"), SCHEMA)
    sink = raylake.create_table(os.path.join(root, "out"), SCHEMA)
    source.write(pa.table({"id": list(range(10))}, schema=SCHEMA))
    job = StreamingJob(
        source.uri, identity, consumer_id="lost", sink_uri=sink.uri, ready_timeout=3,
        actor_options={"num_cpus": 0.5, "resources": {"only_here": 1}},
    )  # fmt: skip
    job.wait_ready(timeout=STEP_WAIT_S)  # a loaded machine may take seconds to start it
    job.run(until_snapshot=1)
    cluster.remove_node(only_node)
    source.write(pa.table({"id": list(range(10, 20))}, schema=SCHEMA))
    outcome: dict[str, Any] = {}

    def step() -> None:
        try:
            job.step()
            outcome["error"] = None
        except Exception as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=step, daemon=True)
    thread.start()
    thread.join(STEP_WAIT_S)
    error = outcome.get("error")
    return {
        "rows_before": raylake.open_table(sink.uri).to_arrow().num_rows,
        "hung": thread.is_alive(),
        "stream_error": error is not None
        and error.startswith("StreamError")
        and "shard actors [0] of 1 lost and not running again" in error,
        "actors_left": len(job.actors),
    }


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    only_node = cluster.add_node(num_cpus=1, resources={"only_here": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    with tempfile.TemporaryDirectory() as root:
        report = lost_shard(cluster, only_node, root)
    print(json.dumps(report))
    sys.stdout.flush()
    ray.shutdown()
    cluster.shutdown()
    if report["hung"]:  # a thread still waits on Ray: the interpreter would wait for it
        os._exit(0)


if __name__ == "__main__":
    main()
