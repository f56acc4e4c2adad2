"""Spark column references to raylake table columns, by exact name.

A table column may be named ``user.name`` or ``x`y``: Spark reads an unquoted string
as a column path (``user.name`` as field ``name`` of struct ``user``), so every
reference raylake builds from a table column's name is backtick-quoted, and
``mapInArrow`` runs on positionally named columns (:func:`map_in_arrow`).

Spark resolves names ignoring case unless ``spark.sql.caseSensitive`` is set, while a
raylake table (one written from pandas, say) may hold ``a`` and ``A``: such columns are
read through raylake's reader, and a write of them needs a case-sensitive session
(:func:`check_case_distinct`), as Spark's own Parquet writer does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from raylake.errors import SchemaError

ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def column(name: str) -> Column:
    """The column named ``name`` exactly (not a struct path, not a pattern)."""
    return F.col("`" + name.replace("`", "``") + "`")


def columns(names: Iterable[str]) -> list[Column]:
    return [column(n) for n in names]


def map_in_arrow(df: DataFrame, func: ArrowMap, schema: Any) -> DataFrame:
    """``df.mapInArrow(func, schema)`` for columns of any name.

    PySpark 3.5's ``mapInArrow`` looks each input column up as ``df[name]``, a path: a
    column named ``user.name`` does not resolve. The columns go in under positional
    names, and ``func`` sees its batches under their own."""
    names = tuple(df.columns)
    positional = df.toDF(*[f"_rl_c{i}" for i in range(len(names))])
    return positional.mapInArrow(partial(_named, func, names), schema)


def _named(
    func: ArrowMap, names: tuple[str, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    return func(_renamed(b, names) for b in batches)


def _renamed(batch: pa.RecordBatch, names: tuple[str, ...]) -> pa.RecordBatch:
    fields = [f.with_name(n) for f, n in zip(batch.schema, names)]
    return pa.RecordBatch.from_arrays(batch.columns, schema=pa.schema(fields))


def case_collisions(schema: pa.Schema | pa.StructType, nested: bool = True) -> list[str]:
    """Names (of columns, or of fields of one struct if ``nested``) that equal another's
    ignoring case: Spark's reader refuses them in a case-insensitive session."""
    seen: dict[str, str] = {}
    for field in schema:
        other = seen.setdefault(field.name.lower(), field.name)
        if other != field.name:
            return [other, field.name]
        if nested and pa.types.is_struct(field.type):
            inner = case_collisions(field.type)
            if inner:
                return [f"{field.name}.{n}" for n in inner]
    return []


def case_sensitive(spark: SparkSession) -> bool:
    return str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"


def check_case_distinct(df: DataFrame, schema: pa.Schema) -> None:
    """Refuse, on the driver, a DataFrame whose columns Spark cannot tell apart: in a
    case-insensitive session ``a`` and ``A`` are one ambiguous reference (Spark's
    ``AnalysisException`` came out, after the table was created)."""
    collision = case_collisions(schema, nested=False)  # a struct's fields are not referenced
    if collision and not case_sensitive(df.sparkSession):
        raise SchemaError(
            f"the DataFrame has columns {collision[0]!r} and {collision[1]!r}, which this "
            "Spark session does not tell apart (spark.sql.caseSensitive is false): set "
            "spark.conf.set('spark.sql.caseSensitive', 'true') or rename one; nothing "
            "was written"
        )


def with_table_case(df: DataFrame, names: Sequence[str]) -> DataFrame:
    """``df`` with each column that names a table column in another case (``ID`` for
    ``id``) renamed to the table's spelling, in a case-insensitive session.

    Spark resolves names ignoring case there, and its own writers (Parquet's
    ``mergeSchema``, Delta) write ``ID`` into ``id``; matched exactly, a write was
    refused, and one with ``schema_mode="merge"`` added a second column ``ID`` and wrote
    the rows' ids as nulls into ``id``. A name two table columns share ignoring case
    (``a`` and ``A``) is left as it is: it is only matched exactly."""
    if case_sensitive(df.sparkSession):
        return df
    exact = set(names)
    spellings: dict[str, list[str]] = {}
    for name in names:
        spellings.setdefault(name.lower(), []).append(name)
    renamed = {}
    for name in df.columns:
        match = spellings.get(name.lower(), [])
        if name not in exact and len(match) == 1:
            renamed[name] = match[0]
    if not renamed:
        return df
    return df.select(*[column(n).alias(renamed.get(n, n)) for n in df.columns])
