"""Credentials never appear in pickles, reprs, logs or errors."""

from __future__ import annotations

import logging
import pickle
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import RaylakeError
from raylake.io import FileIO
from raylake.io.credentials import redacted, split_secrets
from raylake.testing.s3server import LocalS3Server


def test_secrets_are_split_at_any_depth() -> None:
    options = {
        "key": "AKIA",
        "secret": "s3cr3t",
        "anon": False,
        "client_kwargs": {"endpoint_url": "http://x", "aws_session_token": "tok"},
    }
    public, secret = split_secrets(options)
    assert public == {"anon": False, "client_kwargs": {"endpoint_url": "http://x"}}
    assert secret == {
        "key": "AKIA",
        "secret": "s3cr3t",
        "client_kwargs": {"aws_session_token": "tok"},
    }
    assert "s3cr3t" not in repr(redacted(options)) and "http://x" in repr(redacted(options))


def test_pickled_objects_carry_no_secret(
    s3_server: LocalS3Server, s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    secret = s3_server.secret_key.encode()
    uri = f"s3://{s3_bucket}/t"
    tbl = raylake.create_table(
        uri, pa.schema([("a", pa.int64())]), primary_key=["a"], storage_options=storage_options
    )
    tbl.write(pa.table({"a": [1, 2, 3]}))
    scan = tbl.scan(filter="a > 1")
    for obj in (tbl.file_io, scan.read_context(), *scan.plan(), tbl.new_writer().prepare_commit()):
        assert secret not in pickle.dumps(obj)
    # In this process (or a fork of it) an unpickled FileIO still reaches the store.
    restored = pickle.loads(pickle.dumps(scan.read_context()))
    assert sum(b.num_rows for s in scan.plan() for b in restored.read(s)) == 2
    assert restored.file_io.public_storage_options["client_kwargs"]["endpoint_url"]


def test_reprs_logs_and_errors_carry_no_secret(
    s3_server: LocalS3Server,
    s3_bucket: str,
    storage_options: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = s3_server.secret_key
    caplog.set_level(logging.DEBUG)
    uri = f"s3://{s3_bucket}/logged"
    tbl = raylake.create_table(uri, pa.schema([("a", pa.int64())]), storage_options=storage_options)
    tbl.write(pa.table({"a": [1]}))
    tbl.expire_snapshots(retain_last=1)
    texts = [repr(tbl), repr(tbl.file_io), repr(tbl.scan()), str(tbl.latest_snapshot())]
    for bad in (
        lambda: raylake.open_table(f"s3://{s3_bucket}/missing", storage_options=storage_options),
        lambda: tbl.to_arrow(snapshot_id=42),
        lambda: FileIO(uri, storage_options).read_bytes("no/such/file"),
    ):
        with pytest.raises((RaylakeError, FileNotFoundError)) as info:
            bad()
        texts.append(str(info.value))
    texts.append(caplog.text)
    assert not [t for t in texts if secret in t]


@pytest.mark.parametrize("step", ["open", "read", "write"])
def test_credentials_the_store_does_not_know_are_named(
    s3_bucket: str, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    # The store answers 403 InvalidAccessKeyId: s3fs's bare PermissionError named neither
    # the request nor the object (and pyarrow's answer to a data read was a bare OSError).
    moto_settings = pytest.importorskip("moto.settings")
    uri = f"s3://{s3_bucket}/t"
    tbl = raylake.create_table(
        uri, pa.schema([("id", pa.int64())]), storage_options=storage_options
    )
    tbl.write(pa.table({"id": [1, 2]}))
    monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # check every key
    actions = {
        "open": lambda: raylake.open_table(uri, storage_options=storage_options),
        "read": tbl.to_arrow,
        "write": lambda: tbl.write(pa.table({"id": [3]})),
    }
    with pytest.raises(raylake.StorageAccessDeniedError, match="refused by the store") as info:
        actions[step]()
    assert isinstance(info.value, PermissionError)
    assert info.value.path.startswith(f"{s3_bucket}/t/") and "Access Key Id" in str(info.value)
    monkeypatch.undo()
    assert raylake.open_table(uri, storage_options=storage_options).count() == 2
