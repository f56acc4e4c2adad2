"""A write into a table it created (``from_pandas``) under store faults: the error the
caller gets is the write's, and a commit that may have landed keeps its table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest

import raylake
from raylake.errors import CommitStateUnknownError, StorageRetriesExhaustedError
from raylake.testing.faults import FaultPlan, FaultRule
from raylake.testing.s3server import LocalS3Server
from raylake.testing.tablecheck import inspect_table

LISTING = r"^/[^/]+/?$"  # a list request names the bucket, the prefix in its query
DF = pd.DataFrame({"id": [1, 2, 3], "v": [4, 5, 6]})


@pytest.fixture
def faulty(s3_server: LocalS3Server) -> Iterator[LocalS3Server]:
    yield s3_server
    s3_server.set_faults(None)  # the server is the session's: leave it without faults


def test_a_commit_that_may_have_landed_is_reported_so_and_its_table_kept(
    faulty: LocalS3Server, storage_options: dict[str, Any], retrying: Callable[..., dict[str, Any]]
) -> None:
    """The snapshot's create is carried out, then every listing fails (the commit's look
    at its own history among them). from_pandas tried to drop the table it had made,
    whose listing failed as well, and that error replaced the CommitStateUnknownError:
    the caller read a plain failure, wrote again, and had every row twice."""
    options = retrying(2)
    uri = f"s3://{faulty.create_bucket()}/t"
    created = FaultRule(
        "slow", delay_s=0.0, operation="PUT", path=r"snapshot/snapshot-1\.json$",
        conditional=True, times=1,
    )  # fmt: skip  # served as it is; the listings fail from then on
    faulty.set_faults(FaultPlan((created, FaultRule("internal", path=LISTING, once_fired=0))))
    with pytest.raises(CommitStateUnknownError, match=r"snapshot-1\.json"):
        raylake.from_pandas(DF, uri, storage_options=options)
    faulty.set_faults(None)
    tbl = raylake.open_table(uri, storage_options=storage_options)
    assert tbl.to_pandas().sort_values("id").reset_index(drop=True).equals(DF)
    assert not inspect_table(uri, storage_options).missing


def test_a_failed_drop_of_the_new_table_is_logged_and_the_writes_error_raised(
    faulty: LocalS3Server,
    storage_options: dict[str, Any],
    retrying: Callable[..., dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The data upload fails on every try, and then the listings too: the error raised
    was the listing's, from the drop of the new table (whose failure is to be logged)."""
    options = retrying(2)
    uri = f"s3://{faulty.create_bucket()}/t"
    failing = (
        FaultRule("internal", operation="PUT", path=r"/t/data/"),
        FaultRule("internal", operation="GET", path=LISTING, once_fired=0),
    )
    faulty.set_faults(FaultPlan(failing))
    with pytest.raises(StorageRetriesExhaustedError, match="after 2 tries") as info:
        raylake.from_pandas(DF, uri, storage_options=options)
    faulty.set_faults(None)
    assert info.value.operation.startswith("write (") and "/t/data/" in info.value.path
    assert "could not remove the table created at" in caplog.text


def test_a_failed_write_into_a_new_table_at_a_buckets_root_keeps_the_bucket(
    faulty: LocalS3Server, storage_options: dict[str, Any], retrying: Callable[..., dict[str, Any]]
) -> None:
    """A table made at the root of a bucket (``s3://bucket``) whose write failed: the drop
    of the new table removed its root recursively, which deleted the user's bucket."""
    bucket = faulty.create_bucket()
    faulty.set_faults(FaultPlan((FaultRule("internal", operation="PUT", path=r"/data/"),)))
    with pytest.raises(StorageRetriesExhaustedError):
        raylake.from_pandas(DF, f"s3://{bucket}", storage_options=retrying(2))
    faulty.set_faults(None)
    client = faulty.client()
    assert bucket in [b["Name"] for b in client.list_buckets()["Buckets"]]
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0  # the table is gone
    tbl = raylake.from_pandas(DF, f"s3://{bucket}", storage_options=storage_options)
    assert tbl.count() == 3


def test_a_failed_write_into_a_new_table_in_a_console_folder_keeps_the_folder(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    """The empty ``t/`` object of a folder made in the AWS console is the user's: the
    drop of a new table made in it removed it with the table's objects."""
    bucket = faulty.create_bucket()
    client = faulty.client()
    client.put_object(Bucket=bucket, Key="t/", Body=b"")
    faulty.set_faults(FaultPlan((FaultRule("internal", operation="PUT", path=r"/t/data/"),)))
    with pytest.raises(StorageRetriesExhaustedError):
        raylake.from_pandas(DF, f"s3://{bucket}/t", storage_options=retrying(2))
    faulty.set_faults(None)
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == ["t/"]


def test_a_failed_write_into_a_new_table_named_like_a_glob_keeps_the_tables_it_matches(
    faulty: LocalS3Server, storage_options: dict[str, Any], retrying: Callable[..., dict[str, Any]]
) -> None:
    """The drop of a new table at ``s3://b/run?`` whose write failed removed its root
    through fsspec's ``rm``, which expands ``?`` as a glob: the whole of the table
    ``s3://b/run1`` beside it was deleted."""
    bucket = faulty.create_bucket()
    raylake.from_pandas(DF, f"s3://{bucket}/run1", storage_options=storage_options)
    client = faulty.client()
    before = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    faulty.set_faults(FaultPlan((FaultRule("internal", operation="PUT", path=r"/data/"),)))
    for name in ("run?", "run*", "run[1]"):
        with pytest.raises(StorageRetriesExhaustedError):
            raylake.from_pandas(DF, f"s3://{bucket}/{name}", storage_options=retrying(2))
    faulty.set_faults(None)
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == before
    assert raylake.open_table(f"s3://{bucket}/run1", storage_options=storage_options).count() == 3
