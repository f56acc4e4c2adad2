"""The two free functions most users need: ``read_lake`` and ``write_lake``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray.data

from raylake.datasource._ray_compat import READ_TASK_PARAMETERS
from raylake.datasource.datasink import LakeDatasink, SinkMode
from raylake.datasource.datasource import FilterLike, LakeDatasource
from raylake.io.credentials import s3_environment
from raylake.table import Snapshot

if TYPE_CHECKING:
    from ray.data import Dataset


def with_worker_credentials(
    ray_remote_args: dict[str, Any] | None,
    uri: str,
    storage_options: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """Ray task options that give workers the S3 credentials of ``storage_options``.

    A pickled FileIO carries no secrets (docs/object-stores.md), so workers use the
    store's credential chain; for S3 that is the AWS environment variables, set here
    in the tasks' runtime environment. Variables the caller set win.
    """
    if not uri.startswith(("s3://", "s3a://")) or not storage_options:
        return ray_remote_args
    env = s3_environment(storage_options)
    if not env:
        return ray_remote_args
    args = dict(ray_remote_args or {})
    runtime_env = dict(args.get("runtime_env") or {})
    runtime_env["env_vars"] = {**env, **(runtime_env.get("env_vars") or {})}
    args["runtime_env"] = runtime_env
    return args


def read_task_options(
    ray_remote_args: dict[str, Any] | None,
    uri: str,
    storage_options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Keyword arguments of ``ray.data.read_datasource`` for the read tasks' Ray options.

    Ray 2.60 deprecates ``read_datasource(ray_remote_args=...)`` in favour of named
    parameters (``num_cpus``, ``runtime_env``, ...): options it names go there, and only
    the rest (``scheduling_strategy``, ...) still travel as ``ray_remote_args``.
    """
    args = with_worker_credentials(ray_remote_args, uri, storage_options) or {}
    named = {k: v for k, v in args.items() if k in READ_TASK_PARAMETERS}
    rest = {k: v for k, v in args.items() if k not in READ_TASK_PARAMETERS}
    return {**named, "ray_remote_args": rest} if rest else named


def read_lake(
    uri: str,
    *,
    columns: Sequence[str] | None = None,
    filter: FilterLike = None,
    snapshot_id: int | None = None,
    as_of: datetime | int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    override_num_blocks: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    **read_args: Any,
) -> Dataset:
    """A Ray Dataset over a raylake table (one pinned snapshot); see :class:`LakeDatasource`.

    ``override_num_blocks`` caps the number of read tasks (each reads whole splits);
    other keyword arguments go to ``ray.data.read_datasource``.
    """
    source = LakeDatasource(
        uri,
        columns=columns,
        filter=filter,
        snapshot_id=snapshot_id,
        as_of=as_of,
        storage_options=storage_options,
    )
    return ray.data.read_datasource(
        source,
        override_num_blocks=override_num_blocks,
        **read_task_options(ray_remote_args, uri, storage_options),
        **read_args,
    )


def write_lake(
    ds: Dataset,
    uri: str,
    *,
    mode: SinkMode | None = None,
    schema: pa.Schema | None = None,
    create_if_missing: bool = True,
    partition_by: Sequence[str] = (),
    primary_key: Sequence[str] = (),
    buckets: int | None = None,
    options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    commit_properties: Mapping[str, str] | None = None,
    concurrency: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
) -> Snapshot | None:
    """Write ``ds`` into the table at ``uri`` as one snapshot and return it.

    Returns None when there was nothing to commit (an empty dataset in append or
    upsert mode). See :class:`LakeDatasink` for modes and table creation.
    """
    sink = LakeDatasink(
        uri,
        mode=mode,
        schema=schema,
        create_if_missing=create_if_missing,
        partition_by=partition_by,
        primary_key=primary_key,
        buckets=buckets,
        options=options,
        storage_options=storage_options,
        commit_properties=commit_properties,
    )
    # Ray hands on_write_start the schema of the first block *before* the transforms fused
    # into the write (ds.map_batches(fn)): the sink checks and creates with the dataset's own.
    sink.data_schema = _dataset_schema(ds)
    ds.write_datasink(
        sink,
        concurrency=concurrency,
        ray_remote_args=with_worker_credentials(ray_remote_args, uri, storage_options),
    )
    return sink.snapshot


def _dataset_schema(ds: Dataset) -> pa.Schema | None:
    """The Arrow schema of ``ds``'s rows (Ray runs the first block if it must), or None."""
    try:
        schema = ds.schema()
    except pa.ArrowException:  # blocks of incompatible schemas: the sink's checks name them
        return None
    if schema is None:
        return None
    if isinstance(schema.base_schema, pa.Schema):
        return schema.base_schema
    types = schema.types  # pandas blocks: Ray maps their dtypes to Arrow types
    if not all(isinstance(t, pa.DataType) for t in types):
        return None
    return pa.schema(list(zip(schema.names, types, strict=True)))
