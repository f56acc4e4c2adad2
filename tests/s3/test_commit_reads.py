"""The reads a commit makes besides its writes, on S3 (where they run in threads beside
the commit's own requests): the existence checks of the messages' files, and the read
of the parent snapshot beside the LATEST hint's write (docs/format.md 6.6)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitFailedError, CommitLineageUnknownError
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.table.commit import CommitRequest, Committer
from raylake.testing.s3server import LocalS3Server

SCHEMA = pa.schema([("id", pa.int64())])


def _ids(start: int, n: int = 10) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _table(server: LocalS3Server, options: dict[str, Any]) -> raylake.Table:
    uri = f"s3://{server.create_bucket()}/t"
    return raylake.create_table(uri, SCHEMA, storage_options=options)


def test_messages_with_a_gone_file_among_many_are_refused(
    s3_server: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    uri = f"s3://{s3_server.create_bucket()}/t"
    options = {"write.row-group-rows": "10", "write.target-file-size": "1"}  # a file per 10
    tbl = raylake.create_table(uri, SCHEMA, options=options, storage_options=storage_options)
    tbl.write(_ids(0))
    writer = tbl.new_writer()
    writer.write(_ids(100, 400))
    messages = writer.prepare_commit()
    files = [f.path for m in messages for f in m.new_files]
    assert len(files) == 40  # more than the checks in flight at once
    tbl.file_io.delete(files[len(files) // 2])
    with pytest.raises(CommitFailedError, match="1 data file"):
        tbl.commit(messages)
    assert [s.id for s in tbl.snapshots()] == [1]
    assert len(tbl.file_io.list_names("manifest")) == 1  # snapshot 1's; the attempt's is gone
    assert all(tbl.file_io.exists(f) for f in files if f != files[len(files) // 2])


def test_the_hint_is_written_beside_the_parent_read(
    s3_server: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    tbl = _table(s3_server, storage_options)
    for i in range(3):
        snap = tbl.write(_ids(10 * i))
        assert snap is not None
        assert SnapshotManager(tbl.file_io).read_hint() == snap.id
    assert tbl.count() == 30


def test_a_commit_into_an_expired_snapshot_id_is_not_acknowledged_on_s3(
    s3_server: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    tbl = _table(s3_server, storage_options)
    tbl.write(_ids(0))  # snapshot 1
    writer = tbl.new_writer()
    writer.write(_ids(100))
    other = raylake.open_table(tbl.uri, storage_options=storage_options)

    def meanwhile(latest: Snapshot) -> None:
        for i in range(4):
            other.write(_ids(200 + 10 * i))  # snapshots 2..5
        other.expire_snapshots(retain_last=3)  # deletes snapshots 1 and 2

    request = CommitRequest(writer.prepare_commit(), base_snapshot_id=0, conflict_check=meanwhile)
    with pytest.raises(CommitLineageUnknownError, match="snapshot 1, was expired"):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert SnapshotManager(tbl.file_io).read_hint() == 5  # the hint was written, not ahead
    assert raylake.open_table(tbl.uri, storage_options=storage_options).count() == 50


def test_a_stray_on_a_snapshot_made_again_is_not_acknowledged_on_s3(
    s3_server: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    """The slow writer read snapshot 1; others commit 2..4 and expiration keeps 4 only;
    then a retry inside the S3 client of snapshot 1's create lands late and makes it
    again, with the same bytes. The slow writer's create of 2 finds the name free (was:
    its parent check read the snapshot 1 made again, holding the commit it was made on,
    and acknowledged it, its rows in no snapshot of the table; on S3 the listing decides,
    docs/format.md 6.6)."""
    tbl = _table(s3_server, storage_options)
    tbl.write(_ids(0))  # snapshot 1
    first = tbl.file_io.read_bytes("snapshot/snapshot-1.json")
    writer = tbl.new_writer()
    writer.write(_ids(100))
    other = raylake.open_table(tbl.uri, storage_options=storage_options)

    def meanwhile(latest: Snapshot) -> None:
        for i in range(3):
            other.write(_ids(200 + 10 * i))  # snapshots 2..4
        other.expire_snapshots(retain_last=1)  # deletes snapshots 1..3
        assert tbl.file_io.create_if_absent("snapshot/snapshot-1.json", first)  # made again

    request = CommitRequest(writer.prepare_commit(), base_snapshot_id=0, conflict_check=meanwhile)
    with pytest.raises(CommitLineageUnknownError):
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert SnapshotManager(tbl.file_io).read_hint() == 4
    reopened = raylake.open_table(tbl.uri, storage_options=storage_options)
    assert reopened.latest_snapshot().id == 4 and reopened.count() == 40  # type: ignore[union-attr]
