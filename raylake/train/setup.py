"""What every loader sets up the same way (torch, TensorFlow, Ray): the table, the
batch layout and its columnar converter, the pinned source, and the batch structure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from raylake.expr import Expr
from raylake.table import Table
from raylake.train.convert import FEATURES, Converter, FillNull, Layout
from raylake.train.source import LakeSource, table_of

T = TypeVar("T")

DEFAULT_SHUFFLE_WINDOW = 1 << 16
"""Rows shuffled together within a piece (``shuffle_window=``)."""


def check_rank(rank: int | None, world_size: int | None) -> None:
    if (rank is None) != (world_size is None):
        raise ValueError("pass both rank and world_size, or neither")


def converter_for(
    schema: pa.Schema,
    *,
    columns: Sequence[str] | None,
    feature_columns: Sequence[str] | None,
    label_column: str | None,
    target: str,
    dtype: np.dtype | None,
    fill_null: FillNull,
    strings: bool = False,
) -> Converter:
    """The conversion of rows of ``schema`` to the batches the user asked for."""
    layout = Layout.of(
        schema, columns=columns, feature_columns=feature_columns, label_column=label_column
    )
    return Converter(
        schema, layout, target=target, strings=strings, dtype=dtype, fill_null=fill_null
    )


def table_and_converter(
    table: str | Table,
    *,
    storage_options: Mapping[str, Any] | None,
    columns: Sequence[str] | None,
    feature_columns: Sequence[str] | None,
    label_column: str | None,
    target: str,
    dtype: np.dtype | None,
    fill_null: FillNull,
    strings: bool = False,
    snapshot_id: int | None = None,
) -> tuple[Table, Converter]:
    """The table, and the conversion of its rows to the batches the user asked for (rows
    of the schema of snapshot ``snapshot_id``, when one is pinned: issue 18)."""
    tbl = table_of(table, storage_options)
    schema = tbl.schema if snapshot_id is None else tbl.schema_at(snapshot_id)
    converter = converter_for(
        schema,
        columns=columns,
        feature_columns=feature_columns,
        label_column=label_column,
        target=target,
        dtype=dtype,
        fill_null=fill_null,
        strings=strings,
    )
    return tbl, converter


def open_source(
    table: str | Table,
    *,
    filter: str | Expr | None,
    snapshot_id: int | None,
    storage_options: Mapping[str, Any] | None,
    columns: Sequence[str] | None,
    feature_columns: Sequence[str] | None,
    label_column: str | None,
    target: str,
    dtype: np.dtype | None,
    fill_null: FillNull,
    strings: bool = False,
) -> tuple[LakeSource, Converter]:
    """The pinned snapshot's pieces with their counts, and the conversion of their rows."""
    tbl, converter = table_and_converter(
        table,
        storage_options=storage_options,
        columns=columns,
        feature_columns=feature_columns,
        label_column=label_column,
        target=target,
        dtype=dtype,
        fill_null=fill_null,
        strings=strings,
        snapshot_id=snapshot_id,
    )
    columns = converter.layout.columns
    source = LakeSource.open(tbl, columns=columns, filter=filter, snapshot_id=snapshot_id)
    return source, converter


def structure(layout: Layout, values: Mapping[str, T]) -> Any:
    """A converted block in the user's batch structure: ``features``, ``(features,
    label)``, a dict of the named columns, or ``(dict, label)``."""
    if layout.features is not None:
        features = values[FEATURES]
        return features if layout.label is None else (features, values[layout.label])
    named = {c: values[c] for c in layout.named}
    return named if layout.label is None else (named, values[layout.label])
