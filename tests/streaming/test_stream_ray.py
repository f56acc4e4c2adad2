"""Streaming on Ray: a Dataset per snapshot, and sharded exactly-once jobs under faults."""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from committer import SCHEMA, batch, start

import raylake
from raylake.errors import (
    ConsumerError,
    InvalidArgumentError,
    SchemaMismatchError,
    StreamError,
    StreamPositionExpiredError,
    TableNotFoundError,
    UnknownColumnError,
)
from raylake.format.consumer import ConsumerManager

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")
# Imported after the skip: read_lake_stream imports Ray (make test-lowest has no Ray).
from raylake.streaming import ROW_KIND, StreamingJob, read_lake_stream  # noqa: E402

# Workers cannot import this test module: ship its functions (the job functions) by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def double(table: pa.Table) -> pa.Table:
    return table.set_column(1, "v", pc.multiply(table.column("v"), 2))


def test_read_lake_stream_yields_a_dataset_per_snapshot(ray_cluster: Any, warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(batch(0, 100))
    stream = read_lake_stream(tbl.uri, consumer_id="ray", start="earliest", poll_interval=0.01)
    datasets = stream.datasets(timeout=0)
    first = next(datasets)
    assert sorted(first.to_pandas()["id"]) == list(range(100))
    stream.checkpoint()
    tbl.write(batch(1, 100))
    tbl.write(batch(2, 100))
    rest = list(stream.datasets(timeout=0))
    assert [sorted(ds.to_pandas()["id"]) for ds in rest] == [
        list(range(100, 200)),
        list(range(200, 300)),
    ]
    assert tbl.consumer("ray").next_snapshot_id == 2  # checkpointed after the first only


def test_read_lake_stream_micro_batches(ray_cluster: Any, warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for c in range(5):
        tbl.write(batch(c, 10))
    stream = read_lake_stream(
        tbl.uri, start="latest-new", poll_interval=0.01, max_snapshots_per_dataset=3
    )
    assert list(stream.datasets(timeout=0)) == []
    for c in range(5, 10):
        tbl.write(batch(c, 10))
    counts = [ds.count() for ds in stream.datasets(timeout=0)]
    assert counts == [30, 20]
    assert [p.snapshot_id for p in stream.last_plans] == [9, 10]


def test_stream_datasets_refuse_bad_arguments_when_called(warehouse: Path) -> None:
    """Refused by the call, as reader.plans() refuses them: the datasets are a generator,
    whose checks ran at the first next(), with Python's bare TypeError for some."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    stream = read_lake_stream(tbl.uri)
    with pytest.raises(StreamError, match="max_datasets must be an int >= 0 or None"):
        stream.datasets(max_datasets="2")  # type: ignore[arg-type]
    with pytest.raises(StreamError, match="timeout must be a number of seconds >= 0"):
        stream.datasets(timeout=-1)
    with pytest.raises(InvalidArgumentError, match="did you mean 'max_datasets'"):
        stream.datasets(max_dataset=1)  # type: ignore[call-arg]
    stream.close()


def test_streaming_job_into_a_sink(ray_cluster: Any, warehouse: Path) -> None:
    source = raylake.create_table(str(warehouse / "src"), SCHEMA, primary_key=["id"], buckets=4)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA, primary_key=["id"], buckets=2)
    source.write(batch(0, 200))
    job = StreamingJob(
        source.uri, double, consumer_id="double", num_shards=2, sink_uri=sink.uri,
        include_row_kind=True,
    )  # fmt: skip
    with job:
        # The schema the job's columns and filter name, for shards restarted after a rename.
        assert job.spec.source_schema_id == source.table_schema.schema_id
        job.run(until_snapshot=1)
        source.write(batch(0, 50))  # updates: the changelog reaches the sink as -U/+U
        source.delete(pa.table({"id": list(range(150, 200))}))
        last = np.int64(source.latest_snapshot().id)  # an id read from a DataFrame
        assert all(s.next_snapshot_id == last + 1 for s in job.run(until_snapshot=last))
    expected = double(source.to_arrow()).sort_by("id")
    assert sink.to_arrow().sort_by("id").equals(expected)
    users = {s.commit_user for s in sink.snapshots()}
    assert users == {f"raylake-stream/double.shard-{i}-of-2" for i in range(2)}


def test_a_run_for_a_duration_ends_then_however_long_poll_interval_is(
    ray_cluster: Any, warehouse: Path
) -> None:
    """run(duration=) slept a whole poll_interval after an empty step first (60 s here)."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    job = StreamingJob(source.uri, double, consumer_id="idle", poll_interval=60)
    with job:
        job.wait_ready()
        started = time.monotonic()
        job.run(duration=0.2)
        assert time.monotonic() - started < 30


def test_streaming_job_bad_arguments(ray_cluster: Any, warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    with pytest.raises(StreamError, match="num_shards"):
        StreamingJob(tbl.uri, double, consumer_id="j", num_shards=0)
    with pytest.raises(StreamError, match="callable"):
        StreamingJob(tbl.uri, "double", consumer_id="j")  # type: ignore[arg-type]
    with pytest.raises(StreamError, match="refresh"):
        StreamingJob(tbl.uri, double, consumer_id="j", num_shards=2, sink_uri=tbl.uri,
                     on_overwrite="refresh")  # fmt: skip
    with pytest.raises(StreamError, match="until_snapshot"):
        StreamingJob(tbl.uri, double, consumer_id="j").run()
    # Refused before any actor starts: wait_ready(timeout="5") started the shards and
    # failed with Python's bare TypeError, a misspelled keyword with another.
    job = StreamingJob(tbl.uri, double, consumer_id="j")
    with pytest.raises(StreamError, match="timeout must be a number of seconds > 0"):
        job.wait_ready(timeout="5")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="did you mean 'until_snapshot'"):
        job.run(until=5)  # type: ignore[call-arg]
    assert job.actors == [] and tbl.consumers() == []


def test_shards_that_cannot_start_raise_after_ready_timeout(
    ray_cluster: Any, warehouse: Path
) -> None:
    """Ray waits without end for an actor it cannot place: the job says so instead, naming
    what its shards ask for and what the cluster has, and leaves no actor behind."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(batch(0, 10))
    too_big = ray.cluster_resources()["CPU"] + 1  # no node of the cluster has this many
    job = StreamingJob(
        tbl.uri, double, consumer_id="big", num_shards=2, actor_options={"num_cpus": too_big},
        ready_timeout=1.0,
    )  # fmt: skip
    with pytest.raises(StreamError, match=r"shard actors \[0, 1\] of 2 not started") as info:
        job.run(until_snapshot=0)
    assert f"{{'CPU': {too_big}}}" in str(info.value)
    assert "'CPU': '2 of 2'" in str(info.value)  # the session cluster's, all free
    assert job.actors == []
    with pytest.raises(StreamError, match="ready_timeout"):
        StreamingJob(tbl.uri, double, consumer_id="j", ready_timeout=0)


def test_a_shard_restarted_where_its_table_is_not_there_raises_and_resumes_later(
    ray_cluster: Any, warehouse: Path
) -> None:
    """A shard's actor lost (its node or process) is restarted by Ray; where its sink
    was not there for it then (a store failing for a moment, a node without the disk),
    the actor died in its constructor, Ray did not restart it, and every later step
    raised Ray's ActorDiedError, after the sink was back too."""
    import shutil

    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    source.write(batch(0, 4))
    job = StreamingJob(source.uri, double, consumer_id="back", sink_uri=sink.uri)
    with job:
        job.run(until_snapshot=1)
        shutil.move(warehouse / "dst", warehouse / "away")
        killed_and_restarted(job.actors[0])
        source.write(batch(1, 4))
        with pytest.raises(TableNotFoundError, match="dst"):
            job.step()
        shutil.move(warehouse / "away", warehouse / "dst")
        assert job.run(until_snapshot=2)[0].next_snapshot_id == 3
    assert sorted(sink.to_arrow().column("id").to_pylist()) == list(range(8))


def killed_and_restarted(actor: Any) -> None:
    """Kill the actor's process and wait until Ray has restarted it. ray.kill returns
    before the process is gone: a step sent at once could still run on the old instance,
    whose sink writer, its table moved away, made the sink's data/ directory again (and
    the test's move back then went into it)."""
    from ray._private import state

    def restarts() -> int:
        return int(state.actors(actor_id=actor._actor_id.hex()).get("NumRestarts", 0))

    before = restarts()
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + 120
    while restarts() == before:  # a condition waited for, not a sleep
        assert time.monotonic() < deadline, "Ray did not restart the killed actor"
        time.sleep(0.05)


def test_streaming_job_is_checked_before_any_actor_starts(
    ray_cluster: Any, warehouse: Path
) -> None:
    """Each of these used to start the actors, which died in their constructors and
    were restarted without end; now start() raises the raylake error on the driver."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    source.write(batch(0, 10))
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)

    def refused(error: type[Exception], match: str, **options: Any) -> None:
        uri = options.pop("uri", source.uri)
        job = StreamingJob(uri, double, consumer_id="j", num_shards=2, **options)
        with pytest.raises(error, match=match):
            job.run(until_snapshot=1)
        assert job.actors == []

    refused(TableNotFoundError, "no-sink", sink_uri=str(warehouse / "no-sink"))
    refused(TableNotFoundError, "no-src", uri=str(warehouse / "no-src"), sink_uri=sink.uri)
    refused(UnknownColumnError, "'nope'", sink_uri=sink.uri, columns=["id", "nope"])
    refused(UnknownColumnError, "'nope'", sink_uri=sink.uri, filter="nope > 1")
    with pytest.raises(StreamError, match="start"):  # refused as early as the job is made
        StreamingJob(source.uri, double, consumer_id="j", sink_uri=sink.uri, start="soon")  # type: ignore[arg-type]
    text_v = pa.schema([("id", pa.int64()), ("v", pa.string())])
    refused(SchemaMismatchError, "'v' has type string", sink_uri=sink.uri, output_schema=text_v)
    refused(SchemaMismatchError, r"missing column\(s\) \['v'\]", sink_uri=sink.uri,
            output_schema=pa.schema([("id", pa.int64())]))  # fmt: skip
    refused(StreamError, "sink_uri", output_schema=SCHEMA)
    text_v_and_w = text_v.append(pa.field("w", pa.string()))  # merge: 'w' new, 'v' refused
    refused(SchemaMismatchError, "'v' has type string", sink_uri=sink.uri,
            output_schema=text_v_and_w, schema_mode="merge")  # fmt: skip
    assert source.consumers() == [] and sink.snapshots() == []
    assert raylake.open_table(sink.uri).schema.names == ["id", "v"]

    job = StreamingJob(source.uri, double, consumer_id="j", sink_uri=sink.uri, output_schema=SCHEMA)
    with job:
        job.run(until_snapshot=1)
    assert sink.count() == 10


def test_streaming_job_refuses_consumers_it_cannot_resume(
    ray_cluster: Any, warehouse: Path
) -> None:
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    source.write(batch(0, 40))
    with StreamingJob(source.uri, double, consumer_id="j", num_shards=2, sink_uri=sink.uri) as job:
        job.run(until_snapshot=1)
    before = sink.latest_snapshot()
    # Three shards beside the two consumers of two shards would process snapshot 1 again.
    job = StreamingJob(source.uri, double, consumer_id="j", num_shards=3, sink_uri=sink.uri)
    with pytest.raises(ConsumerError, match=r"j\.shard-0-of-2, j\.shard-1-of-2"):
        job.start()
    assert job.actors == [] and sink.latest_snapshot() == before
    assert {c.consumer_id for c in source.consumers()} == {"j.shard-0-of-2", "j.shard-1-of-2"}

    for c in range(1, 4):
        source.write(batch(c, 10))
    for shard in range(2):
        source.delete_consumer(f"j.shard-{shard}-of-2")
    source.expire_snapshots(retain_last=1)
    ConsumerManager(source.file_io).reset("k.shard-0-of-1", 2)  # behind the earliest, 4
    job = StreamingJob(source.uri, double, consumer_id="k", sink_uri=sink.uri)
    with pytest.raises(StreamPositionExpiredError, match=r"'k\.shard-0-of-1' needs snapshot 2"):
        job.start()
    assert job.actors == [] and sink.latest_snapshot() == before


def bad_output(table: pa.Table) -> Any:
    return [1, 2]


def test_streaming_job_function_output_checked(ray_cluster: Any, warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "s"), SCHEMA)
    tbl.write(batch(0, 10))
    job = StreamingJob(tbl.uri, bad_output, consumer_id="j", sink_uri=sink.uri)
    with job, pytest.raises(ray.exceptions.RayTaskError, match="must return a pyarrow Table"):
        job.step()
    assert sink.snapshots() == [] and tbl.consumer("j.shard-0-of-1").next_snapshot_id == 1


@pytest.mark.slow
def test_killed_shards_lose_and_repeat_nothing(ray_cluster: Any, warehouse: Path) -> None:
    """Shard actors are killed at random while another process commits: every source
    row reaches the sink exactly once."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA, buckets=1)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    commits, rows = 30, 40
    child = start(source.uri, commits, rows, 0.1)
    job = StreamingJob(
        source.uri, double, consumer_id="faulty", num_shards=3, sink_uri=sink.uri,
        poll_interval=0.01,
    ).start()  # fmt: skip
    rng = random.Random(7)
    kills = 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            refs = [a.step.remote() for a in job.actors]
            if rng.random() < 0.5:  # kill one shard while (or after) it works
                time.sleep(rng.uniform(0, 0.05))
                ray.kill(rng.choice(job.actors), no_restart=False)
                kills += 1
            statuses = ray.get(refs)
            done = child.poll() is not None
            if done and all(s.next_snapshot_id > commits for s in statuses):
                break
    finally:
        job.stop()
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    ids = Counter(sink.to_arrow().column("id").to_pylist())
    assert set(ids) == set(range(commits * rows))
    assert set(ids.values()) == {1}, "no row was committed twice"
    assert kills >= 3


def test_row_kind_reaches_a_pk_sink(ray_cluster: Any, warehouse: Path) -> None:
    source = raylake.create_table(
        str(warehouse / "src"), SCHEMA, primary_key=["id"], options={"changelog-producer": "lookup"}
    )
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA, primary_key=["id"])
    source.write(batch(0, 20))
    source.delete(pa.table({"id": [1, 2, 3]}))
    with StreamingJob(source.uri, lambda t: t, consumer_id="copy", sink_uri=sink.uri,
                      include_row_kind=True) as job:  # fmt: skip
        job.run(until_snapshot=2)
    assert ROW_KIND not in sink.to_arrow().column_names
    assert sink.to_arrow().sort_by("id").equals(source.to_arrow().sort_by("id"))


def test_job_spec_carries_no_secrets() -> None:
    options = {
        "key": "AKIAEXAMPLE",
        "secret": "s3cr3t-value",
        "client_kwargs": {"region_name": "x"},
    }
    job = StreamingJob("s3://bucket/t", double, consumer_id="j", storage_options=options)
    shipped = ray.cloudpickle.dumps((job.spec, job.actor_options))
    assert b"s3cr3t-value" not in shipped and b"AKIAEXAMPLE" not in shipped
    assert job.spec.storage_options is not None
    assert job.spec.storage_options.public == {"client_kwargs": {"region_name": "x"}}
    assert job.spec.storage_options.resolve(job.spec.uri)["secret"] == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(job.spec) + repr(job.spec.storage_options)


def test_a_refresh_starts_a_dataset_of_its_own(ray_cluster: Any, warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    stream = read_lake_stream(
        tbl.uri, consumer_id="mb", start="latest-new", poll_interval=0.01,
        max_snapshots_per_dataset=5,
    )  # fmt: skip
    tbl.write(batch(0, 10))
    tbl.write(batch(1, 10))
    tbl.write(batch(2, 10), mode="overwrite")
    tbl.write(batch(3, 10))
    datasets = stream.datasets(timeout=0)
    assert next(datasets).count() == 20
    assert [p.snapshot_id for p in stream.last_plans] == [1, 2]
    stream.checkpoint()  # up to 2: the refresh read ahead is not part of it
    assert tbl.consumer("mb").next_snapshot_id == 3
    assert sorted(next(datasets).to_pandas()["id"]) == list(range(20, 30))  # the new state
    assert [p.is_refresh for p in stream.last_plans] == [True]
    assert sorted(next(datasets).to_pandas()["id"]) == list(range(30, 40))


def test_a_plan_under_another_schema_starts_a_dataset_of_its_own(
    ray_cluster: Any, warehouse: Path
) -> None:
    """A micro-batch read every plan under its first plan's schema: the column a later
    snapshot added was dropped, and a renamed one kept its old name."""
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64())])
    tbl = raylake.create_table(str(warehouse / "t"), schema)
    tbl.write(pa.table({"id": [1], "x": [10]}))
    stream = read_lake_stream(
        tbl.uri, start="earliest", catch_up_after=None, max_snapshots_per_dataset=8
    )  # opened under the first schema
    tbl.update_schema().add_column("y", pa.string()).commit()
    tbl = tbl.refresh()
    tbl.write(pa.table({"id": [2], "x": [20], "y": ["b"]}))
    tbl.write(pa.table({"id": [3], "x": [30], "y": ["c"]}))
    tbl.update_schema().rename_column("x", "z").commit()
    tbl.refresh().write(pa.table({"id": [4], "z": [40], "y": ["d"]}))
    rows, spans = [], []
    for ds in stream.datasets(timeout=0):
        rows += sorted(ds.take_all(), key=lambda row: row["id"])
        spans.append([p.snapshot_id for p in stream.last_plans])
    assert spans == [[1], [2, 3], [4]]
    assert rows == [
        {"id": 1, "x": 10},
        {"id": 2, "x": 20, "y": "b"},
        {"id": 3, "x": 30, "y": "c"},
        {"id": 4, "z": 40, "y": "d"},
    ]


