"""Reading a data file written under one schema version as rows of another (issue 18).

The one place where schema evolution meets data: every reader (append scans,
primary-key merges and late materialization, changes and changelogs, and so
the Ray datasource, loaders, Spark and streams above them) asks
:func:`projection_of` how a file reads under the scan's schema. Columns are
matched by field id: a renamed column is read under its old name, a widened one
is cast, a column added later reads as nulls, a dropped one is never read.

A file written under the scan's own schema, or under one whose columns have the
same names and types, has no projection (None): readers then take their usual
path unchanged, so a table that never evolved pays nothing. A dataset scan also
reads files whose columns were only widened, added or deleted in its one scan
(:attr:`FileProjection.by_name`); only renamed columns need a scan of their own.

Two forms, for the two ways files are read:

- Parquet reads by column name (``ParquetFile.read``, ``iter_batches``):
  :meth:`FileProjection.file_columns` names the stored columns to read, and
  :meth:`FileProjection.conform` turns what was read into the scan's columns.
- ``pyarrow.dataset`` scans: :meth:`FileProjection.view_schema` is the dataset
  schema under the file's names and the scan's types (pyarrow casts, and fills
  absent columns with nulls, before filtering, so Parquet statistics still prune
  row groups correctly), :meth:`FileProjection.dataset_columns` renames back,
  and :meth:`FileProjection.filter` puts a filter in the file's names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import SchemaEvolutionError
from raylake.expr import (
    AlwaysTrue,
    Expr,
    Predicate,
    referenced_columns,
    to_arrow,
    visit,
)
from raylake.expr.visitor import ExprRewriter
from raylake.format.schema import SYSTEM_PREFIX, TableSchema
from raylake.format.schema_files import schema_by_id
from raylake.io import FileIO

ArrowData = TypeVar("ArrowData", pa.Table, pa.RecordBatch)
# Names of columns a file does not have, in a dataset's view schema: the reserved
# prefix never names a stored column, so pyarrow reads them as nulls.
_ABSENT = f"{SYSTEM_PREFIX}absent_"


@dataclass(frozen=True)
class FileProjection:
    """How files of one schema version read under the scan's schema."""

    # Scan column -> the file's name for it, or None when the file predates it.
    sources: Mapping[str, str | None]
    # Scan column -> its field in the scan's schema (name, type, nullability).
    fields: Mapping[str, pa.Field]
    # Whether a dataset scan may read the files by name under the scan's schema: no
    # column was renamed, and no stored column has the name of a scan column it is not
    # (a deleted column whose name was given to a new one). pyarrow then casts widened
    # columns and fills the missing ones with nulls itself.
    by_name: bool = False
    # How a stored column becomes its scan type: ``cast(column, values, type)``; None is
    # Arrow's cast (a format with its own cast rules, as Paimon, gives one, and no
    # dataset scan may then read the files by name).
    caster: Callable[[str, Any, pa.DataType], Any] | None = None

    def source(self, column: str) -> str | None:
        """The stored name of a scan column (system columns keep theirs)."""
        return self.sources.get(column, column)

    def file_columns(self, columns: Sequence[str]) -> list[str]:
        """The stored columns to read for ``columns`` (those the file has)."""
        found = (self.source(c) for c in columns)
        return [c for c in found if c is not None]

    def conform(self, data: ArrowData, columns: Sequence[str]) -> ArrowData:
        """Rows read with :meth:`file_columns` as the scan's ``columns``."""
        arrays, fields = [], []
        for c in columns:
            source = self.source(c)
            if c not in self.fields:  # a system column
                i = data.schema.get_field_index(c)
                arrays.append(data.column(i))
                fields.append(data.schema.field(i))
                continue
            target = self.fields[c]
            if source is None:
                arrays.append(pa.nulls(data.num_rows, target.type))
            else:
                column = data.column(source)
                if self.caster is not None:  # even to an equal Arrow type (a wall clock
                    arrays.append(self.caster(c, column, target.type))  # from an instant)
                elif column.type.equals(target.type):
                    arrays.append(column)
                else:
                    arrays.append(column.cast(target.type))
            fields.append(target)
        schema = pa.schema(fields)
        if isinstance(data, pa.RecordBatch):
            return pa.RecordBatch.from_arrays(arrays, schema=schema)
        if not arrays:
            return pa.table({"n": pa.nulls(data.num_rows)}).select([])
        return pa.Table.from_arrays(arrays, schema=schema)

    def view_schema(self, schema: pa.Schema) -> pa.Schema:
        """A dataset schema for these files: stored names, the scan's types."""
        return pa.schema([f.with_name(self._view_name(f.name)) for f in schema])

    def dataset_columns(self, columns: Sequence[str]) -> dict[str, pc.Expression]:
        """The ``columns=`` of a scan over :meth:`view_schema` that yields scan names."""
        return {c: pc.field(self._view_name(c)) for c in columns}

    def filter(self, expr: Expr) -> pc.Expression | None:
        """A filter on scan columns as a pyarrow filter over :meth:`view_schema`."""
        if isinstance(expr, AlwaysTrue):
            return None
        mapping = {c: self._view_name(c) for c in self.sources}
        return to_arrow(visit(expr, _Rename(mapping)))

    def _view_name(self, column: str) -> str:
        source = self.source(column)
        return source if source is not None else f"{_ABSENT}{column}"


