"""The marker a Ray Data or Spark job writes into a table found with no snapshot
(catalog.open_or_join_table) on an S3 store that fails requests, some after carrying
them out: one marker when the job goes on, none when it fails before its tasks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import StorageRetriesExhaustedError
from raylake.table.catalog import open_or_join_table
from raylake.testing.faults import FaultPlan, FaultRule
from raylake.testing.s3server import LocalS3Server

SCHEMA = pa.schema([("id", pa.int64())])
MARKER_PUT = {"operation": "PUT", "path": r"-writing\."}


@pytest.fixture
def faulty(s3_server: LocalS3Server) -> Iterator[LocalS3Server]:
    yield s3_server
    s3_server.set_faults(None)


def _new_table(faulty: LocalS3Server, options: dict[str, Any]) -> tuple[str, str]:
    bucket = faulty.create_bucket()
    raylake.create_table(f"s3://{bucket}/t", SCHEMA, storage_options=options)
    return bucket, f"s3://{bucket}/t"


def _data_keys(faulty: LocalS3Server, bucket: str) -> list[str]:
    listed = faulty.client().list_objects_v2(Bucket=bucket, Prefix="t/data/")
    return [obj["Key"] for obj in listed.get("Contents", [])]


@pytest.mark.parametrize("kind", ["internal", "slowdown", "reset", "lost", "lost_reset"])
def test_a_marker_written_through_transient_faults_is_there_once(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]], kind: Any
) -> None:
    options = retrying(4)
    bucket, uri = _new_table(faulty, options)
    faulty.set_faults(FaultPlan((FaultRule(kind, times=2, **MARKER_PUT),)))
    _, created, marker = open_or_join_table(
        uri, SCHEMA, job_prefix="ray-1", storage_options=options
    )
    faulty.set_faults(None)
    assert not created
    assert _data_keys(faulty, bucket) == [f"t/{marker}"]


@pytest.mark.parametrize("kind", ["internal", "lost"])
def test_a_marker_whose_write_keeps_failing_fails_the_job_and_is_not_left(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]], kind: Any
) -> None:
    """``lost``: carried out on every try, answered with an error (was: the marker
    stayed, keeping the empty table from being dropped by its creator's failure)."""
    options = retrying(2)
    bucket, uri = _new_table(faulty, options)
    faulty.set_faults(FaultPlan((FaultRule(kind, **MARKER_PUT),)))
    with pytest.raises(StorageRetriesExhaustedError, match="-writing"):
        open_or_join_table(uri, SCHEMA, job_prefix="ray-1", storage_options=options)
    faulty.set_faults(None)
    assert _data_keys(faulty, bucket) == []


def test_a_marker_is_not_left_when_the_check_after_it_fails(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    """The marker is written; every read after it fails (was: the marker stayed)."""
    options = retrying(2)
    bucket, uri = _new_table(faulty, options)
    written = FaultRule("slow", delay_s=0.0, **MARKER_PUT)  # carried out, answered
    reads = tuple(FaultRule("internal", operation=op, once_fired=0) for op in ("GET", "HEAD"))
    faulty.set_faults(FaultPlan((written, *reads)))
    with pytest.raises(StorageRetriesExhaustedError):
        open_or_join_table(uri, SCHEMA, job_prefix="ray-1", storage_options=options)
    faulty.set_faults(None)
    assert _data_keys(faulty, bucket) == []
