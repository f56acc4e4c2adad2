"""Data reads whose every try fails: after the retry bound the error names the
operation, the object and the tries (StorageRetriesExhaustedError), not pyarrow's bare
OSError; a missing object is still FileNotFoundError-like, never taken for transient."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import StorageAccessDeniedError, StorageRetriesExhaustedError
from raylake.io.read_errors import retries_exhausted
from raylake.testing.faults import FaultPlan, FaultRule
from raylake.testing.s3server import LocalS3Server

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
DATA_GET = {"operation": "GET", "path": r"/data/bucket-\d+/data-[0-9a-f]+\.parquet$"}


@pytest.fixture
def faulty(s3_server: LocalS3Server) -> Iterator[LocalS3Server]:
    yield s3_server
    s3_server.set_faults(None)


def _rows(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "v": pa.array([1] * n, pa.int64())})


@pytest.mark.parametrize("kind", ["slowdown", "internal", "reset"])
@pytest.mark.parametrize("table_kind", ["append", "primary key"])
def test_a_data_read_failing_past_the_bound_names_the_object_and_the_tries(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]], kind: str, table_kind: str
) -> None:
    options = retrying(3, backoff_s=0.01)
    uri = f"s3://{faulty.create_bucket()}/t"
    pk: dict[str, Any] = {"primary_key": ["id"], "buckets": 1} if table_kind != "append" else {}
    tbl = raylake.create_table(uri, SCHEMA, storage_options=options, **pk)
    tbl.write(_rows(10))
    tbl.write(_rows(5))  # a primary-key table then merges two files
    reader = raylake.open_table(uri, storage_options=options)
    faulty.set_faults(FaultPlan((FaultRule(kind, **DATA_GET),), seed=3))
    with pytest.raises(StorageRetriesExhaustedError) as info:
        reader.to_arrow()
    injected = faulty.fault_stats()["injected"][kind]
    faulty.set_faults(None)
    error = info.value
    assert error.operation.startswith("read") and error.attempts == 3
    assert "/t/data/bucket-0/data-" in error.path and error.path.endswith(".parquet")
    assert "after 3 tries" in str(error) and isinstance(error.__cause__, OSError)
    assert injected >= 3  # pyarrow's client tried the bound, no more per request
    # Reads again once the store answers: an append table holds both writes, a
    # primary-key table the 10 keys.
    assert reader.to_arrow().num_rows == (15 if table_kind == "append" else 10)


def test_a_stream_read_failing_past_the_bound_is_named(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    options = retrying(2, backoff_s=0.01)
    uri = f"s3://{faulty.create_bucket()}/t"
    tbl = raylake.create_table(uri, SCHEMA, storage_options=options)
    tbl.write(_rows(10))
    reader = tbl.stream(start="earliest", poll_interval=0)
    plan = reader.poll()
    assert plan is not None
    faulty.set_faults(FaultPlan((FaultRule("internal", **DATA_GET),), seed=3))
    with pytest.raises(StorageRetriesExhaustedError, match="after 2 tries"):
        plan.to_arrow()
    faulty.set_faults(None)
    assert plan.to_arrow().num_rows == 10  # the same plan reads once the store answers


def test_only_transient_store_errors_are_renamed() -> None:
    slow = OSError(
        "Could not open Parquet input source 'b/t/data/f.parquet': AWS Error SLOW_DOWN "
        "during GetObject operation: Please reduce your request rate."
    )
    named = retries_exhausted(slow, 5)
    assert named is not None and named.path == "b/t/data/f.parquet" and named.attempts == 5
    assert named.operation == "read (GetObject)"
    keyed = OSError(
        "When reading information for key 't/data/f.parquet' in bucket 'b': AWS Error "
        "NETWORK_CONNECTION during HeadObject operation: curlCode: 52"
    )
    assert retries_exhausted(keyed, 2).path == "b/t/data/f.parquet"  # type: ignore[union-attr]
    headless = OSError(
        "When reading information for key 't/f.parquet' in bucket 'b': AWS Error UNKNOWN "
        "(HTTP status 503) during HeadObject operation: No response body."
    )
    assert retries_exhausted(headless, 3).path == "b/t/f.parquet"  # type: ignore[union-attr]
    # A refusal is final, and named as s3fs's PermissionError of a metadata request is:
    # pyarrow's bare OSError came out of data reads with a key the store did not know.
    forbidden = retries_exhausted(OSError(headless.args[0].replace("503", "403")), 3)
    assert isinstance(forbidden, StorageAccessDeniedError) and forbidden.path == "b/t/f.parquet"
    for code in ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH"):
        denied = OSError(f"'b/k': AWS Error {code} during GetObject operation: denied")
        named = retries_exhausted(denied, 5)
        assert isinstance(named, StorageAccessDeniedError) and isinstance(named, PermissionError)
        assert named.operation == "read (GetObject)" and named.path == "b/k"
    assert retries_exhausted(FileNotFoundError("b/k"), 5) is None
    assert retries_exhausted(OSError("Parquet magic bytes not found"), 5) is None


@pytest.mark.parametrize(
    "path", [r"/snapshot/LATEST$", r"/snapshot/snapshot-\d+\.json$", r"/schema/", r"/manifest/"]
)
def test_a_metadata_read_cut_short_once_is_retried(
    faulty: LocalS3Server, storage_options: dict[str, Any], path: str
) -> None:
    # botocore retries a request until its answer's headers are in; the body is read
    # after that, and s3fs's own loop is off: one connection dropped in the middle of a
    # snapshot, manifest or schema failed the read at once, "after 5 tries".
    uri = f"s3://{faulty.create_bucket()}/t"
    tbl = raylake.create_table(uri, SCHEMA, storage_options=storage_options)
    tbl.write(_rows(10))
    tbl.write(_rows(5))
    faulty.set_faults(FaultPlan((FaultRule("truncated", operation="GET", path=path, times=1),)))
    assert raylake.open_table(uri, storage_options=storage_options).to_arrow().num_rows == 15
    assert faulty.fault_stats()["injected"] == {"truncated": 1}


def test_a_metadata_read_cut_short_every_time_names_the_tries(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    options = retrying(3)
    uri = f"s3://{faulty.create_bucket()}/t"
    raylake.create_table(uri, SCHEMA, storage_options=options).write(_rows(10))
    faulty.set_faults(FaultPlan((FaultRule("truncated", operation="GET", path=r"/snapshot/"),)))
    with pytest.raises(StorageRetriesExhaustedError, match="after 3 tries") as info:
        raylake.open_table(uri, storage_options=options).to_arrow()
    assert faulty.fault_stats()["injected"] == {"truncated": 3}
    faulty.set_faults(None)
    assert info.value.operation == "read" and "/t/snapshot/" in info.value.path


def test_a_manifest_read_failing_past_the_bound_is_not_called_corrupt(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    # The store's failure was renamed CorruptMetadataError("not a readable manifest"): a
    # user told to repair a table that is whole.
    options = retrying(2)
    uri = f"s3://{faulty.create_bucket()}/t"
    raylake.create_table(uri, SCHEMA, storage_options=options).write(_rows(10))
    faulty.set_faults(FaultPlan((FaultRule("internal", operation="GET", path=r"/manifest/"),)))
    with pytest.raises(StorageRetriesExhaustedError, match="after 2 tries") as info:
        raylake.open_table(uri, storage_options=options).to_arrow()
    faulty.set_faults(None)
    assert "/t/manifest/manifest-" in info.value.path
    assert raylake.open_table(uri, storage_options=options).to_arrow().num_rows == 10


@pytest.mark.parametrize("kind", ["slowdown", "internal"])
def test_a_data_file_head_failing_past_the_bound_is_named(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]], kind: str
) -> None:
    # An answer to a HEAD has no body, so pyarrow names no error code: "AWS Error UNKNOWN
    # (HTTP status 500)". It retries it as any 5xx, but after the bound its bare OSError
    # came out of the scan, not the named error.
    options = retrying(3, backoff_s=0.01)
    uri = f"s3://{faulty.create_bucket()}/t"
    tbl = raylake.create_table(uri, SCHEMA, primary_key=["id"], buckets=1, storage_options=options)
    tbl.write(_rows(10))
    tbl.write(_rows(5))
    head = FaultRule(kind, operation="HEAD", path=DATA_GET["path"])
    faulty.set_faults(FaultPlan((head,), seed=3))
    with pytest.raises(StorageRetriesExhaustedError, match="after 3 tries") as info:
        raylake.open_table(uri, storage_options=options).to_arrow()
    faulty.set_faults(None)
    assert info.value.operation == "read (HeadObject)" and "/t/data/bucket-0/" in info.value.path
    assert raylake.open_table(uri, storage_options=options).to_arrow().num_rows == 10


# An option pyarrow's own S3 client cannot honour: data files are read through s3fs.
THROUGH_S3FS = {"requester_pays": True}


@pytest.mark.parametrize("table_kind", ["append", "primary key"])
def test_a_data_read_through_s3fs_cut_short_is_retried(
    faulty: LocalS3Server, storage_options: dict[str, Any], table_kind: str
) -> None:
    # s3fs reads the body after botocore's retries: one connection dropped in the middle
    # of a data file's bytes failed the scan at once, with aiohttp's bare error.
    options = {**storage_options, **THROUGH_S3FS}
    uri = f"s3://{faulty.create_bucket()}/t"
    pk: dict[str, Any] = {"primary_key": ["id"], "buckets": 1} if table_kind != "append" else {}
    tbl = raylake.create_table(uri, SCHEMA, storage_options=options, **pk)
    tbl.write(_rows(1000))
    tbl.write(_rows(5))
    cut = FaultRule("truncated", operation="GET", path=DATA_GET["path"], times=1)
    faulty.set_faults(FaultPlan((cut,), seed=3))
    expected = sorted([*range(1000), *range(5)]) if table_kind == "append" else list(range(1000))
    reader = raylake.open_table(uri, storage_options=options)
    assert sorted(reader.to_arrow().column("id").to_pylist()) == expected
    assert faulty.fault_stats()["injected"] == {"truncated": 1}
    faulty.set_faults(FaultPlan((cut,), seed=3))
    ids = [i for batch in reader.to_batches() for i in batch.column("id").to_pylist()]
    assert sorted(ids) == expected
    assert faulty.fault_stats()["injected"] == {"truncated": 1}


def test_a_data_read_through_s3fs_cut_short_every_time_names_the_tries(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]]
) -> None:
    options = {**retrying(3), **THROUGH_S3FS}
    uri = f"s3://{faulty.create_bucket()}/t"
    raylake.create_table(uri, SCHEMA, storage_options=options).write(_rows(1000))
    faulty.set_faults(FaultPlan((FaultRule("truncated", **DATA_GET),)))
    with pytest.raises(StorageRetriesExhaustedError, match="after 3 tries") as info:
        raylake.open_table(uri, storage_options=options).to_arrow()
    assert faulty.fault_stats()["injected"] == {"truncated": 3}
    faulty.set_faults(None)
    assert info.value.operation == "read" and "/t/data/bucket-0/data-" in info.value.path


def test_a_process_that_stops_reading_through_s3fs_early_exits(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    # The scan's read-ahead went on reading through s3fs on pyarrow's threads, and one
    # entering the interpreter as it exited aborted the process ("terminate called").
    import json
    import subprocess
    import sys

    options = {**storage_options, **THROUGH_S3FS}
    uri = f"s3://{s3_bucket}/t"
    tbl = raylake.create_table(uri, SCHEMA, storage_options=options)
    for _ in range(12):
        tbl.write(_rows(300))
    script = (
        "import json, sys, raylake\n"
        "t = raylake.open_table(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
        "print(min(next(iter(t.to_batches())).num_rows for _ in range(3)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, uri, json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 0


@pytest.mark.parametrize("operation", ["delete", "merge"])
def test_an_append_delete_or_merge_whose_data_reads_fail_names_the_tries(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]], operation: str
) -> None:
    # Both read the files they rewrite one by one: pyarrow's bare OSError ("AWS Error
    # INTERNAL_FAILURE during GetObject operation") came out of them, unnamed.
    options = retrying(2, backoff_s=0.01)
    tbl = raylake.create_table(f"s3://{faulty.create_bucket()}/t", SCHEMA, storage_options=options)
    tbl.write(_rows(5))
    faulty.set_faults(FaultPlan((FaultRule("internal", **DATA_GET),), seed=3))
    with pytest.raises(StorageRetriesExhaustedError, match="after 2 tries") as info:
        if operation == "delete":
            tbl.delete("id = 2")
        else:
            tbl.merge(_rows(3).slice(2), on="id").when_matched_update().execute()
    faulty.set_faults(None)
    assert info.value.path.endswith(".parquet")
    assert [s.id for s in tbl.snapshots()] == [1] and tbl.to_arrow().num_rows == 5


def _three_upserts(
    faulty: LocalS3Server, storage_options: dict[str, Any], buckets: int
) -> raylake.Table:
    """A primary-key table on the store, three overlapping upserts in it."""
    uri = f"s3://{faulty.create_bucket()}/t"
    tbl = raylake.create_table(
        uri, SCHEMA, primary_key=["id"], buckets=buckets, storage_options=storage_options
    )
    for i in range(3):
        tbl.write(pa.table({"id": [i, i + 1, i + 2], "v": [i] * 3}))
    return tbl


def test_one_error_answer_to_a_small_ranged_read_is_retried(
    faulty: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    # A merge into a primary-key table reads its key columns, ranges of a few dozen bytes.
    # pyarrow's S3 client wrote the error's XML body into that range's buffer, which
    # overflowed: INTERNAL_FAILURE "Failed to flush response stream", not retried, and one
    # 500 failed the merge ("failed after 5 tries" of "a data file", after one).
    tbl = _three_upserts(faulty, storage_options, buckets=2)
    faulty.set_faults(FaultPlan((FaultRule("internal", after=1, times=2, **DATA_GET),), seed=3))
    source = pa.table({"id": [1, 9], "v": [5, 5]})
    tbl.merge(source, on="id").when_matched_update().when_not_matched_insert().execute()
    assert faulty.fault_stats()["injected"] == {"internal": 2}
    faulty.set_faults(None)
    rows = {r["id"]: r["v"] for r in tbl.to_arrow().to_pylist()}
    assert rows == {0: 0, 1: 5, 2: 2, 3: 2, 4: 2, 9: 5}


@pytest.mark.parametrize(
    "read", ["batches", "splits given once", "delete by keys", "stream plan", "changes"]
)
def test_one_error_answer_to_a_small_ranged_read_of_a_stream_is_retried(
    faulty: LocalS3Server, storage_options: dict[str, Any], read: str
) -> None:
    # The streamed reads were not retried as whole-table reads are: one 500 on a small
    # range failed them ("failed after 5 tries", after one request).
    tbl = _three_upserts(faulty, storage_options, buckets=1)
    expected = tbl.to_arrow()  # the files' footers cached: only the ranged reads are left
    with tbl.stream(start="earliest") as reader:  # closed: no prefetch thread outlives it
        planned = [p.to_arrow() for p in reader.plans(timeout=0)]
    changed = tbl.changes(1).to_arrow()  # a diff of two states: key reads of each file
    faulty.set_faults(FaultPlan((FaultRule("internal", after=1, times=1, **DATA_GET),), seed=3))
    if read == "batches":
        got = pa.Table.from_batches(list(tbl.to_batches()), schema=expected.schema)
        assert got.equals(expected)
    elif read == "splits given once":  # an iterator: read again, it had to be kept
        scan = tbl.scan()
        batches = scan.read_context().read_all(iter(scan.plan()))  # type: ignore[arg-type]
        got = pa.Table.from_batches(list(batches), schema=expected.schema)
        assert got.equals(expected)
    elif read == "changes":
        assert tbl.changes(1).to_arrow().equals(changed)
    elif read == "delete by keys":
        tbl.delete({"id": [1]})
    else:
        with tbl.stream(start="earliest") as reader:
            assert [p.to_arrow() for p in reader.plans(timeout=0)] == planned
    assert faulty.fault_stats()["injected"] == {"internal": 1}
    faulty.set_faults(None)
    left = sorted(r["id"] for r in tbl.to_arrow().to_pylist())
    assert left == ([0, 2, 3, 4] if read == "delete by keys" else [0, 1, 2, 3, 4])


@pytest.mark.parametrize("operation", ["read", "delete(filter)", "merge"])
def test_a_data_file_whose_ranged_reads_keep_failing_is_named(
    faulty: LocalS3Server, retrying: Callable[..., dict[str, Any]], operation: str
) -> None:
    # A primary-key read opens the file (its footer is cached) and then reads ranges of
    # it: pyarrow's error of a read of an open file names no object, and the error said
    # "read (GetObject) of 'a data file'", in the SDK's words for its buffer alone.
    tbl = _three_upserts(faulty, retrying(2, backoff_s=0.01), buckets=1)
    tbl.to_arrow()  # the footers cached: only the ranged reads are left
    faulty.set_faults(FaultPlan((FaultRule("internal", **DATA_GET),)))
    named = r"read \(GetObject\) of '[^']*/t/data/bucket-0/data-[0-9a-f]+\.parquet' failed"
    with pytest.raises(StorageRetriesExhaustedError, match=named) as caught:
        if operation == "read":
            tbl.to_arrow()
        elif operation == "delete(filter)":
            tbl.delete("v = 1")
        else:
            tbl.merge(pa.table({"id": [1], "v": [7]}), on="id").when_matched_update().execute()
    if "Failed to flush response stream" in str(caught.value):  # newer pyarrow's S3 client
        assert "the store answered a small ranged read with an error" in str(caught.value)
    faulty.set_faults(None)
    assert tbl.to_arrow().num_rows == 5
