"""Faults of the S3 server at each step of a commit, from a seeded plan.

Each test injects one kind of fault at one step (the data file upload, the manifest
upload, the conditional create of the snapshot file, or that create carried out and
its answer lost) and then checks the table and the objects in the bucket: every row
once, one snapshot per commit, no file named by a snapshot missing, no file left
that no snapshot names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitStateUnknownError, StorageRetriesExhaustedError
from raylake.testing.faults import FaultPlan, FaultRule
from raylake.testing.s3server import LocalS3Server
from raylake.testing.tablecheck import inspect_table, rows_of

SCHEMA = pa.schema([("id", pa.int64())])
SNAPSHOT = r"/snapshot/snapshot-\d+\.json$"
STEPS = {
    "data upload": {"path": r"/data/"},
    "manifest upload": {"operation": "PUT", "path": r"/manifest/"},
    "snapshot create": {"operation": "PUT", "path": SNAPSHOT, "conditional": True},
}
KINDS = ("slowdown", "internal", "reset", "lost", "lost_reset")


def _ids(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


@pytest.fixture
def faulty(s3_server: LocalS3Server) -> Iterator[LocalS3Server]:
    yield s3_server
    s3_server.set_faults(None)  # the server is the session's: leave it without faults


def _table(server: LocalS3Server, options: dict[str, Any]) -> tuple[str, raylake.Table]:
    uri = f"s3://{server.create_bucket()}/t"
    tbl = raylake.create_table(uri, SCHEMA, storage_options=options)
    tbl.write(_ids(0, 10))
    return uri, tbl


def _keyed_table(
    server: LocalS3Server, storage_options: dict[str, Any], options: dict[str, str]
) -> tuple[str, raylake.Table]:
    """A primary-key table (id, v) of one bucket with table ``options``."""
    uri = f"s3://{server.create_bucket()}/t"
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    tbl = raylake.create_table(
        uri, schema, primary_key=["id"], buckets=1, storage_options=storage_options,
        options=options,
    )  # fmt: skip
    return uri, tbl


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("step", list(STEPS))
def test_a_fault_at_each_commit_step_is_retried_and_commits_once(
    faulty: LocalS3Server, storage_options: dict[str, Any], step: str, kind: str
) -> None:
    uri, tbl = _table(faulty, storage_options)
    faulty.set_faults(FaultPlan((FaultRule(kind, times=1, **STEPS[step]),), seed=7))
    snap = tbl.write(_ids(10, 10))
    assert faulty.fault_stats()["injected"] == {kind: 1}
    faulty.set_faults(None)
    assert snap is not None and snap.id == 2
    state = inspect_table(uri, storage_options)
    assert state.snapshot_ids == [1, 2]
    assert state.commit_ids[2] == snap.commit_id
    assert not state.missing and not state.unreferenced
    assert rows_of(raylake.open_table(uri, storage_options=storage_options), "id") == list(
        range(20)
    )


def test_a_snapshot_create_done_then_answered_500_is_a_success_not_a_loss(
    faulty: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    # The store carries out the conditional create of snapshot-2.json, answers 500, and
    # the client's retry is told 412 "exists": the commit happened. Taking it for lost
    # once deleted the manifest that snapshot names, and every read then failed.
    uri, tbl = _table(faulty, storage_options)
    rule = FaultRule("lost", operation="PUT", path=SNAPSHOT, conditional=True, times=1)
    faulty.set_faults(FaultPlan((rule,)))
    snap = tbl.write(_ids(10, 5))
    assert faulty.fault_stats()["injected"] == {"lost": 1}
    assert snap is not None and snap.id == 2
    state = inspect_table(uri, storage_options)
    assert state.snapshot_ids == [1, 2]  # one snapshot for one commit, not a second as 3
    assert not state.missing and not state.unreferenced
    assert rows_of(tbl, "id") == list(range(15))


def test_creates_that_keep_failing_leave_the_table_as_it_was(
    faulty: LocalS3Server, storage_options: dict[str, Any], retrying: Callable[..., dict[str, Any]]
) -> None:
    options = retrying(2)
    uri, tbl = _table(faulty, options)
    before = inspect_table(uri, storage_options)
    faulty.set_faults(
        FaultPlan((FaultRule("internal", operation="PUT", path=SNAPSHOT, conditional=True),))
    )
    with pytest.raises(StorageRetriesExhaustedError) as caught:
        tbl.write(_ids(10, 5))
    faulty.set_faults(None)
    error = caught.value
    assert error.operation == "create" and error.attempts == 2
    assert error.path.endswith("snapshot/snapshot-2.json") and "after 2 tries" in str(error)
    after = inspect_table(uri, storage_options)
    assert after.snapshot_ids == [1]
    assert after.on_store == before.on_store  # its data file and manifest were removed
    assert rows_of(tbl, "id") == list(range(10))


def test_orphan_cleanup_sees_the_snapshots_other_processes_committed(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    # s3fs answers listings from a cache it never expires: a process that had listed
    # snapshot/ took the files of a snapshot committed since by another process for
    # orphans, and deleted them (found by bench/soak.py).
    import json
    import subprocess
    import sys
    from datetime import timedelta

    uri = f"s3://{s3_bucket}/t"
    tbl = raylake.create_table(uri, SCHEMA, storage_options=storage_options)
    tbl.write(_ids(0, 10))
    assert [s.id for s in tbl.snapshots()] == [1]  # this process has listed snapshot/
    code = (
        "import json, sys, pyarrow as pa, raylake\n"
        "tbl = raylake.open_table(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
        "tbl.write(pa.table({'id': pa.array(range(10, 20), pa.int64())}))\n"
    )
    subprocess.run([sys.executable, "-c", code, uri, json.dumps(storage_options)], check=True)
    assert [s.id for s in tbl.snapshots()] == [1, 2]
    assert tbl.remove_orphan_files(older_than=timedelta(0)).files_removed == 0
    assert rows_of(tbl, "id") == list(range(20))


# The conditional create of the next snapshot file, served as it is (a marker that arms
# the rule after it), then every read of a snapshot file answered 500.
_CREATED = FaultRule("slow", operation="PUT", path=SNAPSHOT, conditional=True, times=1, delay_s=0)


def test_a_commit_whose_parent_cannot_be_read_after_its_create_deletes_nothing(
    faulty: LocalS3Server, storage_options: dict[str, Any], retrying: Callable[..., dict[str, Any]]
) -> None:
    # The commit checks after its create that it is in the table's history (on S3 by a
    # listing of the snapshots, docs/format.md 6.6). That look failing was taken for a
    # failed commit: the manifest the new, visible snapshot names was deleted, and every
    # read of the table failed.
    options = retrying(2)
    uri, tbl = _table(faulty, options)
    listing = r"^/[^/]+/?$"  # a list request names the bucket, the prefix in its query
    failing = FaultRule("internal", operation="GET", path=listing, once_fired=0)
    faulty.set_faults(FaultPlan((_CREATED, failing), seed=1))
    with pytest.raises(CommitStateUnknownError, match=r"snapshot-2\.json"):
        tbl.write(_ids(10, 5))
    faulty.set_faults(None)
    state = inspect_table(uri, storage_options)
    assert state.snapshot_ids == [1, 2] and not state.missing and not state.unreferenced
    assert rows_of(raylake.open_table(uri, storage_options=options), "id") == list(range(15))


def test_a_committed_upsert_is_acknowledged_when_automatic_compaction_cannot_read(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    # After an upsert's commit, automatic compaction reads the latest snapshot: that read
    # failing made the upsert raise although it was committed, and a retry of it applied
    # it twice (a sum aggregates it twice).
    options = retrying(2)
    uri, tbl = _keyed_table(
        faulty, options, {"compaction.max-overlapping-files": "1", "merge-engine": "aggregation",
                          "fields.v.aggregate-function": "sum"},
    )  # fmt: skip
    tbl.write(pa.table({"id": [1, 2], "v": [1, 1]}))
    # The parent check after the create reads through; compaction's reads fail.
    failing = FaultRule("internal", operation="GET", path=SNAPSHOT, once_fired=0, after=1)
    faulty.set_faults(FaultPlan((_CREATED, failing), seed=1))
    snap = tbl.write(pa.table({"id": [1], "v": [5]}))
    assert faulty.fault_stats()["injected"].get("internal", 0) >= 2
    faulty.set_faults(None)
    assert snap is not None and snap.id == 2
    assert raylake.open_table(uri, storage_options=options).to_arrow().sort_by(
        "id"
    ).to_pydict() == {
        "id": [1, 2],
        "v": [6, 1],
    }


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_a_data_upload_failing_past_the_bound_is_named_and_leaves_nothing(
    faulty: LocalS3Server,
    storage_options: dict[str, Any],
    retrying: Callable[..., dict[str, Any]],
    method: str,
) -> None:
    # pyarrow's client retries each request of an upload (POST starts and completes it,
    # PUT sends a part); after the bound its bare OSError came out of the write.
    options = retrying(2)
    uri, tbl = _table(faulty, options)
    before = inspect_table(uri, storage_options)
    faulty.set_faults(FaultPlan((FaultRule("internal", operation=method, path=r"/data/"),)))
    with pytest.raises(StorageRetriesExhaustedError, match="after 2 tries") as info:
        tbl.write(_ids(10, 5))
    faulty.set_faults(None)
    assert info.value.operation.startswith("write (") and "/t/data/bucket-0/" in info.value.path
    assert inspect_table(uri, storage_options).on_store == before.on_store
    assert rows_of(tbl, "id") == list(range(10))


@pytest.mark.parametrize("kind", ["internal", "slowdown"])
def test_a_data_upload_through_s3fs_failing_past_the_bound_is_named(
    faulty: LocalS3Server,
    storage_options: dict[str, Any],
    retrying: Callable[..., dict[str, Any]],
    kind: str,
) -> None:
    # With an option pyarrow's client cannot honour, data files go up through s3fs, whose
    # requests botocore retries; after the bound s3fs's bare OSError ("[Errno 121] We
    # encountered an internal error") came out of the write, naming no file.
    options = {**retrying(2), "requester_pays": True}
    uri, tbl = _table(faulty, options)
    before = inspect_table(uri, storage_options)
    faulty.set_faults(FaultPlan((FaultRule(kind, operation="PUT", path=r"/data/"),)))  # type: ignore[arg-type]
    with pytest.raises(StorageRetriesExhaustedError, match="after 2 tries") as info:
        tbl.write(_ids(10, 5))
    faulty.set_faults(None)
    assert info.value.operation == "write" and "/t/data/bucket-0/" in info.value.path
    assert inspect_table(uri, storage_options).on_store == before.on_store
    assert rows_of(tbl, "id") == list(range(10))


@pytest.mark.parametrize("step", ["compaction", "lookup changelog"])
def test_data_reads_of_a_write_failing_past_the_bound_are_named(
    faulty: LocalS3Server,
    storage_options: dict[str, Any],
    retrying: Callable[..., dict[str, Any]],
    step: str,
) -> None:
    # Compaction and a commit that looks up the changelog read data files outside a
    # scan: after the bound pyarrow's bare OSError came out of them.
    options = retrying(2)
    uri, tbl = _keyed_table(
        faulty, options, {"changelog-producer": "lookup" if step != "compaction" else "none"}
    )
    for v in (1, 2):
        tbl.write(pa.table({"id": [1, 2], "v": [v, v]}))
    before = inspect_table(uri, storage_options)
    faulty.set_faults(FaultPlan((FaultRule("internal", operation="GET", path=r"/data/"),)))
    with pytest.raises(StorageRetriesExhaustedError, match="after 2 tries") as info:
        if step == "compaction":
            tbl.compact(full=True)
        else:
            tbl.write(pa.table({"id": [1], "v": [3]}))
    faulty.set_faults(None)
    assert info.value.operation.startswith("read (") and "/t/data/bucket-0/" in info.value.path
    assert inspect_table(uri, storage_options).on_store == before.on_store
    assert tbl.to_arrow().sort_by("id").column("v").to_pylist() == [2, 2]
