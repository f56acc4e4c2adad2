"""``raylake.spark.merge``: MERGE INTO a primary-key table from a Spark DataFrame
(append tables: ``raylake.merge_lake`` or ``Table.merge``).

As ``raylake.spark.write`` does for upserts: a first pass tags each row with its
bucket (the writer's hash), Spark repartitions by it so that each bucket's source
rows reach one task, and each task looks up its buckets' current rows, applies the
clauses and writes the changed rows (``Table.merge``'s code). The driver commits
the tasks' messages as one snapshot with ``Table.merge``'s conflict rule, retrying
the whole job on the new state; files of failed or discarded attempts are deleted.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from raylake.arguments import refuse_unknown_keywords
from raylake.errors import CommitConflictError, UnsupportedOperationError
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.spark.credentials import broadcast_credentials, destroy, install_credentials
from raylake.spark.session import check_dataframe
from raylake.spark.types import arrow_schema_of
from raylake.table.merge.builder import MergeResult, TableMerger
from raylake.table.merge.plan import Clause, JoinOn
from raylake.table.writer import DATA_DIR

BUCKET_COLUMN = "_rl_spark_merge_bucket"
_RESULT_SCHEMA = "partition int, attempt int, part binary"


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

    Primary-key tables merged on their key, without by-source clauses; anything else
    is refused by name (collect the rows and use ``Table.merge``).
    """
    import raylake

    check_dataframe(df)
    schema = arrow_schema_of(df.schema)
    tbl = raylake.open_table(uri, storage_options=storage_options)
    if not tbl.source.writable:  # a Paimon table: refused, naming its format
        raise tbl.source.refuse_writes("merge()")
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

    def execute(self) -> MergeResult:
        from raylake.format.snapshot import SnapshotManager
        from raylake.table.merge.execute import (
            MAX_ATTEMPTS,
            commit_primary_key_parts,
            split_by,
        )

        tbl, _, on, clauses = self.checked()
        if split_by(tbl.table_schema, on, clauses) != "bucket":
            raise UnsupportedOperationError(
                "raylake.spark.merge merges into a primary-key table on its primary key, "
                "without when_not_matched_by_source clauses; for other merges use "
                "raylake.merge_lake or Table.merge"
            )
        for attempt in range(1, MAX_ATTEMPTS + 1):
            snap = SnapshotManager(tbl.file_io).latest()
            credentials = broadcast_credentials(self._df.sparkSession.sparkContext, tbl.file_io)
            job = _MergeJob(
                tbl.file_io,
                tbl.table_schema,
                snap.id if snap else None,
                on,
                clauses,
                f"spark-merge-{uuid.uuid4().hex[:16]}",
                credentials,
            )
            parts: list[Any] = []
            try:
                try:
                    parts = _run(self._df, job)
                finally:
                    destroy(job.credentials)
                keep = {f.path for p in parts for m in p.messages for f in m.new_files}
                _delete_job_files(job, keep)  # discarded task attempts
                result = commit_primary_key_parts(tbl, snap, parts)
            except CommitConflictError:
                if attempt == MAX_ATTEMPTS:
                    raise
                continue
            except BaseException:
                _delete_job_files(job, keep=set())
                raise
            return MergeResult(**{**result.__dict__, "attempts": attempt})
        raise AssertionError("unreachable")


def _run(df: DataFrame, job: _MergeJob) -> list[Any]:
    ts = job.table_schema
    source_of = dict(job.on.pairs)
    with_bucket = df.mapInArrow(
        partial(_add_buckets, job, [source_of[k] for k in ts.primary_key]),
        T.StructType([*df.schema.fields, T.StructField(BUCKET_COLUMN, T.IntegerType(), False)]),
    )
    parts = max(1, min(ts.buckets, df.sparkSession.sparkContext.defaultParallelism * 4))
    spread = with_bucket.repartition(parts, F.col(BUCKET_COLUMN))
    rows = spread.mapInArrow(partial(_merge_task, job), _RESULT_SCHEMA).collect()
    latest: dict[int, tuple[int, bytes]] = {}
    for row in rows:  # one successful attempt per partition
        if row.partition not in latest or row.attempt > latest[row.partition][0]:
            latest[row.partition] = (row.attempt, row.part)
    return [pickle.loads(blob) for _, blob in latest.values()]


def _add_buckets(
    job: _MergeJob, key_names: list[str], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    from raylake.table.kind import kind_of

    kind = kind_of(job.table_schema)
    for batch in batches:
        keys = pa.table(
            {k: batch.column(s) for k, s in zip(job.table_schema.primary_key, key_names)}
        )
        valid = np.ones(batch.num_rows, dtype=bool)
        for column in keys.columns:  # a null key matches nothing: any bucket will do
            valid &= pc.is_valid(column).to_numpy(zero_copy_only=False)
        ids = np.zeros(batch.num_rows, dtype=np.int32)
        if valid.any():
            ids[valid] = kind.bucket_ids(keys.filter(pa.array(valid))).to_numpy()
        yield batch.append_column(BUCKET_COLUMN, pa.array(ids))


def _merge_task(job: _MergeJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from raylake.format.snapshot import SnapshotManager
    from raylake.table.merge.builder import conform_source
    from raylake.table.merge.execute import primary_key_part
    from raylake.table.table import Table

    install_credentials(job.credentials)
    context = TaskContext.get()
    partition = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    received = list(batches)
    if not received:  # a partition no bucket hashed to
        return
    rows = pa.Table.from_batches(received)
    tbl = Table(job.file_io, job.table_schema)
    snap = None if job.snapshot_id is None else SnapshotManager(job.file_io).get(job.snapshot_id)
    part = None
    if rows.num_rows:
        source = conform_source(rows.drop_columns([BUCKET_COLUMN]), tbl.schema)
        prefix = f"{job.prefix}-p{partition}-a{attempt}"
        part = primary_key_part(tbl, snap, source, job.on, job.clauses, file_prefix=prefix)
    if part is not None:
        yield pa.RecordBatch.from_pydict(
            {"partition": [partition], "attempt": [attempt], "part": [pickle.dumps(part)]},
            schema=pa.schema(
                [("partition", pa.int32()), ("attempt", pa.int32()), ("part", pa.binary())]
            ),
        )


def _delete_job_files(job: _MergeJob, keep: set[str]) -> None:
    stale = [
        rel
        for rel, _ in job.file_io.list_files(DATA_DIR)
        if rel.rsplit("/", 1)[-1].startswith(job.prefix) and rel not in keep
    ]
    job.file_io.delete_quietly(stale)
