"""raylake on more than one node: a 3-node Ray cluster and Spark with two executor JVMs,
both against the S3 server with credentials only in storage_options on the driver.

Each runs as a script in its own process (the test session has its own Ray cluster,
and one process holds one SparkContext), with no AWS variables in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.multinode, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def run_script(name: str, timeout: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE)])
    # Short (Ray's socket paths must fit 107 bytes) and removed afterwards.
    with tempfile.TemporaryDirectory(
        prefix="rl-", dir="/tmp", ignore_cleanup_errors=True
    ) as ray_tmp:
        env["RAY_TMPDIR"] = ray_tmp
        done = subprocess.run(
            [sys.executable, str(HERE / name)],
            cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, (
        f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    return dict(json.loads(lines[-1]))


def test_three_node_ray_cluster_on_s3() -> None:
    pytest.importorskip("ray")
    pytest.importorskip("torch")
    report = run_script("ray_cluster_s3.py", timeout=900)
    assert report == {
        "nodes": 3,
        "read": True,  # read_datasource(LakeDatasource(...)) on the worker nodes
        "written": True,  # write_datasink(LakeDatasink(...))...
        "sink_snapshots": 1,  # ...as one commit
        "stream_rows": True,  # a 2-shard StreamingJob...
        "stream_nodes": 2,  # ...whose shards ran on different nodes
        "stream_actor_nodes": 2,
        "train_ranks": 2,  # a 2-worker Ray Train run, one worker per node,
        "train_rows": True,  # reading the table exactly once between them
        "train_nodes": 2,
    }


def test_a_streaming_job_whose_node_is_lost_raises_after_ready_timeout() -> None:
    """A step whose shard's actor cannot be placed again (its node gone, no other node
    with the resources it asks for) raises StreamError after ready_timeout, as at start,
    and stops the actors: it waited without end."""
    pytest.importorskip("ray")
    report = run_script("ray_cluster_lost_node.py", timeout=300)
    assert report == {"rows_before": 10, "hung": False, "stream_error": True, "actors_left": 0}


def test_spark_with_two_executor_processes_on_s3() -> None:
    pytest.importorskip("pyspark")
    report = run_script("spark_cluster_s3.py", timeout=900)
    assert report == {"rows": True, "table_rows": 200, "executors": 2, "aws_env": []}
