"""Work a stream does once: a shard reads its consumer file once at start, and a reader
with catch-up off never reads the ``LATEST`` hint per plan. Reads are counted on real
files through a counting local filesystem (raylake/testing/counting_fs.py)."""

from __future__ import annotations

from pathlib import Path

from committer import SCHEMA, batch

import raylake
from raylake.streaming.job import JobSpec, ShardWorker
from raylake.testing.counting_fs import PROTOCOL, register

CONSUMER_FILE = "consumer/consumer-job.shard-0-of-1"
HINT = "snapshot/LATEST"


def counted(path: Path) -> str:
    return f"{PROTOCOL}://{path}"


def test_a_shard_reads_its_consumer_file_once_at_start(warehouse: Path) -> None:
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    source.write(batch(0, 10))
    source.write(batch(1, 10))
    fs = register()
    spec = JobSpec(counted(warehouse / "src"), lambda t: t, "job", 1, sink_uri=sink.uri)
    # A new consumer: read (absent), registered, then given the sink snapshot it starts
    # from by a forward-only commit, which reads it once more.
    first = ShardWorker(spec, 0)
    assert fs.count(CONSUMER_FILE) == 2
    first.step()
    assert source.consumer("job.shard-0-of-1").next_snapshot_id == 3

    fs.reads.clear()
    restarted = ShardWorker(spec, 0)  # resumes from the checkpoint and the sink snapshot
    assert fs.count(CONSUMER_FILE) == 1
    assert restarted.reader.next_snapshot_id == 3


def test_a_reader_without_catch_up_reads_no_hint_per_plan(warehouse: Path) -> None:
    writer = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for i in range(6):
        writer.write(batch(i, 5))
    fs = register()
    tbl = raylake.open_table(counted(warehouse / "t"))
    # The first plan reads snapshot 1 whole; each of the 5 after it is a step that,
    # with catch-up on, first asks the hint how far behind the reader is.
    for catch_up_after, hint_reads in ((32, 5), (None, 0)):
        reader = tbl.stream(start="earliest", catch_up_after=catch_up_after, prefetch=False)
        fs.reads.clear()
        plans = [reader.poll() for _ in range(6)]
        assert [p.snapshot_id for p in plans if p is not None] == [1, 2, 3, 4, 5, 6]
        assert fs.count(HINT) == hint_reads
        assert sum(p.to_arrow().num_rows for p in plans if p is not None) == 30
