"""Maintenance on an S3 store that fails requests it may have carried out."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import ConsumerError, StorageRetriesExhaustedError
from raylake.testing.faults import FaultPlan, FaultRule
from raylake.testing.s3server import LocalS3Server
from raylake.testing.tablecheck import inspect_table


@pytest.fixture
def faulty(s3_server: LocalS3Server) -> Iterator[LocalS3Server]:
    yield s3_server
    s3_server.set_faults(None)


def _three_snapshots(faulty: LocalS3Server, options: dict[str, Any]) -> tuple[str, raylake.Table]:
    bucket = faulty.create_bucket()
    tbl = raylake.create_table(
        f"s3://{bucket}/t", pa.schema([("id", pa.int64())]), storage_options=options
    )
    for i in range(3):
        tbl.write(pa.table({"id": [i]}))
    return bucket, tbl


def test_an_expiry_marker_whose_write_failed_is_not_left_behind(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    # The marker's write was carried out and answered 500 on every try: the expiration
    # failed, and the marker it left made every consumer registration wait 10 minutes.
    bucket, tbl = _three_snapshots(faulty, retrying(2))
    faulty.set_faults(FaultPlan((FaultRule("lost", operation="PUT", path="/EXPIRING-"),)))
    with pytest.raises(StorageRetriesExhaustedError, match="EXPIRING-"):
        tbl.expire_snapshots(retain_last=1)
    faulty.set_faults(None)
    listed = faulty.client().list_objects_v2(Bucket=bucket, Prefix="t/consumer/")
    assert listed.get("Contents", []) == []
    assert [s.id for s in tbl.snapshots()] == [1, 2, 3]


def test_an_expiry_marker_whose_delete_failed_is_reported_and_removed_by_the_next(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    # The marker's delete failed on every try: the expiration returned as if all was
    # well, and the marker made every consumer registration wait 10 minutes.
    bucket, tbl = _three_snapshots(faulty, retrying(2))
    faulty.set_faults(FaultPlan((FaultRule("internal", operation="DELETE", path="/EXPIRING-"),)))
    with pytest.raises(
        ConsumerError, match="expiration is done, but its marker consumer/EXPIRING-"
    ):
        tbl.expire_snapshots(retain_last=1)
    faulty.set_faults(None)
    assert [s.id for s in tbl.snapshots()] == [3]

    def markers() -> list[str]:
        listed = faulty.client().list_objects_v2(Bucket=bucket, Prefix="t/consumer/")
        return [o["Key"] for o in listed.get("Contents", [])]

    assert len(markers()) == 1
    # its delete fails again: the next expiration names both markers and forgets neither
    # (was: the first was dropped from the list, and stayed on the store unreported)
    tbl.write(pa.table({"id": [3]}))
    faulty.set_faults(FaultPlan((FaultRule("internal", operation="DELETE", path="/EXPIRING-"),)))
    with pytest.raises(ConsumerError, match=r"the markers consumer/EXPIRING-\w+, consumer/EXP"):
        tbl.expire_snapshots(retain_last=1)
    faulty.set_faults(None)
    assert len(markers()) == 2
    assert tbl.expire_snapshots(retain_last=1).expired_snapshot_ids == ()
    assert markers() == []
    tbl.reset_consumer("job", 4)  # registers at once: no marker to wait for


def test_files_an_expiration_stopped_by_faults_left_are_orphans(
    faulty: LocalS3Server, storage_options: dict[str, Any], retrying: Callable[..., dict[str, Any]]
) -> None:
    # The deletes of the expired snapshots' data files kept failing after their snapshot
    # files were gone: the overwrite's manifest, live still, names them in DELETE entries,
    # and remove_orphan_files kept them for good (no expiration was left to remove them).
    options = retrying(2)
    uri = f"s3://{faulty.create_bucket()}/t"
    tbl = raylake.create_table(uri, pa.schema([("id", pa.int64())]), storage_options=options)
    for i in range(4):
        tbl.write(pa.table({"id": [i]}), mode="overwrite" if i == 2 else "append")
    faulty.set_faults(FaultPlan((FaultRule("internal", operation="DELETE", path="/data/"),)))
    with pytest.raises(StorageRetriesExhaustedError, match="delete of"):
        tbl.expire_snapshots(retain_last=1)
    faulty.set_faults(None)
    left = inspect_table(uri, storage_options)
    assert left.snapshot_ids == [4] and len(left.unreferenced) == 2 and not left.missing
    removed = tbl.remove_orphan_files(older_than=timedelta(0))
    assert sorted(removed.paths) == sorted(left.unreferenced)
    after = inspect_table(uri, storage_options)
    assert not after.unreferenced and not after.missing
    assert sorted(tbl.to_arrow().column("id").to_pylist()) == [2, 3]