def projection_of(file_io: FileIO, ts: TableSchema, schema_id: int) -> FileProjection | None:
    """How files written under ``schema_id`` read under ``ts`` (None: as they are)."""
    if schema_id == ts.schema_id:
        return None
    return ts.derived(
        f"projection.{schema_id}", lambda: _projection(ts, schema_by_id(file_io, schema_id))
    )


def _projection(ts: TableSchema, written: TableSchema) -> FileProjection | None:
    return projection_between(ts, written.names_by_id, written.arrow_schema)


def projection_between(
    ts: TableSchema, stored_names: Mapping[int, str], stored: pa.Schema
) -> FileProjection | None:
    """How files stored as ``stored`` (their column names by field id) read under ``ts``;
    None when they read as they are. Any format with field ids maps its files here
    (raylake's own versions, Paimon's schema files)."""
    stored_set = set(stored.names)
    sources: dict[str, str | None] = {}
    same = by_name = True
    for fid, f in zip(ts.field_ids, ts.arrow_schema):
        source = stored_names.get(fid)
        sources[f.name] = source
        if source != f.name or not stored.field(source).equals(f):
            same = False
        if source != f.name and (source is not None or f.name in stored_set):
            by_name = False
    if same:
        return None
    return FileProjection(sources, {f.name: f for f in ts.arrow_schema}, by_name)


def identity_projection(ts: TableSchema) -> FileProjection:
    """Files stored under ``ts`` itself, conformed to its exact types and nullability."""
    return FileProjection({n: n for n in ts.column_names}, {f.name: f for f in ts.arrow_schema})


def follow_columns(
    old: TableSchema, new: TableSchema, columns: tuple[str, ...] | None, expr: Expr
) -> tuple[tuple[str, ...] | None, Expr]:
    """A projection and a filter on ``old``'s columns as the same fields of ``new``.

    What a reader that follows a table across schema changes (a stream) keeps asking
    for: renamed columns under their new names; deleted ones leave the projection, and
    a filter on one is an error.
    """
    names = new.names_by_id
    renamed = {name: names.get(fid) for fid, name in old.names_by_id.items()}
    gone = sorted(n for n, now in renamed.items() if now is None and n in referenced_columns(expr))
    if gone:
        raise SchemaEvolutionError(
            f"the filter reads column(s) {gone}, which schema {new.schema_id} deleted"
        )
    if columns is not None:
        columns = tuple(n for n in (renamed.get(c) for c in columns) if n is not None)
    mapping = {k: v for k, v in renamed.items() if v is not None and v != k}
    return columns, expr if not mapping else visit(expr, _Rename(mapping))


class _Rename(ExprRewriter):
    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = mapping

    def visit_predicate(self, node: Predicate) -> Expr:
        return replace(node, column=self.mapping.get(node.column, node.column))  # type: ignore[type-var]
