"""Local files that fail (EIO, ENOSPC, done-but-answer-lost) at each step of a commit.

The table lives at ``faulty://<tmp>``: every request raylake makes goes through a
filesystem that injects the faults of a seeded plan (raylake/testing/localfaults.py).
After each fault the table is checked through plain local files: what the
snapshots name exists, and nothing is left that no snapshot names.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitStateUnknownError, StorageFullError, StorageRetriesExhaustedError
from raylake.table.writer import writing
from raylake.testing import localfaults
from raylake.testing.faults import FaultPlan, FaultRule
from raylake.testing.tablecheck import inspect_table, rows_of

SCHEMA = pa.schema([("id", pa.int64())])
SNAPSHOT = r"snapshot/snapshot-\d+\.json$"
STEPS = {
    "data write": {"operation": "write", "path": r"/data/"},
    "manifest write": {"operation": "write", "path": r"/manifest/"},
    "snapshot create": {"operation": "create", "path": SNAPSHOT},
}
FAST = {"max_attempts": 3, "backoff_s": 0.0}


def _ids(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _faulty_table(tmp_path: Path, plan: FaultPlan) -> tuple[str, raylake.Table]:
    """A table with one commit (ids 0..9), then opened through the plan's faults."""
    localfaults.register()
    local = str(tmp_path / "t")
    raylake.create_table(local, SCHEMA).write(_ids(0, 10))
    options = {"fault_plan": plan.to_json(), "raylake_retry": FAST}
    return local, raylake.open_table(f"faulty://{local}", storage_options=options)