def test_a_failed_poll_for_more_loses_no_plan(ray_cluster: Any, warehouse: Path) -> None:
    """The plans a micro-batch held when a poll for more failed open the next call's
    dataset: the reader is past them, so dropping them skipped their rows for good."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for c in range(4):
        tbl.write(batch(c, 10))
    stream = read_lake_stream(
        tbl.uri, consumer_id="mb", start="earliest", max_snapshots_per_dataset=3, prefetch=False
    )
    step, failures = stream.reader.planner.step, [OSError("the store hiccupped")]

    def flaky_step(snap: Any) -> Any:
        if snap.id == 3 and failures:
            raise failures.pop()
        return step(snap)

    stream.reader.planner.step = flaky_step  # type: ignore[method-assign]
    with pytest.raises(OSError, match="hiccupped"):
        next(stream.datasets(timeout=0))
    assert stream.checkpoint().next_snapshot_id == 1  # not past the plans it carries
    ids = [sorted(ds.to_pandas()["id"]) for ds in stream.datasets(timeout=0)]
    assert [p.snapshot_id for p in stream.last_plans] == [4]
    assert ids == [list(range(30)), list(range(30, 40))]


def test_a_merge_mode_sink_follows_its_evolving_source(ray_cluster: Any, warehouse: Path) -> None:
    """Issue 18: after the source gains a column, both shards add it to the sink."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA, primary_key=["id"], buckets=4)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA, primary_key=["id"], buckets=2)
    source.write(batch(0, 40))
    job = StreamingJob(
        source.uri, lambda t: t, consumer_id="copy", num_shards=2, sink_uri=sink.uri,
        schema_mode="merge",
    )  # fmt: skip
    with job:
        job.run(until_snapshot=1)
        with source.update_schema() as u:
            u.add_column("note", pa.string())
        source.write(pa.table({"id": [1, 50], "v": [7, 8], "note": ["a", "b"]}))
        job.run(until_snapshot=2)
    assert sink.refresh().schema.names == ["id", "v", "note"]
    assert sink.to_arrow().sort_by("id").equals(source.to_arrow().sort_by("id"))
