"""A create of a snapshot whose answer is lost, and whose file is expired and taken by
a slow writer's stray before the committer reads it back.

The committer reads the file back to learn whether its create landed. Finding another
commit's snapshot there used to mean "another writer won this id": it deleted its
manifest and tried the next id, while the snapshot it had made was in the table's
history (the next commit was made on it) and named that manifest, so every read of the
table failed. CI's faulted S3 run (three writers, an expirer keeping only the latest)
found this. The interleaving is forced here, not timed: the read back waits for the
next commit, the expiration and the stray, and the slow writer waits on an event.
The look that tells such a stray apart must not mistake a busy table for an expiration
(a CI rehearsal of the first fix found that with processes appending at once).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitLineageUnknownError
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.io import FileIO
from raylake.table.commit import CommitRequest, Committer
from raylake.testing.faults import FaultPlan, FaultRule
from raylake.testing.s3server import LocalS3Server
from raylake.testing.tablecheck import inspect_table, rows_of

SCHEMA = pa.schema([("id", pa.int64())])


def _ids(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 10), pa.int64())})


def _table_at_snapshot_1(
    server: LocalS3Server, storage_options: dict[str, Any]
) -> tuple[str, raylake.Table]:
    uri = f"s3://{server.create_bucket()}/t"
    tbl = raylake.create_table(uri, SCHEMA, storage_options=storage_options)
    tbl.write(_ids(0))
    return uri, tbl


@pytest.fixture
def faulty(s3_server: LocalS3Server) -> Iterator[LocalS3Server]:
    yield s3_server
    s3_server.set_faults(None)  # the server is the session's: leave it without faults


def test_a_lost_create_whose_snapshot_was_replaced_by_a_stray_is_not_taken_as_lost(
    faulty: LocalS3Server, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, tbl = _table_at_snapshot_1(faulty, storage_options)
    other = raylake.open_table(uri, storage_options=storage_options)

    # The slow writer reads snapshot 1 as the latest, then waits before its create of 2.
    slow = raylake.open_table(uri, storage_options=storage_options)
    writer = slow.new_writer()
    writer.write(_ids(300))
    ready, resume, outcome = threading.Event(), threading.Event(), []

    def wait_before_create() -> None:
        ready.set()
        assert resume.wait(60)

    def slow_commit() -> None:
        request = CommitRequest(writer.prepare_commit(), before_create=wait_before_create)
        try:
            Committer(slow.file_io, slow.table_schema).commit(request)
        except CommitLineageUnknownError as exc:  # its create made a stray: not acknowledged
            outcome.append(exc)

    thread = threading.Thread(target=slow_commit)
    thread.start()
    assert ready.wait(60)

    read_back = FileIO._read_back

    def meanwhile(self: FileIO, rel: str) -> bytes | object | None:
        if rel == "snapshot/snapshot-2.json" and not resume.is_set():
            other.write(_ids(200))  # snapshot 3, made on this commit's snapshot 2
            other.expire_snapshots(retain_last=1)  # deletes snapshots 1 and 2
            resume.set()  # the slow writer creates snapshot 2 again: a stray
            thread.join(60)
        return read_back(self, rel)

    monkeypatch.setattr(FileIO, "_read_back", meanwhile)
    # This commit's create of snapshot 2 is carried out and answered 500; the client's
    # own retry of it is told "exists".
    lost = FaultRule("lost", operation="PUT", path=r"/snapshot/snapshot-2\.json$", times=1)
    faulty.set_faults(FaultPlan((lost,), seed=1))
    snap = tbl.write(_ids(100))
    faulty.set_faults(None)

    assert resume.is_set() and len(outcome) == 1  # the interleaving happened
    assert snap is not None and snap.id == 2  # (was: deleted its manifest, committed as 4)
    state = inspect_table(uri, storage_options)
    assert state.strays == [2] and not state.missing
    assert rows_of(raylake.open_table(uri, storage_options=storage_options), "id") == [
        *range(0, 10),
        *range(100, 110),
        *range(200, 210),
    ]


def test_a_create_that_lost_its_race_to_a_busy_table_tries_the_next_id(
    faulty: LocalS3Server, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer takes snapshot 2 first; on S3 the committer reads it back, and looks
    at snapshot 3 to tell whether that one may be a stray. Snapshot 3 is absent at that
    look, then two more commits land before the listing: 3 was made since, on the winner
    (was: taken for expired, and the commit reported unknown with nothing wrong)."""
    uri, tbl = _table_at_snapshot_1(faulty, storage_options)
    winner = raylake.open_table(uri, storage_options=storage_options)
    busy = raylake.open_table(uri, storage_options=storage_options)
    writer = tbl.new_writer()
    writer.write(_ids(100))
    looked = SnapshotManager.read_if_present
    after_read_back = threading.Event()

    def first_look_misses(self: SnapshotManager, snapshot_id: int) -> Snapshot | None:
        found = looked(self, snapshot_id)
        if snapshot_id == 3 and after_read_back.is_set():
            after_read_back.clear()
            busy.write(_ids(200))  # snapshots 3 and 4, made just after the look
            busy.write(_ids(300))
        return found

    read_back = FileIO._read_back

    def reading_back(self: FileIO, rel: str) -> bytes | object | None:
        held = read_back(self, rel)
        after_read_back.set()
        return held

    takes_id_2 = threading.Event()

    def winner_first() -> None:
        if not takes_id_2.is_set():
            takes_id_2.set()
            winner.write(_ids(400))  # snapshot 2, before this commit's create of it

    monkeypatch.setattr(SnapshotManager, "read_if_present", first_look_misses)
    monkeypatch.setattr(FileIO, "_read_back", reading_back)
    request = CommitRequest(writer.prepare_commit(), before_create=winner_first)
    snap = Committer(tbl.file_io, tbl.table_schema).commit(request)

    assert takes_id_2.is_set() and not after_read_back.is_set()  # it happened
    assert snap.id == 5 and snap.parent_id == 4
    assert rows_of(raylake.open_table(uri, storage_options=storage_options), "id") == [
        *range(0, 10),
        *range(100, 110),
        *range(200, 210),
        *range(300, 310),
        *range(400, 410),
    ]
