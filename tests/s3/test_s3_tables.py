"""Append and primary-key tables on a real S3-compatible server (s3fs over HTTP)."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import SnapshotNotFoundError, TableLocationError, TableNotFoundError
from raylake.io import FileIO
from raylake.testing.s3server import LocalS3Server

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.float64())])


def _rows(ids: range, dt: str, v: float) -> pa.Table:
    return pa.table({"id": list(ids), "dt": [dt] * len(ids), "v": [v] * len(ids)}, schema=SCHEMA)


def test_append_table_round_trip(s3_bucket: str, storage_options: dict[str, Any]) -> None:
    uri = f"s3://{s3_bucket}/events"
    tbl = raylake.create_table(uri, SCHEMA, partition_by=["dt"], storage_options=storage_options)
    first = tbl.write(_rows(range(0, 100), "2024-01-01", 1.0))
    tbl.write(_rows(range(100, 250), "2024-01-02", 2.0))
    assert tbl.file_io.atomic_create

    reopened = raylake.open_table(uri, storage_options=storage_options)
    assert reopened.count() == 250
    day2 = reopened.to_arrow(filter="dt = '2024-01-02' and id >= 200", columns=["id"])
    assert sorted(day2["id"].to_pylist()) == list(range(200, 250))
    assert reopened.to_arrow(snapshot_id=first.id).num_rows == 100
    assert reopened.to_arrow(as_of=first.time_millis).num_rows == 100
    splits = reopened.scan(filter="dt = '2024-01-01'").plan()
    assert sum(s.row_count for s in splits) == 100
    rows = pa.Table.from_batches([b for s in splits for b in reopened.read_split(s)])
    assert rows.num_rows == 100

    day1 = "dt = '2024-01-01'"
    reopened.write(_rows(range(0, 10), "2024-01-01", 9.0), mode="overwrite", overwrite_filter=day1)
    assert reopened.count() == 160
    with pytest.raises(SnapshotNotFoundError):
        reopened.to_arrow(snapshot_id=99)


def test_primary_key_table_upserts_deletes_and_compacts(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    uri = f"s3://{s3_bucket}/users"
    tbl = raylake.create_table(
        uri,
        SCHEMA,
        primary_key=["id"],
        buckets=2,
        options={"changelog-producer": "lookup"},
        storage_options=storage_options,
    )
    tbl.write(_rows(range(0, 50), "a", 1.0))
    tbl.write(_rows(range(25, 75), "b", 2.0))
    snap = tbl.delete("id < 10")
    model = {i: ("a", 1.0) for i in range(10, 25)} | {i: ("b", 2.0) for i in range(25, 75)}

    def state(t: raylake.Table) -> dict[int, tuple[str, float]]:
        got = t.to_arrow().to_pylist()
        return {r["id"]: (r["dt"], r["v"]) for r in got}

    assert state(tbl) == model
    deletes = tbl.changelog(snap.id)
    assert set(deletes["_rl_kind"].to_pylist()) == {"-D"} and deletes.num_rows == 10
    assert tbl.compact(full=True) is not None
    assert state(raylake.open_table(uri, storage_options=storage_options)) == model
    assert tbl.count(filter="v > 1.5") == 50


def test_maintenance_on_s3(s3_bucket: str, storage_options: dict[str, Any]) -> None:
    uri = f"s3://{s3_bucket}/maint"
    tbl = raylake.create_table(uri, SCHEMA, storage_options=storage_options)
    for i in range(4):
        tbl.write(_rows(range(i * 10, i * 10 + 10), "x", float(i)), mode="overwrite")
    tbl.reset_consumer("reader", 4)
    result = tbl.expire_snapshots(retain_last=1)
    # The consumer reads 4 next, as a change against 3: both stay.
    assert [s.id for s in tbl.snapshots()] == [3, 4]
    assert result.expired_snapshot_ids == (1, 2) and result.deleted_data_files
    # a crashed writer's file, named and placed as raylake writes them
    orphan = f"data/bucket-0/data-{uuid.uuid4().hex}.parquet"
    tbl.file_io.write_bytes(orphan, b"not referenced")
    time.sleep(1.0)  # S3 keeps modification times in whole seconds
    removed = tbl.remove_orphan_files(older_than=timedelta(0))
    assert orphan in removed.paths
    assert tbl.to_arrow()["v"].to_pylist() == [3.0] * 10


def test_missing_table_and_wrong_credentials_name_the_problem(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    with pytest.raises(TableNotFoundError, match="it has no schema/ directory"):
        raylake.open_table(f"s3://{s3_bucket}/nothing-here", storage_options=storage_options)
    io = FileIO(f"s3://{s3_bucket}/t", storage_options)
    assert io.create_if_absent("x", b"1") and not io.create_if_absent("x", b"2")
    assert io.read_bytes("x") == b"1"


def test_a_table_in_a_bucket_that_does_not_exist_is_refused_naming_it(
    storage_options: dict[str, Any],
) -> None:
    # s3fs's bare FileNotFoundError ("The specified bucket does not exist") came out of
    # the create of the schema file, naming neither the table nor the bucket.
    uri = "s3://raylake-no-such-bucket/t"
    with pytest.raises(TableLocationError, match="create the bucket first") as info:
        raylake.create_table(uri, SCHEMA, storage_options=storage_options)
    assert info.value.path == uri and "does not exist" in str(info.value)


def test_opening_a_table_in_a_bucket_that_does_not_exist_names_the_bucket(
    storage_options: dict[str, Any],
) -> None:
    # The store lists a missing bucket as an empty directory: "it has no schema/
    # directory" sent the user looking for a table that was never the problem.
    uri = "s3://raylake-no-such-bucket/t"
    with pytest.raises(TableNotFoundError, match="the bucket 'raylake-no-such-bucket' does not"):
        raylake.open_table(uri, storage_options=storage_options)


def test_a_folder_made_in_the_console_takes_a_table_and_files_in_it_are_still_refused(
    s3_server: LocalS3Server, s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    """The AWS console's "Create folder" makes an empty ``t/`` object (and ``t/data/``
    for a folder made in it): create_table refused the empty folder, saying that it
    "already holds t"."""
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="t/", Body=b"")
    client.put_object(Bucket=s3_bucket, Key="t/data/", Body=b"")
    tbl = raylake.create_table(f"s3://{s3_bucket}/t", SCHEMA, storage_options=storage_options)
    tbl.write(_rows(range(3), "d", 1.0))
    assert tbl.count() == 3
    client.put_object(Bucket=s3_bucket, Key="u/", Body=b"")
    client.put_object(Bucket=s3_bucket, Key="u/notes.txt", Body=b"mine")
    with pytest.raises(TableLocationError, match=r"notes\.txt"):
        raylake.create_table(f"s3://{s3_bucket}/u", SCHEMA, storage_options=storage_options)
    client.put_object(Bucket=s3_bucket, Key="f", Body=b"a file")
    with pytest.raises(TableLocationError, match="it is a file"):
        raylake.create_table(f"s3://{s3_bucket}/f", SCHEMA, storage_options=storage_options)
