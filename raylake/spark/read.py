"""Reading a raylake table as a Spark DataFrame equal to ``Table.to_arrow()``.

raylake plans on the driver (partition and statistics pruning, from manifests).
Append tables on local or cluster-visible paths are then read by Spark's own
Parquet reader over the planned files; primary-key tables, and tables Spark's
reader cannot read (a store Spark has no connector for here, nanosecond
timestamps, float16), go through raylake's reader on the executors: the splits
become a small DataFrame of split descriptors and ``mapInArrow`` reads (and, for
primary-key tables, merges) each one, bucket-aligned.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, DataFrameReader, SparkSession

from raylake.arguments import refuse_unknown_keywords
from raylake.expr import AlwaysTrue, Expr, referenced_columns, to_arrow
from raylake.format.schema import TableSchema
from raylake.spark.batches import to_spark_batch
from raylake.spark.columns import case_collisions, columns, map_in_arrow
from raylake.spark.credentials import broadcast_credentials, install_credentials
from raylake.spark.session import check_session
from raylake.spark.types import spark_arrow_schema, spark_schema_of
from raylake.table import Split, open_table
from raylake.table.projection import projection_of
from raylake.table.rowfilter import filter_rows, widen
from raylake.table.scan import ReadContext
from raylake.table.visible import refuse_process_local

ROWS_COLUMN = "_rl_rows"


@refuse_unknown_keywords
def read(
    spark: SparkSession,
    uri: str,
    *,
    columns: Sequence[str] | None = None,
    filter: str | Expr | None = None,
    snapshot_id: int | None = None,
    as_of: datetime | int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> DataFrame:
    """The rows of one snapshot (the latest unless ``snapshot_id``/``as_of``) as a DataFrame."""
    check_session(spark)
    refuse_process_local(uri, "raylake.spark.read")
    tbl = open_table(uri, storage_options=storage_options)
    scan = tbl.scan(columns=columns, filter=filter, snapshot_id=snapshot_id, as_of=as_of)
    splits = scan.plan()
    output = scan.output_schema
    spark_schema = spark_schema_of(output)
    if not splits:
        return spark.createDataFrame([], spark_schema)
    # Spark reads raylake's own files directly when they are stored as the table reads
    # them; other formats' files (a Paimon file maps columns by field id and may have
    # deleted rows) and files of older schema versions need raylake's reader.
    ts = scan.table_schema
    if (
        tbl.source.plain_files
        and not any(s.needs_merge for s in splits)
        and _spark_can_read(tbl.file_io, ts.arrow_schema)
        and _read_as_stored(tbl.file_io, ts, splits)
    ):
        return _read_with_spark(spark, scan.read_context(), splits)
    return _read_with_raylake(spark, scan.read_context(), splits)


def _read_as_stored(file_io: Any, ts: TableSchema, splits: Sequence[Split]) -> bool:
    """Whether every file has the scan's columns as stored: Spark's Parquet reader matches
    columns by name, files of other schema versions need raylake's mapping by field id."""
    return all(projection_of(file_io, ts, f.schema_id) is None for s in splits for f in s.files)


def _spark_can_read(file_io: Any, schema: pa.Schema) -> bool:
    # Names that differ only in case (a table written from pandas may hold `a` and `A`)
    # are one column to Spark's reader unless the session is case-sensitive: it refused
    # the table. raylake's reader hands Spark each column by position.
    return (
        file_io.is_local
        and all(_spark_parquet_type(f.type) for f in schema)
        and not case_collisions(schema)
    )


def _spark_parquet_type(dtype: pa.DataType) -> bool:
    """Whether Spark 3.5's Parquet reader reads what pyarrow writes for this type."""
    if pa.types.is_float16(dtype) or (pa.types.is_timestamp(dtype) and dtype.unit == "ns"):
        return False
    if pa.types.is_time(dtype) or pa.types.is_duration(dtype):
        return False
    if pa.types.is_struct(dtype):
        return all(_spark_parquet_type(dtype.field(i).type) for i in range(dtype.num_fields))
    if pa.types.is_map(dtype):
        return _spark_parquet_type(dtype.key_type) and _spark_parquet_type(dtype.item_type)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _spark_parquet_type(dtype.value_type)
    return not pa.types.is_fixed_size_list(dtype)


