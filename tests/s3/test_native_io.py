"""Data files on S3 go through pyarrow's native client, built from ``storage_options``."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import raylake
from raylake.io import FileIO
from raylake.io.native import s3_arguments
from raylake.table import clear_caches
from raylake.table.fragments import clear_fragment_cache, parquet_fragment
from raylake.testing.s3server import LocalS3Server

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float32())])


def _rows(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "v": pa.array([0.5] * n, pa.float32())}, schema=SCHEMA)


def _write(uri: str, options: dict[str, Any], files: int = 4, rows: int = 100) -> raylake.Table:
    tbl = raylake.create_table(
        uri, SCHEMA, options={"write.row-group-rows": str(rows)}, storage_options=options
    )
    for i in range(files):
        tbl.write(_rows(i * rows, rows))
    return tbl


def _ids(tbl: raylake.Table) -> list[int]:
    return sorted(tbl.to_arrow()["id"].to_pylist())


def test_file_io_picks_pyarrow_s3_for_data_and_fsspec_for_commits(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    file_io = FileIO(f"s3://{s3_bucket}/t", storage_options)
    assert isinstance(file_io.arrow_filesystem(), pafs.S3FileSystem)
    assert type(file_io.fs).__name__ == "S3FileSystem" and file_io.atomic_create
    assert file_io.is_remote and file_io.files_in_flight > 4
    assert pa.io_thread_count() >= 32


def test_reads_go_through_the_native_client_and_return_every_row(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    uri = f"s3://{s3_bucket}/native"
    _write(uri, storage_options)
    clear_caches()
    tbl = raylake.open_table(uri, storage_options=storage_options)
    (split,) = tbl.scan().plan()
    fragment = parquet_fragment(tbl.file_io, split.files[0].path)
    assert isinstance(fragment.filesystem, pafs.S3FileSystem)
    assert _ids(tbl) == list(range(400))
    assert sum(b.num_rows for b in tbl.scan().to_batches()) == 400


def test_written_file_sizes_are_the_stored_sizes(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    tbl = _write(f"s3://{s3_bucket}/sizes", storage_options, files=3)
    fs = tbl.file_io.arrow_filesystem()
    files = [f for s in tbl.scan().plan() for f in s.files]
    assert len(files) == 3
    for f in files:
        assert f.file_size == fs.get_file_info(tbl.file_io.full_path(f.path)).size


def test_data_reads_make_no_request_for_file_sizes(
    s3_server: LocalS3Server, s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    """Sizes come from the manifest: one file read is its footer and its row group,
    never a HEAD first (a round trip per file on a remote store)."""
    tbl = _write(f"s3://{s3_bucket}/requests", storage_options, files=4)
    splits = tbl.scan().plan()  # metadata read (and cached) before counting
    clear_fragment_cache()
    before = len(s3_server.request_log)
    rows = tbl.scan().read_context().read_table(splits)
    assert rows.num_rows == 400
    requests = s3_server.request_log[before:]
    # Per file: the footer (pyarrow's speculative read of the file's end), then the row
    # group's columns in one coalesced ranged read.
    assert [method for method, _, _ in requests] == ["GET"] * 8
    assert all(byte_range is not None for _, _, byte_range in requests)


def test_endpoint_region_and_keys_at_the_top_level(
    s3_server: LocalS3Server, s3_bucket: str
) -> None:
    options = {
        "endpoint_url": s3_server.endpoint_url,
        "key": s3_server.access_key,
        "secret": s3_server.secret_key,
        "client_kwargs": {"region_name": "us-east-1"},
    }
    assert s3_arguments(options) == {
        "access_key": s3_server.access_key,
        "secret_key": s3_server.secret_key,
        "region": "us-east-1",
        "anonymous": False,
        "scheme": "http",
        "endpoint_override": s3_server.endpoint_url.removeprefix("http://"),
    }
    uri = f"s3://{s3_bucket}/top"
    _write(uri, options, files=2)
    reopened = raylake.open_table(uri, storage_options=options)
    assert isinstance(reopened.file_io.arrow_filesystem(), pafs.S3FileSystem)
    assert _ids(reopened) == list(range(200))


def test_credentials_from_the_environment(
    s3_server: LocalS3Server,
    s3_bucket: str,
    storage_options: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    uri = f"s3://{s3_bucket}/env"
    _write(uri, storage_options, files=2)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    public = {"client_kwargs": storage_options["client_kwargs"]}
    assert "access_key" not in (s3_arguments(public) or {})
    clear_caches()
    assert _ids(raylake.open_table(uri, storage_options=public)) == list(range(200))


def _make_public(server: LocalS3Server, bucket: str) -> None:
    """Let anonymous requests list the bucket and read every object in it."""
    client = server.client()
    statement = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": ["s3:ListBucket"],
        "Resource": [f"arn:aws:s3:::{bucket}"],
    }
    policy = {"Version": "2012-10-17", "Statement": [statement]}
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            client.put_object_acl(Bucket=bucket, Key=item["Key"], ACL="public-read")


def test_anonymous_reads(s3_server: LocalS3Server, s3_bucket: str) -> None:
    uri = f"s3://{s3_bucket}/anon"
    _write(uri, s3_server.storage_options, files=2)
    _make_public(s3_server, s3_bucket)
    anon = {"anon": True, "client_kwargs": s3_server.storage_options["client_kwargs"]}
    assert (s3_arguments(anon) or {})["anonymous"] is True
    clear_caches()
    tbl = raylake.open_table(uri, storage_options=anon)
    assert isinstance(tbl.file_io.arrow_filesystem(), pafs.S3FileSystem)
    assert _ids(tbl) == list(range(200))


def test_options_without_a_native_equivalent_keep_s3fs(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    options = {**storage_options, "requester_pays": False}
    assert s3_arguments(options) is None
    uri = f"s3://{s3_bucket}/fallback"
    tbl = _write(uri, options, files=2)
    assert isinstance(tbl.file_io.arrow_filesystem(), pafs.PyFileSystem)
    assert _ids(raylake.open_table(uri, storage_options=options)) == list(range(200))


def test_pickled_file_io_carries_no_filesystem_and_no_secret(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    file_io = FileIO(f"s3://{s3_bucket}/p", storage_options)
    file_io.arrow_filesystem()
    data = pickle.dumps(file_io)
    assert storage_options["secret"].encode() not in data
    assert b"S3FileSystem" not in data
    copy = pickle.loads(data)
    assert isinstance(copy.arrow_filesystem(), pafs.S3FileSystem)


def test_read_tables_returns_each_split_in_order_with_a_window_in_flight(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    tbl = _write(f"s3://{s3_bucket}/window", storage_options, files=6)
    scan = tbl.scan()
    pieces = scan.with_split_size(1).plan()
    assert len(pieces) == 6
    tables = list(scan.read_context().read_tables(pieces))
    assert [t.num_rows for t in tables] == [p.row_count for p in pieces]
    expected = [scan.read_context().read_table([p])["id"].to_pylist() for p in pieces]
    assert [t["id"].to_pylist() for t in tables] == expected
    assert sorted(i for ids in expected for i in ids) == list(range(600))


def test_open_table_lists_its_schemas_once_and_sees_another_process_s_change(
    s3_server: LocalS3Server, s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    """Listings are never answered from a cache (other processes change the table), so
    open_table lists schema/ once, not once to find the table and again to load it."""
    uri = f"s3://{s3_bucket}/opens"
    _write(uri, storage_options, files=1)
    raylake.open_table(uri, storage_options=storage_options)  # s3fs has listed schema/
    before = len(s3_server.request_log)
    tbl = raylake.open_table(uri, storage_options=storage_options)
    listings = [p for m, p, _ in s3_server.request_log[before:] if p == f"/{s3_bucket}"]
    assert len(listings) == 1
    # A schema change by another writer (a client of its own) is seen by the next open.
    other = {**storage_options, "skip_instance_cache": True}
    with raylake.open_table(uri, storage_options=other).update_schema() as change:
        change.add_column("w", pa.int64())
    assert raylake.open_table(uri, storage_options=storage_options).schema.names == [
        "id", "v", "w",
    ]  # fmt: skip
    assert tbl.schema.names == ["id", "v"]
