"""A job shard without Ray: the exactly-once protocol between sink commits and checkpoints."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from committer import SCHEMA, batch

import raylake
from raylake.errors import CommitLineageUnknownError, ConsumerError, TableNotFoundError
from raylake.format.consumer import validate_consumer_id
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.streaming.job import JobSpec, ShardWorker
from raylake.streaming.options import JOB_DEFAULTS


def double(table: pa.Table) -> pa.Table:
    return table.set_column(1, "v", pc.multiply(table.column("v"), 2))


def make(warehouse: Path) -> tuple[raylake.Table, raylake.Table, JobSpec]:
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    return source, sink, JobSpec(source.uri, double, "job", 1, sink_uri=sink.uri)


def commit_the_first_of_two_plans(source: raylake.Table, spec: JobSpec) -> None:
    """Two source snapshots; a shard commits the first one's output to the sink, and
    is killed before its checkpoint."""
    source.write(batch(0, 10))
    source.write(batch(1, 10))
    worker = ShardWorker(spec, 0)
    plan = worker.reader.poll()
    assert plan is not None and plan.snapshot_id == 1
    worker._commit(plan, [double(plan.to_arrow())])
    assert source.consumer("job.shard-0-of-1").next_snapshot_id == 1


def test_restart_between_commit_and_checkpoint_skips_the_committed_plan(warehouse: Path) -> None:
    source, sink, spec = make(warehouse)
    commit_the_first_of_two_plans(source, spec)

    restarted = ShardWorker(spec, 0)
    assert restarted.reader.next_snapshot_id == 2  # found its commit in the sink
    status = restarted.step()
    assert status.plans == 1 and status.rows_in == 10
    ids = Counter(sink.to_arrow().column("id").to_pylist())
    assert set(ids) == set(range(20)) and set(ids.values()) == {1}
    assert [s.commit_identifier for s in sink.snapshots()] == [1, 2]


def test_restart_after_expiration_removed_its_sink_commit_skips_the_committed_plan(
    warehouse: Path,
) -> None:
    """Killed between its sink commit and its checkpoint; then other writers commit to
    the sink and an expiration removes the snapshot of that commit (was: the restart
    searched the sink's history, no longer held it, and wrote the plan's rows again)."""
    source, sink, spec = make(warehouse)
    commit_the_first_of_two_plans(source, spec)  # sink snapshot 1
    other = raylake.open_table(sink.uri)
    for i in range(3):
        other.write(batch(100 + i, 1))
    other.expire_snapshots(retain_last=1)
    assert [s.id for s in raylake.open_table(sink.uri).snapshots()] == [4]

    restarted = ShardWorker(spec, 0)
    assert restarted.reader.next_snapshot_id == 2
    assert restarted.step().plans == 1
    ids = Counter(raylake.open_table(sink.uri).to_arrow().column("id").to_pylist())
    assert {i for i in ids if i < 100} == set(range(20)) and set(ids.values()) == {1}


def test_restart_before_commit_reprocesses_the_plan(warehouse: Path) -> None:
    source, sink, spec = make(warehouse)
    source.write(batch(0, 10))
    worker = ShardWorker(spec, 0)
    assert worker.reader.poll() is not None  # read, then killed before committing
    restarted = ShardWorker(spec, 0)
    assert restarted.step().plans == 1
    assert sorted(sink.to_arrow().column("id").to_pylist()) == list(range(10))


def test_empty_output_moves_on_without_a_sink_commit(warehouse: Path) -> None:
    source, sink, _ = make(warehouse)
    spec = JobSpec(source.uri, lambda t: t.slice(0, 0), "job", 1, sink_uri=sink.uri)
    source.write(batch(0, 10))
    status = ShardWorker(spec, 0).step()
    assert (status.plans, status.rows_in, status.rows_out) == (1, 10, 0)
    assert sink.snapshots() == []
    assert source.consumer("job.shard-0-of-1").next_snapshot_id == 2


def test_a_job_without_sink_checkpoints_after_each_plan(warehouse: Path) -> None:
    source, _, _ = make(warehouse)
    seen: list[int] = []
    spec = JobSpec(source.uri, lambda t: seen.extend(t.column("id").to_pylist()), "side", 1)
    source.write(batch(0, 5))
    source.write(batch(1, 5))
    assert ShardWorker(spec, 0).step().plans == 2
    assert sorted(seen) == list(range(10))
    assert source.consumer("side.shard-0-of-1").next_snapshot_id == 3


def test_a_failed_step_goes_back_to_the_checkpoint(warehouse: Path) -> None:
    source, sink, _ = make(warehouse)
    failures = [True]

    def flaky(table: pa.Table) -> pa.Table:
        if failures.pop() if failures else False:
            raise RuntimeError("transient")
        return table

    spec = JobSpec(source.uri, flaky, "job", 1, sink_uri=sink.uri)
    source.write(batch(0, 10))
    worker = ShardWorker(spec, 0)
    with pytest.raises(RuntimeError, match="transient"):
        worker.step()
    assert worker.reader.next_snapshot_id == 1  # not past the plan that failed
    assert worker.step().plans == 1  # the same actor, called again
    assert sorted(sink.to_arrow().column("id").to_pylist()) == list(range(10))


def test_a_deleted_consumer_starts_over_past_its_earlier_commits(warehouse: Path) -> None:
    """Deleting a job's consumers starts it over (docs/streaming.md): the sink's commits
    under its name from the earlier run are not taken for its own uncheckpointed ones."""
    source, sink, spec = make(warehouse)
    source.write(batch(0, 5))
    source.write(batch(1, 5))
    first = ShardWorker(spec, 0)
    assert first.step().plans == 2
    first.reader.close()
    assert source.delete_consumer("job.shard-0-of-1")
    again = ShardWorker(spec, 0)
    assert again.reader.next_snapshot_id == 1
    assert again.step().plans == 2
    assert Counter(Counter(sink.to_arrow().column("id").to_pylist()).values()) == {2: 10}


class Killed(BaseException):
    """The actor died: nothing after this point ran."""


def _run_once(warehouse: Path) -> tuple[raylake.Table, raylake.Table, JobSpec]:
    """A shard that processed three commits of two rows and stopped."""
    source, sink, spec = make(warehouse)
    for commit in range(3):
        source.write(batch(commit, 2))
    first = ShardWorker(spec, 0)
    assert first.step().plans == 3
    first.reader.close()
    return source, sink, spec


def test_a_shard_killed_before_its_new_consumer_records_the_sink_starts_over(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard whose reader registered its new consumer and whose actor died before the
    consumer recorded the sink snapshot took the earlier run's last sink commit for its
    own after the restart, and skipped every source snapshot up to it."""
    from raylake.streaming.reader import StreamReader

    source, sink, spec = _run_once(warehouse)
    assert source.delete_consumer("job.shard-0-of-1")  # to start over

    def dies(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    with monkeypatch.context() as patched:
        patched.setattr(StreamReader, "notify_checkpoint_complete", dies)
        with pytest.raises(Killed):
            ShardWorker(spec, 0)
    assert source.consumer("job.shard-0-of-1") is not None  # registered, nothing recorded
    again = ShardWorker(spec, 0)
    assert again.reader.next_snapshot_id == 1
    assert again.step().plans == 3
    assert Counter(Counter(sink.to_arrow().column("id").to_pylist()).values()) == {2: 6}


def test_a_deleted_consumer_reset_to_a_snapshot_starts_there(warehouse: Path) -> None:
    """Deleted, then registered again by reset_consumer at the snapshot to start from:
    the shard read nothing, taking the earlier run's last sink commit for its own."""
    source, sink, spec = _run_once(warehouse)
    assert source.delete_consumer("job.shard-0-of-1")  # to start over
    source.reset_consumer("job.shard-0-of-1", 2)
    again = ShardWorker(spec, 0)
    assert again.reader.next_snapshot_id == 2
    assert again.step().plans == 2
    assert Counter(sink.to_arrow().column("id").to_pylist()) == Counter(
        [0, 1, 2, 3, 4, 5, 2, 3, 4, 5]
    )


def test_a_source_created_again_is_read_from_its_start(warehouse: Path) -> None:
    """The old source's consumers went with its directory; the new source's first
    snapshots must not be skipped for the old source's commits in the sink."""
    import shutil

    source, sink, spec = make(warehouse)
    for commit in range(3):
        source.write(batch(commit, 2))
    assert ShardWorker(spec, 0).step().plans == 3
    shutil.rmtree(warehouse / "src")
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    for commit in range(10, 14):
        source.write(batch(commit, 2))
    assert ShardWorker(spec, 0).step().plans == 4
    assert sorted(sink.to_arrow().column("id").to_pylist()) == [*range(6), *range(20, 28)]


def test_a_reset_consumer_reprocesses_from_the_reset(warehouse: Path) -> None:
    """Table.reset_consumer moves a job's shard back: its later commits in the sink
    were checkpointed, so they do not move it forward again."""
    source, sink, spec = _run_once(warehouse)
    sink.write(sink.schema.empty_table(), mode="overwrite")  # emptied, to be made again
    source.reset_consumer("job.shard-0-of-1", 2)
    again = ShardWorker(spec, 0)
    assert again.reader.next_snapshot_id == 2
    assert again.step().plans == 2
    assert sorted(sink.to_arrow().column("id").to_pylist()) == [2, 3, 4, 5]


def test_a_reset_after_a_kill_between_commit_and_checkpoint_reprocesses_from_the_reset(
    warehouse: Path,
) -> None:
    """A shard killed between its commit and its checkpoint, then reset to an earlier
    snapshot (to process again from there): the commit after the checkpoint moved the
    restarted shard past the reset again, and only the snapshots after it were read."""
    source, sink, spec = make(warehouse)
    spec = dataclasses.replace(spec, max_plans_per_step=1)
    for commit in range(3):
        source.write(batch(commit, 10))
    worker = ShardWorker(spec, 0)
    assert worker.step().plans == 1  # snapshot 1, committed and checkpointed

    def dies(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    worker.reader.notify_checkpoint_complete = dies  # type: ignore[method-assign]
    with pytest.raises(Killed):
        worker._step()  # snapshot 2 committed, its checkpoint not made
    worker.reader.close()
    source.reset_consumer("job.shard-0-of-1", 1)  # process everything again
    again = ShardWorker(spec, 0)
    assert again.reader.next_snapshot_id == 1
    while again.step().plans:
        pass
    ids = Counter(sink.to_arrow().column("id").to_pylist())
    assert ids == Counter({**dict.fromkeys(range(20), 2), **dict.fromkeys(range(20, 30), 1)})


def test_a_restart_after_a_kill_between_commit_and_checkpoint_still_moves_past_it(
    warehouse: Path,
) -> None:
    """The commit records where its plans start: a shard killed after it, not reset,
    moves past it (with several plans per commit)."""
    source, sink, spec = make(warehouse)
    spec = dataclasses.replace(spec, max_plans_per_step=2)
    for commit in range(5):
        source.write(batch(commit, 2))
    worker = ShardWorker(spec, 0)
    assert worker.step().plans == 2

    def dies(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    worker.reader.notify_checkpoint_complete = dies  # type: ignore[method-assign]
    with pytest.raises(Killed):
        worker._step()  # snapshots 3 and 4, committed as one, not checkpointed
    worker.reader.close()
    again = ShardWorker(spec, 0)
    assert again.reader.next_snapshot_id == 5
    assert again.step().plans == 1
    assert sorted(sink.to_arrow().column("id").to_pylist()) == list(range(10))
    assert sink.latest_snapshot().properties["stream.from"] == "5"  # type: ignore[union-attr]


def _rows(ids: list[int], v: int) -> pa.Table:
    return pa.table({"id": ids, "v": [v] * len(ids)}, schema=SCHEMA)


def _drain(spec: JobSpec) -> dict[int, int]:
    while ShardWorker(spec, 0).step().plans:
        pass
    out = raylake.open_table(spec.sink_uri).to_arrow()  # type: ignore[arg-type]
    return dict(zip(out.column("id").to_pylist(), out.column("v").to_pylist()))


@pytest.mark.parametrize("replayed", ["an overwrite", "a delete"])
def test_a_reset_shard_replays_one_by_one_up_to_what_its_sink_holds(
    warehouse: Path, replayed: str
) -> None:
    """Reset behind what the sink holds, a shard far enough behind planned one catch-up,
    the net changes from the reset: rows the sink got after it and the source lost since
    stayed in the sink (found by the job model)."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA, primary_key=["id"])
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA, primary_key=["id"])
    stream = JOB_DEFAULTS.replace(catch_up_after=1, include_row_kind=True, on_overwrite="refresh")
    spec = JobSpec(source.uri, double, "job", 1, sink_uri=sink.uri, stream=stream)
    source.write(_rows([0], 1), mode="overwrite")  # 1
    if replayed == "an overwrite":
        source.write(_rows([1], 2), mode="overwrite")  # 2: the sink gets key 1
    else:
        source.delete(pa.table({"id": [0]}))  # 2
        source.write(_rows([1], 3), mode="overwrite")  # 3: the sink gets key 1
    assert _drain(spec) == {1: 2 * (2 if replayed == "an overwrite" else 3)}
    source.reset_consumer("job.shard-0-of-1", 2)
    if replayed == "an overwrite":
        source.write(_rows([0], 3), mode="overwrite")  # key 1 gone again
        expected = {0: 6}
    else:
        source.delete(pa.table({"id": [1]}))
        expected = {}
    assert _drain(spec) == expected


def test_a_refresh_made_again_after_a_reset_is_committed(warehouse: Path) -> None:
    """The sink already holds a refresh under the same identifier from before the reset:
    the committer must not take it for this one (the sink would keep the rows after it
    twice)."""
    source, sink, _ = make(warehouse)
    spec = JobSpec(
        source.uri, double, "job", 1, sink_uri=sink.uri,
        stream=JOB_DEFAULTS.replace(on_overwrite="refresh"),
    )  # fmt: skip
    source.write(batch(0, 2))
    source.write(batch(1, 2), mode="overwrite")
    source.write(batch(2, 2))
    first = ShardWorker(spec, 0)
    assert first.step().plans == 3
    first.reader.close()
    source.reset_consumer("job.shard-0-of-1", 2)  # from the overwrite on, again
    assert ShardWorker(spec, 0).step().plans == 2
    assert sorted(sink.to_arrow().column("id").to_pylist()) == [2, 3, 4, 5]
    assert [s.commit_kind for s in sink.snapshots()][-2:] == ["OVERWRITE", "APPEND"]


def test_a_dropped_source_fails_every_step_and_leaves_nothing_in_its_place(
    warehouse: Path,
) -> None:
    """The shard's reader, opened again after the failed step, registered a new consumer
    where the table had been; later steps then waited on no table without a word."""
    import shutil

    source, _, spec = make(warehouse)
    source.write(batch(0, 2))
    worker = ShardWorker(spec, 0)
    assert worker.step().plans == 1
    shutil.rmtree(warehouse / "src")
    for _ in range(2):
        with pytest.raises(TableNotFoundError):
            worker.step()
    assert not (warehouse / "src").exists()


def test_a_step_whose_rewind_fails_raises_its_own_error_and_rewinds_next(
    warehouse: Path,
) -> None:
    """The store fails while the shard goes back after fn failed: the caller gets fn's
    error, not the store's, and the next step goes back first (not 'reader is closed')."""
    source, sink, _ = make(warehouse)
    failures = [RuntimeError("fn failed")]

    def flaky(table: pa.Table) -> pa.Table:
        if failures:
            raise failures.pop()
        return table

    spec = JobSpec(source.uri, flaky, "job", 1, sink_uri=sink.uri)
    source.write(batch(0, 10))
    worker = ShardWorker(spec, 0)
    stream, store_failures = worker.source.stream, [OSError("the store hiccupped")]

    def flaky_stream(**kwargs: Any) -> Any:
        if store_failures:
            raise store_failures.pop()
        return stream(**kwargs)

    worker.source.stream = flaky_stream  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="fn failed"):
        worker.step()
    assert worker.step().plans == 1
    assert sorted(sink.to_arrow().column("id").to_pylist()) == list(range(10))


def test_relative_paths_are_the_drivers(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shard actors run in working directories of their own."""
    pytest.importorskip("ray")
    monkeypatch.chdir(warehouse)
    job = raylake.StreamingJob("src", double, consumer_id="c", sink_uri="out/dst")
    assert (job.spec.uri, job.spec.sink_uri) == (f"{warehouse}/src", f"{warehouse}/out/dst")


def test_consumer_ids_are_refused_when_the_job_is_made(warehouse: Path) -> None:
    """On the driver, before start(): a shard actor with an unusable consumer id would
    die in its constructor and be restarted without end (issue 15)."""
    pytest.importorskip("ray")
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    with pytest.raises(ConsumerError, match=r"valid consumer id.*got str 'a/b'"):
        raylake.StreamingJob(source.uri, double, consumer_id="a/b")
    long = "c" * 120
    assert validate_consumer_id(long) == long  # a valid id alone, too long with a shard suffix
    with pytest.raises(
        ConsumerError, match=r"shard suffix '\.shard-1-of-2' \(at most 115 characters here\)"
    ):
        raylake.StreamingJob(source.uri, double, consumer_id=long, num_shards=2)
    assert source.consumers() == []


def _last_digit(ids: pa.ChunkedArray) -> pa.ChunkedArray:
    """``ids % 10`` for ids >= 0 (pyarrow's ``modulo`` is newer than raylake's lowest pyarrow)."""
    return pc.subtract(ids, pc.multiply(pc.divide(ids, 10), 10))


def test_a_primary_key_sink_is_compacted_by_the_policy(warehouse: Path) -> None:
    """Each sink commit goes through the table, so its compaction policy applies."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(
        str(warehouse / "dst"),
        SCHEMA,
        primary_key=["id"],
        buckets=1,
        options={"compaction.max-overlapping-files": 2},
    )
    same_keys = JobSpec(
        source.uri,
        lambda t: t.set_column(0, "id", _last_digit(t["id"])),
        "job",
        1,
        sink_uri=sink.uri,
    )
    worker = ShardWorker(same_keys, 0)
    for commit in range(3):
        source.write(batch(commit, 10))
        assert worker.step().plans == 1
    kinds = [s.commit_kind for s in sink.snapshots()]
    assert kinds == ["APPEND", "APPEND", "APPEND", "COMPACT"]
    assert max(n for split in sink.scan().plan() for n in split.sections) == 1
    assert sorted(sink.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "v": 2} for i in range(10)
    ]


def test_a_sink_compacted_between_steps_keeps_every_row_once(warehouse: Path) -> None:
    source, sink, spec = make(warehouse)
    worker = ShardWorker(spec, 0)
    for i in range(3):
        source.write(batch(i, 10))
        assert worker.step().plans == 1
    compacted = sink.compact()
    assert compacted is not None and compacted.commit_kind == "COMPACT"
    source.write(batch(3, 10))
    assert worker.step().plans == 1
    restarted = ShardWorker(spec, 0)  # finds its last commit below the compaction
    source.write(batch(4, 10))
    assert restarted.step().plans == 1
    ids = Counter(sink.to_arrow().column("id").to_pylist())
    assert set(ids) == set(range(50)) and set(ids.values()) == {1}


@pytest.mark.parametrize("schema_mode", ["strict", "merge"])
def test_a_dataframe_output_is_written_as_table_write_takes_it(
    warehouse: Path, schema_mode: str
) -> None:
    """The job converted a DataFrame with pyarrow's own from_pandas: a groupby's key (the
    named index) was dropped, so the sink refused the output (strict) or took nulls for
    it (merge), where Table.write of the same frame keeps it; a column merged in took
    pandas' unit, not the nanoseconds from_pandas gives."""
    import pandas as pd

    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(
        str(warehouse / "dst"), pa.schema([("v", pa.int64()), ("id", pa.int64())])
    )
    source.write(batch(0, 4))

    def totals(rows: pa.Table) -> Any:
        frame = rows.to_pandas().groupby("v")[["id"]].sum()
        if schema_mode == "merge":
            frame["at"] = pd.Series(pd.to_datetime(["2024-01-01"] * len(frame)), index=frame.index)
            frame["at"] = frame["at"].astype("datetime64[us]")
        return frame

    spec = JobSpec(source.uri, totals, "job", 1, sink_uri=sink.uri, schema_mode=schema_mode)
    ShardWorker(spec, 0).step()
    expected = totals(source.to_arrow()).reset_index()
    got = raylake.open_table(sink.uri).to_pandas().sort_values("v").reset_index(drop=True)
    assert got[["v", "id"]].to_dict("list") == expected[["v", "id"]].to_dict("list")
    if schema_mode == "merge":
        assert raylake.open_table(sink.uri).schema.field("at").type == pa.timestamp("ns")


def test_a_sink_commit_into_an_expired_snapshot_id_is_processed_again(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shard's sink commit is slow: another writer commits four times to the sink
    and an expiration frees the id it creates, so it raises CommitLineageUnknownError and
    leaves a stray snapshot under the shard's commit user (was: the shard's rewind took
    the stray for its commit and moved past the plan, whose rows the sink never got)."""
    source, sink, spec = make(warehouse)
    sink.write(batch(100, 1))  # sink snapshot 1, another writer's
    source.write(batch(0, 10))
    worker = ShardWorker(spec, 0)
    create = SnapshotManager.try_create
    slowed: list[int] = []

    def slow(
        self: SnapshotManager, snap: Snapshot, *, then: Callable[[], None] | None = None
    ) -> bool:
        if snap.commit_user == worker.commit_user and not slowed:
            slowed.append(snap.id)
            other = raylake.open_table(sink.uri)
            for i in range(4):
                other.write(batch(200 + i, 1))  # sink snapshots 2..5
            other.expire_snapshots(retain_last=3)  # deletes 1 and 2
        return create(self, snap, then=then)

    monkeypatch.setattr(SnapshotManager, "try_create", slow)
    with pytest.raises(CommitLineageUnknownError):
        worker.step()
    assert slowed == [2] and sink.snapshot(2).commit_user == worker.commit_user  # the stray
    assert worker.reader.next_snapshot_id == 1
    assert worker.step().plans == 1
    ids = Counter(raylake.open_table(sink.uri).to_arrow().column("id").to_pylist())
    assert {i for i in ids if i < 10} == set(range(10)) and set(ids.values()) == {1}
