"""Writing a Spark DataFrame into a raylake table: executors write, the driver commits once.

Two passes for tables whose kind routes rows to buckets (primary-key tables): the
first computes each row's bucket with the table kind's hash (``TableKind.bucket_ids``,
the one the Python writer uses) and Spark repartitions by it, so that each bucket's
rows are written by one task; the second writes data
files in ``mapInArrow`` and returns each task's commit messages, which the driver
collects and commits as one snapshot.

Exactly once under task retries: a task's files carry the job, partition and
attempt in their names; only the messages Spark returns (one successful attempt
per partition) are committed, and every other file of the job is deleted. A job
that fails commits nothing and deletes every file it wrote.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from raylake.arguments import check_flag, check_mapping, refuse_unknown_keywords
from raylake.errors import InvalidArgumentError, RaylakeError, SchemaMismatchError
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.format.table_spec import TableSpec
from raylake.io import FileIO
from raylake.spark.columns import check_case_distinct, column, map_in_arrow, with_table_case
from raylake.spark.credentials import broadcast_credentials, destroy, install_credentials
from raylake.spark.session import check_dataframe
from raylake.spark.task_results import (
    RESULT_SCHEMA,
    collect_tasks,
    latest_results,
    raising_on_driver,
    result_batch,
    task_attempt,
)
from raylake.spark.types import arrow_schema_of
from raylake.table import CommitMessage, Table
from raylake.table.aborted import abort_messages, outcome_unknown
from raylake.table.catalog import open_or_join_table
from raylake.table.conform import check_schema
from raylake.table.evolve import (
    commit_planned_schema,
    fill_missing_columns,
    merged_columns,
    schema_mode_arg,
    with_new_columns,
)
from raylake.table.kind import WRITE_MODES, kind_of
from raylake.table.new_tables import drop_new_table
from raylake.table.source import check_writable
from raylake.table.table import create_writer
from raylake.table.visible import check_visible, refuse_process_local
from raylake.table.writer import DATA_DIR, writing
from raylake.table.written_partitions import (
    PartitionOverwriteMode,
    check_dynamic_mode,
    is_dynamic,
    partition_overwrite_mode_arg,
)

logger = logging.getLogger(__name__)

SparkWriteMode = Literal["append", "overwrite", "upsert"]
BUCKET_COLUMN = "_rl_spark_bucket"


@dataclass(frozen=True)
class _WriteJob:
    """What every write task needs: small and picklable (no table object, no secrets: the
    file_io's secrets travel in the ``credentials`` broadcast)."""

    file_io: FileIO
    table_schema: TableSchema
    prefix: str
    columns: tuple[str, ...]
    credentials: Any = None
    # schema_mode="merge": table columns the DataFrame lacks are written null.
    fill_missing: bool = False


@refuse_unknown_keywords
def write(
    df: DataFrame,
    uri: str,
    *,
    mode: SparkWriteMode | None = None,
    partition_by: Sequence[str] | None = (),
    primary_key: Sequence[str] | None = (),
    buckets: int | None = None,
    options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    create_if_missing: bool = True,
    commit_properties: Mapping[str, str] | None = None,
    schema_mode: str = "strict",
    partition_overwrite_mode: PartitionOverwriteMode | None = None,
) -> Snapshot | None:
    """Write ``df`` into the table at ``uri`` as one atomic snapshot and return it.

    ``mode`` defaults to the table kind's (``append``, or ``upsert`` for a primary-key
    table). A missing table is created from the DataFrame's schema (with
    ``partition_by``, ``primary_key``, ``buckets``, ``options``) unless
    ``create_if_missing=False``. Returns None when there was nothing to commit.

    ``schema_mode="merge"`` (Spark's ``mergeSchema``) adds the DataFrame's columns that
    the table lacks, with the data (a failed job adds none), and writes nulls for the
    table columns the DataFrame lacks.

    ``mode="overwrite"`` replaces the whole table, or with
    ``partition_overwrite_mode="dynamic"`` only the partitions the DataFrame has rows
    in. Left out, it is the session's ``spark.sql.sources.partitionOverwriteMode``, as
    for Spark's own ``df.write.mode("overwrite")``.
    """
    check_dataframe(df)
    if mode is not None and mode not in WRITE_MODES:  # before the table is created for it
        raise InvalidArgumentError("mode", mode, f"one of {list(WRITE_MODES)} or None")
    if partition_overwrite_mode is not None:
        partition_overwrite_mode = partition_overwrite_mode_arg(partition_overwrite_mode)
    refuse_process_local(uri, "raylake.spark.write")
    check_flag("create_if_missing", create_if_missing)
    layout = TableSpec.of(
        partition_by=partition_by, primary_key=primary_key, buckets=buckets, options=options
    )
    properties = dict(check_mapping("commit_properties", commit_properties, "str") or {})
    merge = schema_mode_arg(schema_mode) == "merge"
    arrow_schema = arrow_schema_of(df.schema)  # unsupported types fail here, by column
    check_case_distinct(df, arrow_schema)
    prefix = f"spark-{uuid.uuid4().hex[:16]}"
    tbl, created, marker = open_or_join_table(
        uri,
        arrow_schema,
        job_prefix=prefix,
        create_if_missing=create_if_missing,
        spec=layout,
        storage_options=storage_options,
    )
    try:
        check_writable(tbl, "writing")  # a Paimon table: refused, naming its format
        df = with_table_case(df, tbl.schema.names)  # `ID` writes `id`, as Spark resolves it
        arrow_schema = arrow_schema_of(df.schema)
        mode = mode or tbl.kind.default_write_mode  # type: ignore[assignment]
        assert mode is not None
        tbl.kind.check_write_mode(mode, where=uri)
        overwrite_mode = _partition_overwrite_mode(df, mode, partition_overwrite_mode)
        dynamic = is_dynamic(mode, overwrite_mode, tbl.table_schema.partition_keys)
        if merge:  # planned, not committed: the tasks write under it, the commit adds it
            _, planned = with_new_columns(tbl, tbl.kind.input_schema(arrow_schema))
            tbl = Table(tbl.file_io, planned, tbl.source)
        columns = _check_columns(tbl, arrow_schema, merge)
        base = tbl.latest_snapshot()
        credentials = broadcast_credentials(df.sparkSession.sparkContext, tbl.file_io)
        job = _WriteJob(
            tbl.file_io,
            tbl.table_schema,
            prefix,
            columns,
            credentials,
            fill_missing=merge,
        )
    except BaseException:
        tbl.file_io.delete_quietly([marker] if marker else [])
        _drop_if_created(tbl, created)
        raise
    messages: list[CommitMessage] = []
    try:
        try:
            messages = _run_tasks(df.select(*[column(n) for n in columns]), job)
        finally:
            destroy(job.credentials)
        if merge:  # the new columns, just before the data: a failed job adds none
            commit_planned_schema(tbl.file_io, tbl.table_schema)
        if not any(not m.is_empty for m in messages) and (mode != "overwrite" or dynamic):
            _delete_job_files(job, keep=())  # (a dynamic overwrite of no rows replaces none)
            return None
        snap = tbl.commit(
            messages,
            mode=mode,
            partition_overwrite_mode=overwrite_mode,
            base_snapshot_id=None if base is None else base.id,
            properties={"spark.job": job.prefix, **properties},
        )
    except BaseException as exc:
        if outcome_unknown(exc):  # it may be committed: every data file it wrote stays
            tbl.file_io.delete_quietly([marker] if marker else [])  # no snapshot names it
            raise
        abort_messages(tbl.file_io, messages)
        _delete_job_files(job, keep=())
        _drop_if_created(tbl, created)
        raise
    # Files of attempts Spark discarded (a retried or speculative task) are not committed.
    _delete_job_files(job, keep={f.path for m in messages for f in _files(m)})
    return snap


def _partition_overwrite_mode(
    df: DataFrame, mode: str, given: PartitionOverwriteMode | None
) -> PartitionOverwriteMode:
    """The ``partition_overwrite_mode`` given, else for an overwrite the session's
    ``spark.sql.sources.partitionOverwriteMode`` (a user who set it to DYNAMIC expects
    an overwrite to keep the partitions the DataFrame has no rows in)."""
    if given is not None:
        check_dynamic_mode(given, mode)
        return given
    if mode != "overwrite":
        return "static"
    conf = df.sparkSession.conf.get("spark.sql.sources.partitionOverwriteMode", "static")
    return partition_overwrite_mode_arg(conf or "static")


def _check_columns(tbl: Table, arrow_schema: pa.Schema, merge: bool) -> tuple[str, ...]:
    """The DataFrame columns to write, after checking they fit the table (by name and type)."""
    data_schema = tbl.kind.input_schema(arrow_schema)
    table_schema = tbl.schema
    if merge:  # the table columns the DataFrame lacks are written null, if they may be
        table_schema = merged_columns(tbl.schema, data_schema)
    missing_keys = [k for k in tbl.table_schema.primary_key if k not in arrow_schema.names]
    if missing_keys:
        raise SchemaMismatchError(
            f"the DataFrame lacks primary-key column(s) {missing_keys} of the table at "
            f"{tbl.uri!r}; nothing was written",
            column=missing_keys[0],
        )
    # By name and kind of type, from df.schema alone: before any Spark job runs.
    check_schema(data_schema, table_schema)
    extra = [n for n in arrow_schema.names if n not in data_schema.names]
    return (*table_schema.names, *extra)


def _run_tasks(df: DataFrame, job: _WriteJob) -> list[CommitMessage]:
    ts = job.table_schema
    buckets = kind_of(ts).write_buckets
    if buckets:
        with_bucket = map_in_arrow(
            df,
            partial(_add_buckets, job),
            T.StructType([*df.schema.fields, T.StructField(BUCKET_COLUMN, T.IntegerType(), False)]),
        )
        keys = [*ts.partition_keys, BUCKET_COLUMN]
        parts = max(1, min(buckets, df.sparkSession.sparkContext.defaultParallelism * 4))
        df = with_bucket.repartition(parts, *[column(k) for k in keys]).drop(BUCKET_COLUMN)
    task = partial(raising_on_driver, partial(_write_task, job))
    results = latest_results(collect_tasks(map_in_arrow(df, task, RESULT_SCHEMA)))
    return [m for result in results for m in result]


def _add_buckets(job: _WriteJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    kind = kind_of(job.table_schema)
    for batch in batches:
        try:
            ids = kind.bucket_ids(pa.Table.from_batches([batch]))
        except RaylakeError:
            # Rows the writer refuses (a null key, a key that does not fit): any bucket
            # will do, and the write task raises the same error on the driver as itself.
            # Raised here, Spark retried the task and raised a PythonException.
            ids = pa.array(np.zeros(batch.num_rows, dtype=np.int32))
        yield batch.append_column(BUCKET_COLUMN, ids)


def _write_task(job: _WriteJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One Spark task: write its rows into data files, return its commit messages."""
    install_credentials(job.credentials)
    check_visible(job.file_io)  # or its files would be written where the driver won't look
    partition, attempt = task_attempt()
    prefix = f"{job.prefix}-p{partition}-a{attempt}"
    # A raylake error (a null in a key column, a value that does not fit) goes back to
    # the driver; the writer has deleted this task's files.
    with writing(create_writer(job.file_io, job.table_schema, file_prefix=prefix)) as writer:
        for batch in batches:
            if batch.num_rows:
                rows = pa.Table.from_batches([batch])
                if job.fill_missing:
                    rows = fill_missing_columns(rows, job.table_schema)
                writer.write(rows)
        yield result_batch([writer.prepare_commit()])


def _files(message: CommitMessage) -> list[Any]:
    return [*message.new_files, *message.changelog_files]


def _delete_job_files(job: _WriteJob, keep: Any) -> None:
    """Delete this job's data files that are not committed (failed or duplicate attempts)."""
    stale = [
        rel
        for rel, _ in job.file_io.list_files(DATA_DIR)
        if rel.rsplit("/", 1)[-1].startswith(job.prefix) and rel not in keep
    ]
    if stale:
        logger.info("deleting %d uncommitted files of Spark job %s", len(stale), job.prefix)
        job.file_io.delete_quietly(stale)


def _drop_if_created(tbl: Table, created: bool) -> None:
    """A table this call created for a write that failed is removed again."""
    if created:
        drop_new_table(tbl)
