"""A commit that finds its snapshot id free because expiration deleted it is not
acknowledged: the slow writer's rows would be in no snapshot of the table's history.

The interleaving is forced, not timed: a commit's conflict check runs between its read
of the latest snapshot and its create, and there another writer commits four times and
expiration keeps only the last three (the soak found this with a slow writer under
storage faults)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitLineageUnknownError, CommitStateUnknownError
from raylake.format.snapshot import Snapshot
from raylake.table.commit import CommitRequest, Committer

SCHEMA = pa.schema([("id", pa.int64())])


def _rows(start: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + 10))}, schema=SCHEMA)


def test_a_commit_into_an_expired_snapshot_id_is_not_acknowledged(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))  # snapshot 1
    writer = tbl.new_writer()
    writer.write(_rows(100))
    messages = writer.prepare_commit()
    other = raylake.open_table(str(tmp_path / "t"))

    def meanwhile(latest: Snapshot) -> None:  # the slow writer has read snapshot 1
        for i in range(4):
            other.write(_rows(200 + 10 * i))  # snapshots 2..5
        other.expire_snapshots(retain_last=3)  # deletes snapshots 1 and 2

    request = CommitRequest(messages, base_snapshot_id=0, conflict_check=meanwhile)
    with pytest.raises(CommitLineageUnknownError, match="snapshot 1, was expired") as caught:
        Committer(tbl.file_io, tbl.table_schema).commit(request)
    assert isinstance(caught.value, CommitStateUnknownError)  # callers catch the family
    latest = raylake.open_table(str(tmp_path / "t"))
    assert latest.latest_snapshot().id == 5
    assert sorted(latest.to_arrow().column("id").to_pylist()) == list(range(0, 10)) + list(
        range(200, 240)
    )


def test_a_commit_whose_parent_is_kept_is_acknowledged(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(_rows(0))
    other = raylake.open_table(str(tmp_path / "t"))
    for i in range(4):
        other.write(_rows(200 + 10 * i))
    other.expire_snapshots(retain_last=3)  # snapshots 3, 4, 5 stay
    snap = tbl.write(_rows(100))
    assert snap.id == 6 and snap.parent_id == 5
    assert tbl.count() == 60
