"""What every loader sets up the same way (torch, TensorFlow, Ray): the table, the
batch layout and its columnar converter, the pinned source, and the batch structure.

The loaders' public constructors take keywords (what torch and TensorFlow users
expect); each turns them, once, into two small frozen values that travel from there
instead of the keywords:

- :class:`TableRows`: which rows to read (the table, the filter, the snapshot, the
  storage options);
- :class:`BatchSpec`: what a batch of those rows becomes (the columns and their
  grouping, the target's dtype and null filling).

They are two, not one, because they are needed apart: ``iter_torch_batches`` converts
Ray blocks with no table to read, and the continual dataset reads a stream, not one
pinned snapshot (no ``snapshot_id``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from raylake.arguments import check_integer, check_names
from raylake.errors import InvalidArgumentError, SchemaArgumentError
from raylake.expr import Expr
from raylake.table import Table
from raylake.table.args import columns_arg
from raylake.train.convert import FEATURES, Converter, FillNull, Layout
from raylake.train.source import LakeSource, table_of

T = TypeVar("T")

DEFAULT_SHUFFLE_WINDOW = 1 << 16
"""Rows shuffled together within a piece (``shuffle_window=``)."""


def check_rank(rank: int | None, world_size: int | None) -> tuple[int | None, int | None]:
    """Both None, or ``0 <= rank < world_size`` (ints, numpy ones too): a wrong one fails
    here, not in the first batch (a tf.data pipeline used to raise it from inside
    TensorFlow's iterator). Returns them as Python ints."""
    if (rank is None) != (world_size is None):
        raise InvalidArgumentError(
            "world_size" if world_size is None else "rank",
            world_size if world_size is None else rank,
            "given together with the other (pass both rank and world_size, or neither)",
        )
    if world_size is None:
        return None, None
    checked = check_integer("rank", rank), check_integer("world_size", world_size, 1)
    if checked[0] >= checked[1]:
        raise InvalidArgumentError("rank", rank, f"an int in [0, world_size={world_size})")
    return checked


@dataclass(frozen=True)
class TableRows:
    """The rows a loader reads: of ``table`` (a Table, or a URI opened with
    ``storage_options``), kept by ``filter``, of snapshot ``snapshot_id`` or of the one
    current at ``as_of`` (a datetime or epoch millis; neither: the latest), pinned when
    the loader is made."""

    table: str | Table
    filter: str | Expr | None = None
    snapshot_id: int | None = None
    # Credentials: out of reprs (an error or a log line may show the value).
    storage_options: Mapping[str, Any] | None = field(default=None, repr=False)
    as_of: datetime | int | None = None

    def open(self) -> Table:
        return table_of(self.table, self.storage_options)

    def snapshot_of(self, tbl: Table) -> int | None:
        """The id of the snapshot to pin, as time travel resolves (and checks) it: found
        once, so that every worker and rank reads that snapshot, and a saved position
        names it. None: the latest, which the source pins."""
        if self.as_of is None:
            return self.snapshot_id
        snap = tbl.scan(snapshot_id=self.snapshot_id, as_of=self.as_of).snapshot()
        return None if snap is None else snap.id


@dataclass(frozen=True)
class BatchSpec:
    """What a batch of rows becomes: the user's ``columns`` / ``feature_columns`` /
    ``label_column`` (docs/training.md, "Batches"), arrays for ``target`` (named in
    errors) cast to ``dtype`` (numpy's), nulls filled with ``fill_null``, and strings
    kept as object arrays where ``strings`` (TensorFlow), or binary and string columns
    handed on as row positions for a transform where ``binary`` (raylake/train/binary.py)."""

    columns: Sequence[str] | None
    feature_columns: Sequence[str] | None
    label_column: str | None
    target: str
    dtype: np.dtype | None
    fill_null: FillNull
    strings: bool = False
    binary: bool = False

    def __post_init__(self) -> None:
        columns_arg(self.columns)  # a str is refused: columns='id' is not ['i', 'd']
        features = self.feature_columns
        # Checked here, before the table is opened: a pandas Index or an int failed inside
        # the layout with pandas' "truth value is ambiguous" or a bare TypeError. One
        # string is one feature column (Layout.of); a set has no order to stack them in.
        if features is not None and not isinstance(features, str):
            if isinstance(features, AbstractSet):
                raise SchemaArgumentError(
                    "feature_columns", features, "a list of column names, in the order to "
                    "stack them (a set has none)",
                )  # fmt: skip
            check_names("feature_columns", features, SchemaArgumentError)
        if self.label_column is not None and not isinstance(self.label_column, str):
            raise SchemaArgumentError("label_column", self.label_column, "a column name or None")

    def converter(self, schema: pa.Schema) -> Converter:
        """The conversion of rows of ``schema`` to these batches (bad columns, types and
        fill values raise here, before anything is read)."""
        layout = Layout.of(
            schema,
            columns=self.columns,
            feature_columns=self.feature_columns,
            label_column=self.label_column,
        )
        return Converter(
            schema,
            layout,
            target=self.target,
            strings=self.strings,
            binary=self.binary,
            dtype=self.dtype,
            fill_null=self.fill_null,
        )


def table_and_converter(rows: TableRows, spec: BatchSpec) -> tuple[Table, Converter]:
    """The table, and the conversion of its rows to the batches the user asked for (rows
    of the table's latest schema: a stream's, which pins no snapshot)."""
    tbl = rows.open()
    return tbl, spec.converter(tbl.schema)


def open_source(rows: TableRows, spec: BatchSpec) -> tuple[LakeSource, Converter]:
    """The pinned snapshot's pieces with their counts, and the conversion of their rows
    (of the schema of that snapshot, when one is named: issue 18)."""
    tbl = rows.open()
    snapshot_id = rows.snapshot_of(tbl)
    converter = spec.converter(tbl.schema if snapshot_id is None else tbl.schema_at(snapshot_id))
    source = LakeSource.open(
        tbl,
        columns=converter.layout.columns,
        filter=rows.filter,
        snapshot_id=snapshot_id,
    )
    return source, converter


def structures(layout: Layout, runs: Mapping[str, Sequence[T]]) -> Iterable[Any]:
    """Many batches at once in the user's structure: ``runs`` holds each column group's
    batches in order (what ``structure`` makes of one batch, for each of them; the
    structures are made by zips, not by a Python call per batch)."""
    if layout.features is not None:
        features = runs[FEATURES]
        return features if layout.label is None else zip(features, runs[layout.label])
    names, label = layout.named, layout.label
    if names:
        named = [dict(zip(names, values)) for values in zip(*(runs[c] for c in names))]
    else:  # the label alone: an empty dict beside each label
        named = [{} for _ in runs[label]] if label is not None else []
    return named if label is None else zip(named, runs[label])


def structure(layout: Layout, values: Mapping[str, T]) -> Any:
    """A converted block in the user's batch structure: ``features``, ``(features,
    label)``, a dict of the named columns, or ``(dict, label)``."""
    if layout.features is not None:
        features = values[FEATURES]
        return features if layout.label is None else (features, values[layout.label])
    named = {c: values[c] for c in layout.named}
    return named if layout.label is None else (named, values[layout.label])
