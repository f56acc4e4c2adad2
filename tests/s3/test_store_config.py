"""Both S3 clients of a table (s3fs for metadata, pyarrow's for data files) take the same
options: botocore's spellings of them, and unknown ones refused
(raylake/io/s3options.py)."""

from __future__ import annotations

import inspect
import os
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import s3fs

import raylake
from raylake.errors import InvalidOptionError
from raylake.io import s3options
from raylake.table import clear_caches
from raylake.testing.s3server import LocalS3Server

SCHEMA = pa.schema([("id", pa.int64())])
_ENDPOINT_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


@pytest.fixture
def aws_env(s3_server: LocalS3Server, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Credentials in the environment, and no endpoint or region from anywhere."""
    for name in _ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    return monkeypatch


def _stored_keys(server: LocalS3Server, bucket: str, prefix: str) -> list[str]:
    """The keys on the test server itself, read by a client of its own."""
    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
    )
    listing = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listing.get("Contents", []))


def _round_trip(uri: str, options: dict[str, Any] | None = None) -> raylake.Table:
    """Create, write twice, and read back through a fresh table object."""
    tbl = raylake.create_table(uri, SCHEMA, storage_options=options)
    tbl.write(pa.table({"id": [1, 2, 3]}))
    tbl.write(pa.table({"id": [4]}))
    clear_caches()
    reopened = raylake.open_table(uri, storage_options=options)
    assert sorted(reopened.to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]
    return reopened


# -- storage_options as the docs list them ---------------------------------------------


def test_botocore_spellings_at_the_top_level_work_for_both_clients(
    s3_server: LocalS3Server, s3_bucket: str, aws_env: pytest.MonkeyPatch
) -> None:
    aws_env.delenv("AWS_ACCESS_KEY_ID")
    aws_env.delenv("AWS_SECRET_ACCESS_KEY")
    options = {
        "aws_access_key_id": s3_server.access_key,
        "aws_secret_access_key": s3_server.secret_key,
        "region_name": "us-east-1",
        "endpoint_url": s3_server.endpoint_url,
    }
    tbl = _round_trip(f"s3://{s3_bucket}/botocore-names", options)
    assert isinstance(tbl.file_io.arrow_filesystem(), pafs.S3FileSystem)
    client_options = tbl.file_io.client_options()
    assert client_options["key"] == s3_server.access_key
    assert client_options["client_kwargs"]["region_name"] == "us-east-1"
    assert "aws_access_key_id" not in client_options and "region_name" not in client_options


def test_an_unknown_option_is_refused_before_anything_is_written(
    s3_server: LocalS3Server, s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    options = {**storage_options, "secrett": "do-not-show"}
    del options["secret"]
    uri = f"s3://{s3_bucket}/typo"
    with pytest.raises(InvalidOptionError) as refused:
        raylake.create_table(uri, SCHEMA, storage_options=options)
    message = str(refused.value)
    assert "storage_options['secrett']" in message and uri in message
    assert "did you mean 'secret'?" in message and "s3fs.S3FileSystem" in message
    assert "do-not-show" not in message and refused.value.value == "***"
    assert _stored_keys(s3_server, s3_bucket, "typo/") == []
    with pytest.raises(InvalidOptionError, match="secrett"):
        raylake.open_table(uri, storage_options=options)


def test_every_s3fs_argument_is_accepted() -> None:
    """The accepted set comes from the installed s3fs: none of its options is refused."""
    parameters = inspect.signature(s3fs.S3FileSystem.__init__).parameters
    names = [n for n, p in parameters.items() if n != "self" and p.kind != p.VAR_KEYWORD]
    options = dict.fromkeys([*names, "profile", "skip_instance_cache", "raylake_retry"])
    s3options.check_s3_keys(options, "s3://bucket/t")
