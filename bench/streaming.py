"""Streaming: commit -> visible latency, catch-up planning, and a 4-shard StreamingJob.

1. Latency: a child process commits small appends at random gaps and records when each
   commit returned; this process follows the table with ``table.stream(poll_interval=)``
   and records when each snapshot's plan came out. p50/p95 of the difference at poll
   intervals of 50 and 100 ms (target: p50 <= poll/2 + 10 ms).
2. Catch-up: a reader 1,000 snapshots behind plans everything in one diff plan, with
   cold metadata caches, against planning the snapshots one by one (target <= 1 s).
3. Throughput: a 4-shard StreamingJob (Ray, 2 CPUs) copies a table of many commits into
   a sink table, against one process reading the whole table and writing it once.

    python bench/streaming.py [--commits 40] [--behind 1000] [--job-rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np
import pyarrow as pa

import raylake
from raylake.table import clear_caches

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64())])

_COMMITTER = """
import json, random, sys, time
import pyarrow as pa
import raylake
uri, commits = sys.argv[1], int(sys.argv[2])
tbl = raylake.open_table(uri)
rng = random.Random(1)
schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
time.sleep(0.5)  # let the reader start
for c in range(commits):
    time.sleep(rng.uniform(0.1, 0.3))
    snap = tbl.write(pa.table({"id": [c], "v": [0.5]}, schema=schema))
    print(json.dumps({"id": snap.id, "t": time.time()}), flush=True)
"""


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "v": ids.astype(np.float64)}, schema=SCHEMA)


def latency(root: Path, poll: float, commits: int) -> tuple[float, float]:
    uri = str(root / f"latency-{int(poll * 1000)}")
    tbl = raylake.create_table(uri, SCHEMA)
    seen: dict[int, float] = {}
    reader = tbl.stream(start="latest-new", poll_interval=poll)
    child = subprocess.Popen(
        [sys.executable, "-c", _COMMITTER, uri, str(commits)], stdout=subprocess.PIPE, text=True
    )
    for plan in reader.plans(timeout=5.0):
        seen[plan.snapshot_id] = time.time()
        if plan.snapshot_id >= commits:
            break
    out, _ = child.communicate(timeout=60)
    committed = {d["id"]: d["t"] for d in map(json.loads, out.splitlines())}
    lags = np.array([(seen[i] - committed[i]) * 1000 for i in committed if i in seen])
    reader.close()
    return float(np.percentile(lags, 50)), float(np.percentile(lags, 95))


def catch_up(root: Path, behind: int, primary_key: bool) -> tuple[float, float, int]:
    uri = str(root / ("behind-pk" if primary_key else "behind"))
    keys = {"primary_key": ["id"], "buckets": 4} if primary_key else {}
    tbl = raylake.create_table(uri, SCHEMA, **keys)  # type: ignore[arg-type]
    tbl.write(rows(0, 1000))
    reader_at = tbl.stream(consumer_id="late", start="latest")
    reader_at.poll()
    reader_at.checkpoint()
    for c in range(behind):  # PK: upserts over 1,000 keys, so compactions happen too
        tbl.write(rows((c * 7) % 1000 if primary_key else 1000 + c, 10))
    clear_caches()
    t0 = time.perf_counter()
    plan = tbl.stream(consumer_id="late", catch_up_after=32).poll()
    t_diff = time.perf_counter() - t0
    assert plan is not None and plan.kind == "diff", plan
    clear_caches()
    t0 = time.perf_counter()
    one_by_one = tbl.stream(consumer_id="late", catch_up_after=10**9)
    plans = list(one_by_one.plans(timeout=0))
    t_steps = time.perf_counter() - t0
    assert len(plans) >= behind  # compactions add snapshots
    return t_diff, t_steps, len(plan.splits)


def job_throughput(root: Path, total: int, commits: int) -> tuple[float, float, float]:
    """Seconds for a 4-shard job to copy the table snapshot by snapshot, and with
    catch-up; and for one process to copy it in one read and one write."""
    import ray

    from raylake.streaming import StreamingJob

    source = raylake.create_table(str(root / "job-src"), SCHEMA)
    per_commit = total // commits
    for c in range(commits):
        source.write(rows(c * per_commit, per_commit))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    times = []
    try:
        for name, catch_up_after in (("steps", 10**9), ("catch-up", 32)):
            sink = raylake.create_table(str(root / f"job-dst-{name}"), SCHEMA)
            job = StreamingJob(source.uri, lambda t: t, consumer_id=f"bench-{name}", num_shards=4,
                               sink_uri=sink.uri, poll_interval=0.01, catch_up_after=catch_up_after)  # fmt: skip
            job.wait_ready()  # actors up before the clock starts
            t0 = time.perf_counter()
            job.run(until_snapshot=commits)
            times.append(time.perf_counter() - t0)
            job.stop()
            assert sink.count() == total, sink.count()
    finally:
        ray.shutdown()
    batch_sink = raylake.create_table(str(root / "batch-dst"), SCHEMA)
    t0 = time.perf_counter()
    batch_sink.write(source.to_arrow())
    t_batch = time.perf_counter() - t0
    return times[0], times[1], t_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, default=40, help="commits per latency run")
    parser.add_argument("--behind", type=int, default=1000)
    parser.add_argument("--job-rows", type=int, default=1_000_000)
    parser.add_argument("--job-commits", type=int, default=100)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="raylake-bench-stream-"))
    try:
        print("### commit -> visible latency (a commit every 100-300 ms from another process)")
        for poll in (0.05, 0.1):
            p50, p95 = latency(root, poll, args.commits)
            target = poll * 1000 / 2 + 10
            print(f"poll {poll * 1000:4.0f} ms   p50 {p50:6.1f} ms   p95 {p95:6.1f} ms   "
                  f"(target p50 <= {target:.0f} ms)")  # fmt: skip
        print(f"### catch-up planning, {args.behind} snapshots behind, cold caches")
        for pk in (False, True):
            t_diff, t_steps, splits = catch_up(root, args.behind, pk)
            name = "primary-key table" if pk else "append table"
            print(f"{name:<18} one diff plan {t_diff:6.3f} s ({splits} splits)   "
                  f"snapshot by snapshot {t_steps:6.3f} s   {t_steps / t_diff:6.1f}x")  # fmt: skip
        total, commits = args.job_rows, args.job_commits
        print(f"### StreamingJob, 4 shards: {total:,} rows in {commits} commits -> sink table")
        t_steps, t_catch_up, t_batch = job_throughput(root, total, commits)
        for name, t in (("one plan per snapshot", t_steps), ("with catch-up", t_catch_up)):
            print(f"StreamingJob, {name:<21} {total / t / 1e6:5.2f}M rows/s   "
                  f"one-process batch copy {total / t_batch / 1e6:5.2f}M rows/s   "
                  f"{t_batch / t:5.2f}x")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
