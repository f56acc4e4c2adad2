"""Both S3 clients of a table (s3fs for metadata, pyarrow's for data files) reach the same
store with the same options: an endpoint from AWS's own configuration, botocore's
spellings of the options, and unknown options (raylake/io/s3options.py)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import s3fs

import raylake
from raylake.cli import main
from raylake.errors import InvalidOptionError
from raylake.io import FileIO, s3options
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
    client = server.client()
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


# -- an endpoint from AWS's own configuration ------------------------------------------


def test_endpoint_from_the_environment_serves_data_files_too(
    s3_server: LocalS3Server,
    s3_bucket: str,
    aws_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No storage_options, as the CLI runs: data files went to AWS, metadata to the
    endpoint, so a table was created and then no write or scan worked."""
    aws_env.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    uri = f"s3://{s3_bucket}/env-endpoint"
    tbl = _round_trip(uri)
    assert isinstance(tbl.file_io.arrow_filesystem(), pafs.S3FileSystem)
    data_files = [f.path for s in tbl.scan().plan() for f in s.files]
    stored = _stored_keys(s3_server, s3_bucket, "env-endpoint/")
    assert len(data_files) == 2
    assert all(f"env-endpoint/{path}" in stored for path in data_files)
    capsys.readouterr()
    assert main(["scan", uri]) == 0
    assert "4" in capsys.readouterr().out


def test_the_service_specific_variable_wins_as_in_botocore(
    s3_server: LocalS3Server, s3_bucket: str, aws_env: pytest.MonkeyPatch
) -> None:
    aws_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # nothing listens there
    aws_env.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    _round_trip(f"s3://{s3_bucket}/service-endpoint")


@pytest.mark.parametrize("section", ["profile", "services"])
def test_endpoint_from_the_config_file(
    s3_server: LocalS3Server,
    s3_bucket: str,
    aws_env: pytest.MonkeyPatch,
    tmp_path: Path,
    section: str,
) -> None:
    config = tmp_path / "config"
    if section == "profile":
        config.write_text(f"[default]\nendpoint_url = {s3_server.endpoint_url}\n")
    else:
        config.write_text(
            "[default]\nservices = local\n\n"
            f"[services local]\ns3 =\n  endpoint_url = {s3_server.endpoint_url}\n"
        )
    aws_env.setenv("AWS_CONFIG_FILE", str(config))
    _round_trip(f"s3://{s3_bucket}/config-{section}")


def test_configured_endpoints_can_be_ignored_as_in_botocore(
    s3_server: LocalS3Server, s3_bucket: str, aws_env: pytest.MonkeyPatch
) -> None:
    aws_env.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    aws_env.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    options = FileIO(f"s3://{s3_bucket}/t").client_options()
    assert "endpoint_url" not in options.get("client_kwargs", {})


def test_an_unreadable_botocore_configuration_leaves_data_files_to_s3fs(
    s3_server: LocalS3Server, s3_bucket: str, aws_env: pytest.MonkeyPatch
) -> None:
    """Where botocore's lookup cannot be used, pyarrow's client does not guess the
    endpoint: s3fs, which reads the configuration itself, serves every file."""

    def changed_api(options: Any) -> str | None:
        raise AttributeError("no such lookup in this botocore")

    aws_env.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    aws_env.setattr(s3options, "configured_endpoint", changed_api)
    tbl = _round_trip(f"s3://{s3_bucket}/fallback")
    assert isinstance(tbl.file_io.arrow_filesystem(), pafs.PyFileSystem)


@pytest.mark.parametrize(
    ("variables", "region"),
    [
        ({"AWS_REGION": "eu-west-2"}, "us-east-1"),
        ({"AWS_DEFAULT_REGION": "eu-west-1"}, "eu-west-1"),
    ],
)
def test_data_files_are_signed_for_botocore_s_region(
    s3_server: LocalS3Server,
    s3_bucket: str,
    aws_env: pytest.MonkeyPatch,
    variables: dict[str, str],
    region: str,
) -> None:
    """pyarrow's client reads AWS_REGION, botocore does not: with an endpoint and no
    region given, both sign for the region botocore picks."""
    for name, value in variables.items():
        aws_env.setenv(name, value)
    options = {"client_kwargs": {"endpoint_url": s3_server.endpoint_url}}
    file_io = FileIO(f"s3://{s3_bucket}/region", options)
    assert file_io.client_options()["client_kwargs"]["region_name"] == region
    native = file_io.arrow_filesystem()
    assert isinstance(native, pafs.S3FileSystem) and native.region == region


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


@pytest.mark.parametrize(
    ("nested", "typo", "meant"),
    [
        ("client_kwargs", "endpoint_ur", "endpoint_url"),
        ("config_kwargs", "conect_timeout", "connect_timeout"),
    ],
)
def test_an_unknown_nested_option_is_refused_before_anything_is_written(
    s3_server: LocalS3Server,
    s3_bucket: str,
    storage_options: dict[str, Any],
    nested: str,
    typo: str,
    meant: str,
) -> None:
    """s3fs hands ``client_kwargs`` and ``config_kwargs`` to botocore only at the first
    request, which raised a bare TypeError from inside s3fs."""
    options = {**storage_options, nested: {**storage_options.get(nested, {}), typo: 5}}
    uri = f"s3://{s3_bucket}/nested-typo"
    with pytest.raises(InvalidOptionError) as refused:
        raylake.create_table(uri, SCHEMA, storage_options=options)
    message = str(refused.value)
    assert f"storage_options[{nested!r}][{typo!r}]" in message and uri in message
    assert f"did you mean {meant!r}?" in message
    assert _stored_keys(s3_server, s3_bucket, "nested-typo/") == []
    with pytest.raises(InvalidOptionError, match="expected a dict"):
        raylake.create_table(uri, SCHEMA, storage_options={**storage_options, nested: "x"})


def test_every_botocore_client_and_config_argument_is_accepted() -> None:
    import botocore.config

    options = {
        "client_kwargs": {
            "endpoint_url": None,
            "region_name": None,
            "verify": None,
            "use_ssl": True,
        },
        "config_kwargs": dict.fromkeys(botocore.config.Config.OPTION_DEFAULTS),
    }
    s3options.check_s3_keys(options, "s3://bucket/t")


def test_every_s3fs_argument_is_accepted() -> None:
    """The accepted set comes from the installed s3fs: none of its options is refused."""
    parameters = inspect.signature(s3fs.S3FileSystem.__init__).parameters
    names = [n for n, p in parameters.items() if n != "self" and p.kind != p.VAR_KEYWORD]
    options = dict.fromkeys([*names, "profile", "skip_instance_cache", "raylake_retry"])
    s3options.check_s3_keys(options, "s3://bucket/t")
