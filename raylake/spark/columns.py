"""Spark column references to raylake table columns, by exact name.

A table column may be named ``user.name`` or ``x`y``: Spark reads an unquoted string
as a column path (``user.name`` as field ``name`` of struct ``user``), so every
reference raylake builds from a table column's name is backtick-quoted, and
``mapInArrow`` runs on positionally named columns (:func:`map_in_arrow`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

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
