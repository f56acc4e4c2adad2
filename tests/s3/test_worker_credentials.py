"""Credentials reach every worker of every entry point, on one node, with no AWS variables
in any environment: Ray Data read and write tasks, stream reads, StreamingJob actors,
spawned DataLoader workers; a process that truly has none gets MissingCredentialsError.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")

import raylake  # noqa: E402
from raylake import LakeDatasink, LakeDatasource, StreamingJob, read_lake  # noqa: E402
from raylake.errors import MissingCredentialsError  # noqa: E402
from raylake.io import FileIO  # noqa: E402
from raylake.io import credentials as creds  # noqa: E402
from raylake.io.credentials import StorageOptions  # noqa: E402
from raylake.streaming.ray_source import read_lake_stream  # noqa: E402
from raylake.testing.s3server import LocalS3Server  # noqa: E402

pytestmark = pytest.mark.ray
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import it

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64())])
OUT = pa.schema([("id", pa.int64())])
NO_CHAIN = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_CONFIG_FILE": os.devnull,
}


def _data(n: int, offset: int = 0) -> pa.Table:
    ids = np.arange(offset, offset + n, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * 0.5}, schema=SCHEMA)


def _aws_variables() -> list[str]:
    """The AWS credential variables of this process (AWS_CA_BUNDLE and the like are fine)."""
    named = ("ACCESS_KEY", "SECRET", "TOKEN", "PROFILE", "CREDENTIALS_")
    return sorted(k for k in os.environ if k.startswith("AWS_") and any(n in k for n in named))


@pytest.fixture
def no_aws_environment(ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Neither this process nor the Ray workers have AWS variables: what reaches a worker
    came through raylake."""
    in_workers = ray.get(ray.remote(_aws_variables).remote())
    if in_workers or _aws_variables():  # pragma: no cover - CI has none
        pytest.skip(f"AWS variables in the environment ({in_workers}): they would hide the test")
    for name, value in NO_CHAIN.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(creds, "_chain_found", False)
    yield


@pytest.fixture
def table(s3_bucket: str, storage_options: dict[str, Any]) -> raylake.Table:
    tbl = raylake.create_table(
        f"s3://{s3_bucket}/src", SCHEMA, primary_key=["id"], buckets=2,
        storage_options=storage_options,
    )  # fmt: skip
    for i in range(3):
        tbl.write(_data(100, i * 100))
    return tbl


