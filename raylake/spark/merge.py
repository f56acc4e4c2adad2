"""``raylake.spark.merge``: MERGE INTO a raylake table from a Spark DataFrame.

Primary-key tables, as ``raylake.spark.write`` does for upserts: a first pass tags
each row with its bucket (the writer's hash), Spark repartitions by it so that each
bucket's source rows reach one task, and each task looks up its buckets' current
rows, applies the clauses and writes the changed rows (``Table.merge``'s code).

Append tables, as ``raylake.merge_lake`` does: the source is collected once and
broadcast; the target files that may match are dealt among tasks, each joining its
files (a batch of about 256 MiB at a time) with the whole source and rewriting those
holding changed rows; the driver then inserts the source rows no task matched.

Either way the driver commits the tasks' messages as one snapshot with
``Table.merge``'s conflict rule, retrying the whole job on the new state; files of
failed or discarded task attempts are deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.broadcast import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from raylake.arguments import refuse_unknown_keywords
from raylake.errors import CommitConflictError, UnsupportedOperationError
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.spark.columns import map_in_arrow
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
from raylake.table.merge.builder import MergeResult, TableMerger
from raylake.table.merge.plan import Clause, JoinOn
from raylake.table.merge.primary_key import source_bucket_ids
from raylake.table.source import check_writable
from raylake.table.visible import refuse_process_local
from raylake.table.writer import DATA_DIR

BUCKET_COLUMN = "_rl_spark_merge_bucket"


@refuse_unknown_keywords
def merge(
    df: DataFrame,
    uri: str,
    on: Any,
    *,
    schema_mode: str = "strict",
    storage_options: Mapping[str, Any] | None = None,
) -> SparkMerger:
    """A merge builder whose source is ``df``: add clauses as for :meth:`Table.merge`,
    then ``execute()`` runs one Spark job and commits once from the driver.

    Append tables: any merge. Primary-key tables: merged on their key, without
    by-source clauses; other merges are refused by name (collect the rows and use
    ``Table.merge``).
    """
    import raylake

    check_dataframe(df)
    refuse_process_local(uri, "raylake.spark.merge")
    schema = arrow_schema_of(df.schema)
    tbl = raylake.open_table(uri, storage_options=storage_options)
    check_writable(tbl, "merge()")  # a Paimon table: refused, naming its format
    return SparkMerger(tbl, df, schema, on, schema_mode=schema_mode)


@dataclass(frozen=True)
class _MergeJob:
    file_io: FileIO
    table_schema: TableSchema
    snapshot_id: int | None
    on: JoinOn
    clauses: tuple[Clause, ...]
    prefix: str
    credentials: Any = None


class SparkMerger(TableMerger):
    def __init__(self, tbl: Any, df: DataFrame, schema: pa.Schema, on: Any, **kw: Any) -> None:
        super().__init__(tbl, schema.empty_table(), on, **kw)
        self._df = df

    def checked(self) -> tuple[Any, pa.Table, JoinOn, tuple[Clause, ...]]:
        """The builder's checks, and the source's column types against the target's.

        The builder checks types on the source's rows, and this source has none on the
        driver (only the DataFrame's schema): without this a string column into a double
        column failed only in the tasks, after Spark jobs had started."""
        from raylake.table.conform import check_types

        tbl, source, on, clauses = super().checked()
        check_types(self._source.schema, tbl.table_schema.arrow_schema)
        return tbl, source, on, clauses

    def execute(self) -> MergeResult:
        from raylake.format.snapshot import SnapshotManager
        from raylake.table.merge.builder import conform_source
        from raylake.table.merge.commit import check_schema_current
        from raylake.table.merge.execute import with_attempts

        tbl, empty, on, clauses = self.checked()
        split = _split(tbl, on, clauses)
        # An append merge joins every task's files with the whole source: collected
        # once, before any attempt, and broadcast to the tasks.
        collected = _collect_source(self._df, empty) if split == "file" else None
        sc = self._df.sparkSession.sparkContext

        def attempt() -> MergeResult:
            # Checked each attempt, as Table.merge does: a retry after a concurrent schema
            # change merges under the new schema, and keeps the columns it added.
            tbl, _, on, clauses = self.checked()
            _split(tbl, on, clauses)
            source = None if collected is None else conform_source(collected, tbl.schema, on)
            snap = SnapshotManager(tbl.file_io).latest()
            check_schema_current(tbl, snap)
            job = _MergeJob(
                tbl.file_io,
                tbl.table_schema,
                snap.id if snap else None,
                on,
                clauses,
                f"spark-merge-{uuid.uuid4().hex[:16]}",
                broadcast_credentials(sc, tbl.file_io),
            )
            try:
                try:
                    if source is None:
                        return _merge_primary_key(self._df, tbl, snap, job)
                    return _merge_append(self._df, tbl, snap, job, source)
                finally:
                    destroy(job.credentials)
            except CommitConflictError:
                raise  # tried again
            except BaseException:
                _delete_job_files(job, keep=set())
                raise

        return self.adopt_schema(with_attempts(attempt))


def _split(tbl: Any, on: JoinOn, clauses: tuple[Clause, ...]) -> str:
    from raylake.table.merge.execute import split_by

    split = split_by(tbl.table_schema, on, clauses)
    if split is None:
        raise UnsupportedOperationError(
            "raylake.spark.merge merges into a primary-key table on its primary key, "
            "without when_not_matched_by_source clauses; for other merges use "
            "raylake.merge_lake or Table.merge"
        )
    return split


def _merge_primary_key(df: DataFrame, tbl: Any, snap: Any, job: _MergeJob) -> MergeResult:
    from raylake.table.merge.primary_key import commit_primary_key_parts

    parts = _run(df, job)
    _delete_job_files(job, _kept(parts))  # discarded task attempts
    return commit_primary_key_parts(tbl, snap, parts)


def _merge_append(
    df: DataFrame, tbl: Any, snap: Any, job: _MergeJob, source: pa.Table
) -> MergeResult:
    from raylake.table.merge.execute import candidate_files, finish_append, pruning_for
    from raylake.table.merge.plan import NOT_MATCHED

    pruning = pruning_for(job.on, source, job.table_schema, job.clauses)
    files = candidate_files(tbl, snap, pruning)
    updates = tuple(c for c in job.clauses if c.group != NOT_MATCHED)
    parts: list[Any] = []
    if files:  # also without update clauses: which source rows match decides the inserts
        sc = df.sparkSession.sparkContext
        tasks = max(1, min(len(files), sc.defaultParallelism * 2))
        groups = [files[i::tasks] for i in range(tasks)]
        shared = sc.broadcast((_to_ipc(source), groups))
        try:
            task = partial(raising_on_driver, partial(_merge_files_task, job, updates, shared))
            spark = df.sparkSession
            rows = spark.range(0, tasks, numPartitions=tasks).mapInArrow(task, RESULT_SCHEMA)
            parts = latest_results(collect_tasks(rows))
        finally:
            destroy(shared)
    _delete_job_files(job, _kept(parts))  # discarded task attempts
    return finish_append(
        tbl, snap, files, parts, source, job.on, job.clauses, file_prefix=f"{job.prefix}-driver"
    )


def _kept(parts: list[Any]) -> set[str]:
    return {f.path for p in parts for m in p.messages for f in m.new_files}


def _run(df: DataFrame, job: _MergeJob) -> list[Any]:
    ts = job.table_schema
    source_of = dict(job.on.pairs)
    with_bucket = map_in_arrow(
        df,
        partial(_add_buckets, job, [source_of[k] for k in ts.primary_key]),
        T.StructType([*df.schema.fields, T.StructField(BUCKET_COLUMN, T.IntegerType(), False)]),
    )
    parts = max(1, min(ts.buckets, df.sparkSession.sparkContext.defaultParallelism * 4))
    spread = with_bucket.repartition(parts, F.col(BUCKET_COLUMN))
    return latest_results(
        collect_tasks(
            map_in_arrow(
                spread, partial(raising_on_driver, partial(_merge_task, job)), RESULT_SCHEMA
            )
        )
    )


def _add_buckets(
    job: _MergeJob, key_names: list[str], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        ids = source_bucket_ids(job.table_schema, batch, key_names)
        yield batch.append_column(BUCKET_COLUMN, ids)


def _merge_task(job: _MergeJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from raylake.format.snapshot import SnapshotManager
    from raylake.table.merge.builder import conform_source
    from raylake.table.merge.primary_key import primary_key_part
    from raylake.table.table import Table

    install_credentials(job.credentials)
    partition, attempt = task_attempt()
    received = list(batches)
    if not received:  # a partition no bucket hashed to
        return
    rows = pa.Table.from_batches(received)
    tbl = Table(job.file_io, job.table_schema)
    snap = None if job.snapshot_id is None else SnapshotManager(job.file_io).get(job.snapshot_id)
    part = None
    if rows.num_rows:
        source = conform_source(rows.drop_columns([BUCKET_COLUMN]), tbl.schema, job.on)
        prefix = f"{job.prefix}-p{partition}-a{attempt}"
        part = primary_key_part(tbl, snap, source, job.on, job.clauses, file_prefix=prefix)
    if part is not None:
        yield result_batch([part])


def _merge_files_task(
    job: _MergeJob,
    clauses: tuple[Clause, ...],
    shared: Broadcast[tuple[bytes, list[list[Any]]]],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """One task of an append merge: for each group index received, join that group's
    target files with the whole source, a batch of files at a time (bounded memory)."""
    from raylake.format.snapshot import SnapshotManager
    from raylake.table.merge.execute import BATCH_BYTES, append_part, batches_of
    from raylake.table.table import Table

    install_credentials(job.credentials)
    partition, attempt = task_attempt()
    ipc, groups = shared.value
    source = pa.ipc.open_stream(ipc).read_all()
    tbl = Table(job.file_io, job.table_schema)
    snap = None if job.snapshot_id is None else SnapshotManager(job.file_io).get(job.snapshot_id)
    prefix = f"{job.prefix}-p{partition}-a{attempt}"
    for batch in batches:
        for index in batch.column(0).to_pylist():
            parts = [
                append_part(tbl, snap, files, source, job.on, clauses, file_prefix=prefix)
                for files in batches_of(groups[index], BATCH_BYTES)
            ]
            yield result_batch(parts)


def _collect_source(df: DataFrame, empty: pa.Table) -> pa.Table:
    """The DataFrame's rows on the driver as one Arrow table, conformed to the target's
    types like ``empty`` (Arrow IPC from the tasks, no per-row Python)."""
    from raylake.table.merge.builder import conform_source

    blobs = map_in_arrow(df, _batches_to_ipc, "ipc binary").collect()
    tables = [pa.ipc.open_stream(row.ipc).read_all() for row in blobs]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return empty
    return conform_source(pa.concat_tables(tables, promote_options="default"), empty.schema)


def _batches_to_ipc(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:  # one row per batch: far below Spark's 2 GiB per value
        if batch.num_rows:
            yield pa.RecordBatch.from_pydict(
                {"ipc": [_to_ipc(pa.Table.from_batches([batch]))]},
                schema=pa.schema([("ipc", pa.binary())]),
            )


def _to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _delete_job_files(job: _MergeJob, keep: set[str]) -> None:
    stale = [
        rel
        for rel, _ in job.file_io.list_files(DATA_DIR)
        if rel.rsplit("/", 1)[-1].startswith(job.prefix) and rel not in keep
    ]
    job.file_io.delete_quietly(stale)