def _read_with_spark(spark: SparkSession, ctx: ReadContext, splits: Sequence[Split]) -> DataFrame:
    """Spark's Parquet reader over the planned files; the raylake filter on the rows."""
    ts = ctx.table_schema
    paths = list(dict.fromkeys(ctx.file_io.full_path(p) for s in splits for p in s.paths))
    output = list(ctx.output_schema.names)
    df = _parquet_reader(spark).schema(spark_schema_of(ts.arrow_schema)).parquet(*paths)
    if isinstance(ctx.filter, AlwaysTrue):
        return df.select(*columns(output))
    needed = widen(output, referenced_columns(ctx.filter), ts.column_names) or output
    # The filter runs in pyarrow on Spark's Arrow batches, with raylake's semantics
    # (NaN, nulls), so the rows are exactly those of Table.to_arrow().
    carried = _carrying_rows(ctx.output_schema)
    filtered = map_in_arrow(
        df.select(*columns(needed)),
        partial(_filter_batches, to_arrow(ctx.filter), tuple(output), spark_arrow_schema(carried)),
        spark_schema_of(carried),
    )  # fmt: skip
    return _without_rows_column(filtered, ctx.output_schema)


def _parquet_reader(spark: SparkSession) -> DataFrameReader:
    """Spark's Parquet reader, set to read the values pyarrow wrote.

    pyarrow writes dates and timestamps in the proleptic Gregorian calendar; under the
    session's default rebase mode Spark refuses a date before 1582-10-15 or a timestamp
    before 1900 (SparkUpgradeException), and under LEGACY it shifts them (1000-01-01 read
    as 0999-12-27). The reader options override the session's conf for this read only.
    Planned paths are file names, never patterns: without ``__globPaths__`` a table under
    a directory named ``runs[2024]`` or ``exp{a}`` is read as a glob that matches nothing.
    """
    return (
        spark.read.option("datetimeRebaseMode", "CORRECTED")
        .option("int96RebaseMode", "CORRECTED")
        .option("__globPaths__", "false")
    )


def _filter_batches(
    row_filter: pc.Expression,
    output: tuple[str, ...],
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    for batch in filter_rows(batches, row_filter, output):
        yield batch.cast(schema) if batch.num_columns else to_spark_batch(batch, schema)


def _read_with_raylake(spark: SparkSession, ctx: ReadContext, splits: Sequence[Split]) -> DataFrame:
    """One Spark task per split: raylake's reader (and merge) on the executors."""
    descriptors = spark.sparkContext.parallelize(
        [(i, pickle.dumps(s)) for i, s in enumerate(splits)], len(splits)
    ).toDF("index int, split binary")
    carried = _carrying_rows(ctx.output_schema)
    target = spark_arrow_schema(carried)
    # The DataFrame is lazy: the broadcast lives as long as Spark keeps the plan.
    credentials = broadcast_credentials(spark.sparkContext, ctx.file_io)
    rows = descriptors.mapInArrow(
        partial(_read_splits, ctx, target, credentials), spark_schema_of(carried)
    )
    return _without_rows_column(rows, ctx.output_schema)


def _carrying_rows(schema: pa.Schema) -> pa.Schema:
    """The schema of ``mapInArrow``'s batches for an output of ``schema``.

    Spark counts the rows of a ``mapInArrow`` batch by its columns, so a batch of no
    columns arrives as no rows (``read(columns=[])`` counted 0). A projection of no
    columns travels as one placeholder column, dropped in Spark after."""
    return schema if len(schema) else pa.schema([(ROWS_COLUMN, pa.bool_())])


def _without_rows_column(df: DataFrame, schema: pa.Schema) -> DataFrame:
    return df if len(schema) else df.select()


def _read_splits(
    ctx: ReadContext, target: pa.Schema, credentials: Any, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    install_credentials(credentials)
    for batch in batches:
        for blob in batch.column("split").to_pylist():
            split: Split = pickle.loads(blob)
            for rows in ctx.read(split):
                yield to_spark_batch(rows, target)