def test_read_datasource_and_write_datasink(
    no_aws_environment: None,
    s3_server: LocalS3Server,
    s3_bucket: str,
    storage_options: dict[str, Any],
    table: raylake.Table,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    source = LakeDatasource(table.uri, storage_options=storage_options)
    ds = ray.data.read_datasource(source, override_num_blocks=3)
    assert sorted(ds.to_pandas()["id"]) == list(range(300))
    dst = f"s3://{s3_bucket}/dst"
    sink = LakeDatasink(dst, storage_options=storage_options)
    ds.write_datasink(sink)
    out = raylake.open_table(dst, storage_options=storage_options)
    assert len(out.snapshots()) == 1
    assert sorted(out.to_arrow()["id"].to_pylist()) == list(range(300))
    secret = s3_server.secret_key.encode()
    for obj in (source, sink, *source.get_read_tasks(3)):
        assert secret not in ray.cloudpickle.dumps(obj) and secret not in pickle.dumps(obj)
    assert s3_server.secret_key not in repr(source) + repr(sink) + repr(sink.file_io)
    assert s3_server.secret_key not in caplog.text


def test_read_lake_keeps_secrets_out_of_the_plan(
    no_aws_environment: None, s3_server: LocalS3Server, storage_options: dict[str, Any],
    table: raylake.Table,
) -> None:  # fmt: skip
    """The plan of a Dataset (its tasks' options, runtime environment included) is stored
    and shown by Ray: it must not hold the secret."""
    ds = read_lake(table.uri, storage_options=storage_options, filter="id < 150")
    assert s3_server.secret_key.encode() not in ray.cloudpickle.dumps(ds._logical_plan)
    assert sorted(ds.to_pandas()["id"]) == list(range(150))


def test_read_lake_stream(
    no_aws_environment: None, s3_server: LocalS3Server, storage_options: dict[str, Any],
    table: raylake.Table,
) -> None:  # fmt: skip
    stream = read_lake_stream(
        table.uri, storage_options=storage_options, max_snapshots_per_dataset=3
    )
    ds = next(stream.datasets(max_datasets=1))
    assert s3_server.secret_key.encode() not in ray.cloudpickle.dumps(ds._logical_plan)
    assert sorted(ds.to_pandas()["id"]) == list(range(300))


def test_streaming_job(
    no_aws_environment: None,
    s3_server: LocalS3Server,
    s3_bucket: str,
    storage_options: dict[str, Any],
    table: raylake.Table,
) -> None:
    sink = f"s3://{s3_bucket}/stream-out"
    raylake.create_table(sink, OUT, storage_options=storage_options)
    job = StreamingJob(
        table.uri, lambda t: t.select(["id"]), consumer_id="creds", num_shards=2,
        sink_uri=sink, storage_options=storage_options, sink_storage_options=storage_options,
    )  # fmt: skip
    secret = s3_server.secret_key.encode()
    assert secret not in ray.cloudpickle.dumps((job.spec, job.actor_options))
    with job:
        job.run(until_snapshot=table.latest_snapshot().id)  # type: ignore[union-attr]
    out = raylake.open_table(sink, storage_options=storage_options).to_arrow()
    assert sorted(out["id"].to_pylist()) == list(range(300))


@pytest.mark.slow
def test_spawned_dataloader_workers(
    no_aws_environment: None, s3_server: LocalS3Server, storage_options: dict[str, Any],
    table: raylake.Table,
) -> None:  # fmt: skip
    torch = pytest.importorskip("torch")
    from raylake.train.torch import LakeIterableDataset

    dataset = LakeIterableDataset(
        table.uri, columns=["id"], batch_size=64, storage_options=storage_options
    )
    assert s3_server.secret_key.encode() not in pickle.dumps(dataset)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn"
    )
    assert sorted(int(i) for b in loader for i in b["id"]) == list(range(300))


def _read_in_child(blob: bytes) -> str:
    """In a process that got a pickled FileIO through a queue (not while being spawned)."""
    file_io: FileIO = pickle.loads(blob)
    try:
        file_io.read_bytes("schema/schema-0.json")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "read"


def test_a_process_without_credentials_says_so(
    no_aws_environment: None, s3_server: LocalS3Server, storage_options: dict[str, Any],
    table: raylake.Table, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    blob = pickle.dumps(FileIO(table.uri, storage_options))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        outcome = pool.apply(_read_in_child, (blob,))
    assert outcome.startswith("MissingCredentialsError: this process has no credentials")
    assert table.uri in outcome and "storage_options on the driver" in outcome
    assert "AWS_ACCESS_KEY_ID" in outcome and s3_server.secret_key not in outcome
    # No secret given and no credential chain: the same error, before any request.
    public = {"client_kwargs": storage_options["client_kwargs"]}
    with pytest.raises(MissingCredentialsError, match="hold no credentials"):
        FileIO(table.uri, public).read_bytes("schema/schema-0.json")


def test_storage_options_travel_by_reference(
    ray_cluster: Any, s3_server: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    options = StorageOptions(storage_options)
    secret = s3_server.secret_key
    for dump in (pickle.dumps, ray.cloudpickle.dumps):
        restored = pickle.loads(dump(options))
        assert secret.encode() not in dump(options) and restored == options
    assert secret not in repr(options) and "endpoint_url" in repr(options)

    @ray.remote
    def fingerprint_in_worker(opts: StorageOptions) -> str:
        return creds.fingerprint_of(creds.split_secrets(opts.resolve("s3://b/t"))[1])

    assert ray.get(fingerprint_in_worker.remote(options)) == options.fingerprint
