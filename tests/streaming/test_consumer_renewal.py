"""A running job's shard records its position again while its source is quiet, so that an
expiration with ``consumer.expiration-time`` does not take it for a stopped job's."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from committer import SCHEMA, batch

import raylake
from raylake.errors import StreamPositionExpiredError
from raylake.format.consumer import ConsumerProgress, consumer_path
from raylake.streaming.job import JobSpec, ShardWorker

CONSUMER = "job.shard-0-of-1"
DAY_MS = 86_400_000


def quiet_job(warehouse: Path, **options: str) -> tuple[raylake.Table, ShardWorker]:
    source = raylake.create_table(str(warehouse / "src"), SCHEMA, options=options)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    source.write(batch(0, 10))
    worker = ShardWorker(JobSpec(source.uri, lambda t: t, "job", 1, sink_uri=sink.uri), 0)
    assert worker.step().plans == 1  # then the source goes quiet
    return source, worker


def backdate(source: raylake.Table, worker: ShardWorker, hours: float) -> int:
    """As if the shard had last recorded its position ``hours`` ago; that time (ms)."""
    worker._recorded = time.monotonic() - hours * 3600
    progress = source.consumer(CONSUMER)
    assert progress is not None
    then = progress.updated_millis - int(hours * 3_600_000)
    backdated = ConsumerProgress(CONSUMER, progress.next_snapshot_id, then, progress.properties)
    source.file_io.write_bytes(consumer_path(CONSUMER), backdated.to_bytes())
    return then


def test_an_idle_shard_renews_its_consumer_before_it_could_expire(warehouse: Path) -> None:
    source, worker = quiet_job(warehouse, **{"consumer.expiration-time": "1 d"})
    then = backdate(source, worker, hours=7)  # over a quarter of the expiration time
    assert worker.step().plans == 0
    renewed = source.consumer(CONSUMER)
    assert renewed is not None and renewed.updated_millis > then + 6 * 3_600_000
    assert renewed.next_snapshot_id == 2
    source.write(batch(1, 10))
    result = source.expire_snapshots(retain_last=1)
    assert result.expired_consumer_ids == () and result.expired_snapshot_ids == ()
    assert worker.step().plans == 1


def test_a_shard_renews_no_sooner_than_it_needs_to(warehouse: Path) -> None:
    source, worker = quiet_job(warehouse, **{"consumer.expiration-time": "1 d"})
    then = backdate(source, worker, hours=5)  # under a quarter: no write yet
    assert worker.step().plans == 0
    progress = source.consumer(CONSUMER)
    assert progress is not None and progress.updated_millis == then


def test_without_the_option_a_quiet_shard_writes_nothing(warehouse: Path) -> None:
    source, worker = quiet_job(warehouse)
    then = backdate(source, worker, hours=24 * 30)
    assert worker.step().plans == 0
    progress = source.consumer(CONSUMER)
    assert progress is not None and progress.updated_millis == then
    gone = source.expire_snapshots(consumers_older_than=timedelta(days=1))
    assert gone.expired_consumer_ids == (CONSUMER,)
    assert pa.table(source.to_arrow()).num_rows == 10


def test_a_consumer_expired_under_a_running_shard_is_not_started_over(warehouse: Path) -> None:
    """The consumer of a job that did not step for longer than the expiration time went
    with an expiration; a failed step then opened the shard's reader again as a new
    consumer, from start="earliest", and the sink got every row a second time."""
    failures = [OSError("the sink's store failed")]

    def flaky(table: pa.Table) -> pa.Table:
        if failures:
            raise failures.pop()
        return table

    source = raylake.create_table(
        str(warehouse / "src"), SCHEMA, options={"consumer.expiration-time": "1 h"}
    )
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    source.write(batch(0, 10))
    worker = ShardWorker(JobSpec(source.uri, lambda t: t, "job", 1, sink_uri=sink.uri), 0)
    assert worker.step().plans == 1
    worker.spec = JobSpec(source.uri, flaky, "job", 1, sink_uri=sink.uri)
    backdate(source, worker, hours=2)  # the job did not step for two hours
    source.write(batch(1, 10))
    assert source.expire_snapshots().expired_consumer_ids == (CONSUMER,)
    with pytest.raises(OSError, match="store failed"):
        worker.step()
    progress = source.consumer(CONSUMER)
    assert progress is not None and progress.next_snapshot_id == 2
    assert worker.step().plans == 1
    assert sorted(sink.to_arrow().column("id").to_pylist()) == list(range(20))


def test_a_running_shard_whose_consumer_and_snapshots_expired_keeps_failing(
    warehouse: Path,
) -> None:
    """Its next snapshot expired with its consumer: every step raises the error, where
    the steps after the first started over from the earliest snapshot left."""
    source, worker = quiet_job(warehouse)
    sink = raylake.open_table(str(warehouse / "dst"))
    backdate(source, worker, hours=2)
    for commit in range(1, 3):
        source.write(batch(commit, 10))
    source.expire_snapshots(consumers_older_than=timedelta(hours=1), retain_last=1)
    for _ in range(2):
        with pytest.raises(StreamPositionExpiredError, match="needs snapshot 2"):
            worker.step()
    assert sorted(sink.to_arrow().column("id").to_pylist()) == list(range(10))