def _fault(kind: str, step: str) -> FaultPlan:
    return FaultPlan((FaultRule(kind, times=1, **STEPS[step]),), seed=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("step", ["manifest write", "snapshot create"])
@pytest.mark.parametrize("kind", ["eio", "lost"])
def test_metadata_faults_are_retried_and_commit_once(tmp_path: Path, step: str, kind: str) -> None:
    plan = _fault(kind, step)
    local, tbl = _faulty_table(tmp_path, plan)
    snap = tbl.write(_ids(10, 10))
    assert localfaults.injector(plan).injected == {kind: 1}
    assert snap is not None and snap.id == 2
    state = inspect_table(local)
    assert state.snapshot_ids == [1, 2] and state.commit_ids[2] == snap.commit_id
    assert not state.missing and not state.unreferenced
    assert rows_of(raylake.open_table(local), "id") == list(range(20))


@pytest.mark.parametrize("kind", ["eio", "lost"])
def test_a_failed_data_file_write_leaves_the_table_and_store_as_they_were(
    tmp_path: Path, kind: str
) -> None:
    # Data files are written as a stream, not retried: the write fails, cleanly.
    plan = _fault(kind, "data write")
    local, tbl = _faulty_table(tmp_path, plan)
    before = inspect_table(local)
    with pytest.raises(OSError, match="injected fault"):
        tbl.write(_ids(10, 10))
    after = inspect_table(local)
    assert after.snapshot_ids == [1] and after.on_store == before.on_store


@pytest.mark.parametrize("step", ["data write", "manifest write"])
def test_a_full_disk_leaves_the_table_as_it_was_and_removes_what_was_written(
    tmp_path: Path, step: str
) -> None:
    plan = _fault("enospc", step)
    local, tbl = _faulty_table(tmp_path, plan)
    before = inspect_table(local)
    with pytest.raises(StorageFullError, match="nothing was committed") as caught:
        tbl.write(_ids(10, 10))
    assert caught.value.uri.endswith("/t") and isinstance(caught.value, OSError)
    after = inspect_table(local)
    assert after.snapshot_ids == [1]
    assert after.on_store == before.on_store  # half-written files removed too
    assert not list((tmp_path / "t").rglob("*.tmp"))
    assert rows_of(raylake.open_table(local), "id") == list(range(10))


def test_an_unknown_commit_outcome_keeps_every_file_it_wrote(tmp_path: Path) -> None:
    # The create of snapshot-2 is carried out and answered with an error, and the
    # snapshot file then cannot be read back: the outcome is unknown. The commit says
    # so, and deletes nothing, since snapshot 2 is in fact visible and names its files.
    plan = FaultPlan(
        (
            FaultRule("lost", operation="create", path=SNAPSHOT, times=1),
            # Once that create is done, every read of the file fails.
            FaultRule("eio", operation="read", path=r"snapshot-2\.json$", once_fired=0),
        )
    )
    local, tbl = _faulty_table(tmp_path, plan)
    with writing(tbl.new_writer()) as writer:
        writer.write(_ids(10, 10))
        messages = writer.prepare_commit()
    with pytest.raises(CommitStateUnknownError, match="may have been committed") as caught:
        tbl.commit(messages)
    assert caught.value.path.endswith("snapshot/snapshot-2.json")
    assert localfaults.injector(plan).injected["eio"] >= FAST["max_attempts"]
    state = inspect_table(local)
    assert state.snapshot_ids == [1, 2]
    assert not state.missing and not state.unreferenced
    assert rows_of(raylake.open_table(local), "id") == list(range(20))


@pytest.mark.parametrize("kind", ["eio", "lost"])
def test_a_schema_change_through_a_faulted_create_happens_once(tmp_path: Path, kind: str) -> None:
    plan = FaultPlan(
        (FaultRule(kind, operation="create", path=r"schema/schema-1\.json$", times=1),)
    )
    local, tbl = _faulty_table(tmp_path, plan)
    with tbl.update_schema() as update:
        update.add_column("score", pa.float64())
    assert localfaults.injector(plan).injected == {kind: 1}
    reopened = raylake.open_table(local)
    assert reopened.schema.names == ["id", "score"]
    assert sorted(p.name for p in (tmp_path / "t" / "schema").iterdir()) == [
        "schema-0.json",
        "schema-1.json",
    ]


@pytest.mark.parametrize("kind", ["eio", "lost"])
def test_a_consumer_checkpoint_through_a_faulted_write_is_kept(tmp_path: Path, kind: str) -> None:
    plan = FaultPlan((FaultRule(kind, operation="write", path=r"consumer/consumer-job", times=2),))
    local, tbl = _faulty_table(tmp_path, plan)
    tbl.write(_ids(10, 10))
    reader = tbl.stream(consumer_id="job", start="earliest", poll_interval=0)
    plans = [reader.poll(), reader.poll()]
    assert [p.snapshot_id for p in plans if p is not None] == [1, 2]
    reader.checkpoint()
    assert localfaults.injector(plan).injected == {kind: 2}
    progress = raylake.open_table(local).consumer("job")
    assert progress is not None and progress.next_snapshot_id == 3


@pytest.mark.parametrize("kind", ["eio", "lost"])
def test_a_data_file_read_is_retried_then_exact(tmp_path: Path, kind: str) -> None:
    # Two failed opens of the data file, then the third try (of 3) reads it.
    plan = FaultPlan((FaultRule(kind, operation="read", path=r"/data/", times=2),), seed=3)
    _local, tbl = _faulty_table(tmp_path, plan)
    assert rows_of(tbl, "id") == list(range(10))
    assert localfaults.injector(plan).injected == {kind: 2}


def test_a_data_file_read_past_the_retry_bound_names_the_read_the_file_and_the_tries(
    tmp_path: Path,
) -> None:
    plan = FaultPlan((FaultRule("eio", operation="read", path=r"/data/"),), seed=3)
    local, tbl = _faulty_table(tmp_path, plan)
    (data_file,) = {f for f in inspect_table(local).on_store if f.startswith("data/")}
    with pytest.raises(StorageRetriesExhaustedError) as caught:
        tbl.to_arrow()
    assert caught.value.operation == "read" and caught.value.attempts == FAST["max_attempts"]
    assert caught.value.path.endswith(data_file)
    assert localfaults.injector(plan).injected == {"eio": FAST["max_attempts"]}


def test_a_failed_listing_under_a_new_location_is_retried_not_taken_for_empty(
    tmp_path: Path,
) -> None:
    """The listing of the user's data/ fails once while from_pandas checks the location:
    fsspec's walk omitted the directory, the location looked empty, the table was made
    in it, and the drop of the table after its failed write deleted the user's file."""
    localfaults.register()
    local = tmp_path / "t"
    (local / "data").mkdir(parents=True)
    (local / "data" / "mine.csv").write_text("the user's")
    plan = FaultPlan(
        (
            FaultRule("eio", operation="list", path=r"/t/data$", times=1),
            FaultRule("eio", operation="write", path=r"/t/data/.+\.parquet$", times=1),
        ),
        seed=11,
    )
    options = {"fault_plan": plan.to_json(), "raylake_retry": FAST}
    with pytest.raises(raylake.TableLocationError, match="already holds data"):
        raylake.from_pandas(pd.DataFrame({"id": [1]}), f"faulty://{local}", storage_options=options)
    assert localfaults.injector(plan).injected == {"eio": 1}
    assert (local / "data" / "mine.csv").read_text() == "the user's"


def test_remove_orphan_files_retries_a_failed_listing_of_a_data_directory(
    tmp_path: Path,
) -> None:
    """One failed listing of data/ made remove_orphan_files return having found nothing
    (fsspec's walk omits what it could not list), its orphans left."""
    localfaults.register()
    local = str(tmp_path / "t")
    tbl = raylake.create_table(local, SCHEMA)
    tbl.write(_ids(0, 10))
    with writing(tbl.new_writer()) as writer:
        writer.write(_ids(10, 10))
        writer.prepare_commit()  # never committed: an orphan
    (orphan,) = inspect_table(local).unreferenced
    plan = FaultPlan((FaultRule("eio", operation="list", path=r"/t/data$", times=1),), seed=12)
    options = {"fault_plan": plan.to_json(), "raylake_retry": FAST}
    faulty = raylake.open_table(f"faulty://{local}", storage_options=options)
    result = faulty.remove_orphan_files(older_than=datetime.now(timezone.utc) + timedelta(days=1))
    assert localfaults.injector(plan).injected == {"eio": 1}
    assert result.paths == (orphan,)
    assert not inspect_table(local).unreferenced


@pytest.mark.parametrize("primary_key", [[], ["id"]])
def test_a_compaction_whose_look_at_the_schema_fails_deletes_what_it_wrote(
    tmp_path: Path, primary_key: list[str]
) -> None:
    """Every listing of schema/ fails once compaction has written its files: its look at
    the newest schema, just before its commit, raised, and left those files behind."""
    localfaults.register()
    local = str(tmp_path / "t")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    tbl = raylake.create_table(
        local, schema, primary_key=primary_key, buckets=1 if primary_key else None
    )
    for start in (0, 5, 3):
        tbl.write(_ids(start, 5).cast(schema))
    before = inspect_table(local)
    plan = FaultPlan(
        (
            FaultRule("slow", delay_s=0.0, operation="write", path=r"/data/.+\.parquet$", times=1),
            FaultRule("eio", operation="list", path=r"/schema$", once_fired=0),
        ),
        seed=13 + len(primary_key),  # an injector of its own (one per plan in a process)
    )
    options = {"fault_plan": plan.to_json(), "raylake_retry": FAST}
    faulty = raylake.open_table(f"faulty://{local}", storage_options=options)
    with pytest.raises(StorageRetriesExhaustedError, match="schema"):
        faulty.compact(full=True)
    after = inspect_table(local)
    assert after.snapshot_ids == before.snapshot_ids
    assert after.on_store == before.on_store  # the compacted files deleted
