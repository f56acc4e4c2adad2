"""Streaming demo: follow a primary-key table's commits, resume from a checkpoint, and
run an exactly-once StreamingJob on Ray into a sink table. Part of ``make demo``."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import pyarrow as pa
import pyarrow.compute as pc

import raylake

SCHEMA = pa.schema([("user_id", pa.int64()), ("clicks", pa.int64())])


def clicks(users: list[int], counts: list[int]) -> pa.Table:
    return pa.table({"user_id": users, "clicks": counts}, schema=SCHEMA)


def with_bonus(batch: pa.Table) -> pa.Table:
    """The job's function: runs on each batch of each new snapshot, in the shard actors."""
    return batch.set_column(1, "clicks", pc.multiply(batch.column("clicks"), 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", default="./warehouse")
    args = parser.parse_args()
    root = Path(args.warehouse)
    for name in ("clicks", "clicks_x10"):
        shutil.rmtree(root / name, ignore_errors=True)
    started = time.perf_counter()
    tbl = raylake.create_table(
        str(root / "clicks"), SCHEMA, primary_key=["user_id"], buckets=4,
        options={"changelog-producer": "lookup"},
    )  # fmt: skip
    tbl.write(clicks([1, 2, 3], [5, 7, 9]))

    print("== a stream reader with consumer 'dashboard', from the earliest snapshot")
    reader = tbl.stream(consumer_id="dashboard", start="earliest", include_row_kind=True)
    for plan in reader.plans(timeout=0):
        print(f"{plan}: {plan.to_arrow().to_pylist()}")
    reader.checkpoint()

    print("\n== three more commits: an update, a new user, a delete")
    tbl.write(clicks([2], [8]))
    tbl.write(clicks([4], [1]))
    tbl.delete({"user_id": [3]})

    print("== a restarted reader resumes at its checkpoint and sees the changelog")
    resumed = tbl.stream(consumer_id="dashboard", include_row_kind=True)
    for plan in resumed.plans(timeout=0):
        rows = plan.to_arrow()
        changes = list(zip(rows["_rl_kind"].to_pylist(), rows["user_id"].to_pylist()))
        print(f"snapshot {plan.snapshot_id} ({plan.kind}): {changes}")
    resumed.checkpoint()
    print(f"consumers: {tbl.consumers()}")

    print("\n== a 2-shard StreamingJob on Ray: clicks x10 into a sink, exactly once")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    sink = raylake.create_table(str(root / "clicks_x10"), SCHEMA, primary_key=["user_id"])
    with raylake.StreamingJob(
        tbl.uri, with_bonus, consumer_id="bonus", num_shards=2, sink_uri=sink.uri,
        start="earliest", include_row_kind=True,
    ) as job:  # fmt: skip
        job.run(until_snapshot=tbl.latest_snapshot().id)  # type: ignore[union-attr]
        tbl.write(clicks([5], [2]))  # a commit while the job runs
        job.run(until_snapshot=tbl.latest_snapshot().id)  # type: ignore[union-attr]
    ray.shutdown()
    print(f"sink: {sink.to_arrow().sort_by('user_id').to_pylist()}")
    print(f"source: {tbl.to_arrow().sort_by('user_id').to_pylist()}")
    print(f"\ndone in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
