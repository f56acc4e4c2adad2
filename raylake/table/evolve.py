"""Committing schema changes, and writes that bring new columns (``schema_mode="merge"``).

A schema change is one atomic step: the next ``schema/schema-<id>.json`` is created
if absent. Nothing else changes (no data file, no snapshot); the next commit's
snapshot records the new schema id. If another process changed the schema first,
the change fails with :class:`CommitConflictError` and nothing is written.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from raylake.errors import CommitConflictError, InvalidArgumentError
from raylake.format.evolution import SchemaUpdate
from raylake.format.schema import TableSchema
from raylake.format.schema_files import load_schema, schema_by_id, write_schema
from raylake.io import FileIO
from raylake.table.aborted import abort_messages
from raylake.table.conform import ArrowData, check_schema, iter_input, unviewed

if TYPE_CHECKING:
    from raylake.table.table import Table
    from raylake.table.writer import CommitMessage

SchemaMode = Literal["strict", "merge"]
SCHEMA_MODES = ("strict", "merge")


class UpdateSchema(SchemaUpdate):
    """``with tbl.update_schema() as u: ...``: the changes commit together when the block
    ends without an error; an error in the block (or in a change) commits nothing."""

    def __init__(self, tbl: Table) -> None:
        super().__init__(load_schema(tbl.file_io))  # the latest, not what tbl was opened with
        self._tbl = tbl

    def __repr__(self) -> str:
        state = "closed" if self._closed else "changed" if self.has_changes else "unchanged"
        return f"UpdateSchema({self._tbl.uri!r}, from schema {self.base.schema_id}, {state})"

    def __enter__(self) -> UpdateSchema:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and not self._closed:
            self.commit()
        self._closed = True

    def commit(self) -> TableSchema:
        """Write the new schema version; return it (the current one when nothing changed).

        Once: the update is closed afterwards (the block's end then commits nothing more).
        """
        self._check_open()
        self._closed = True
        new = commit_schema(self._tbl.file_io, self.base, self.apply())
        self._tbl.table_schema = new
        return new


def commit_schema(file_io: FileIO, base: TableSchema, new: TableSchema) -> TableSchema:
    if new is base:
        return base
    from raylake.table.kind import kind_of

    kind_of(new).validate_schema()  # the rules of the table's kind (merge engines, keys)
    if not write_schema(file_io, new):
        raise CommitConflictError(
            f"the schema of {file_io.uri} was changed by another writer (schema "
            f"{new.schema_id} exists); reopen the table and make the change again",
            expected=base.schema_id,
            actual=new.schema_id,
        )
    return new


def schema_mode_arg(schema_mode: str) -> SchemaMode:
    if schema_mode not in SCHEMA_MODES:
        raise InvalidArgumentError("schema_mode", schema_mode, "'strict' or 'merge'")
    return schema_mode  # type: ignore[return-value]


def with_new_columns(tbl: Table, *data_schemas: pa.Schema) -> tuple[TableSchema, TableSchema]:
    """The table's latest schema and the next version, with the columns of the
    ``data_schemas`` it lacks (the latest itself where it lacks none): checked, not
    committed."""
    update = UpdateSchema(tbl)
    # A write refused for the columns the table has adds none: check them first.
    table_schema = update.base.arrow_schema
    for data_schema in data_schemas:
        known = pa.schema([f for f in data_schema if f.name in table_schema.names])
        check_schema(known, merged_columns(table_schema, known))
    for data_schema in data_schemas:
        update.union_by_name(unviewed(data_schema))
    return update.base, update.apply()


def commit_planned_schema(file_io: FileIO, ts: TableSchema) -> None:
    """Commit ``ts``, a schema a merge planned with its source's new columns, if the table
    lacks it: the merge checked against it and wrote its files under it, and commits it
    just before its data, once nothing can refuse the merge, so that a refused merge adds
    no column. A schema already committed (an earlier attempt's, or not new) is left."""
    latest = load_schema(file_io)
    if latest.schema_id < ts.schema_id:
        commit_schema(file_io, latest, ts)
    elif schema_by_id(file_io, ts.schema_id).to_bytes() != ts.to_bytes():
        raise CommitConflictError(
            f"the schema of {file_io.uri} was changed by another writer while a merge "
            f"added columns (schema {ts.schema_id} exists); nothing was committed",
            expected=ts.schema_id - 1,
            actual=latest.schema_id,
        )


def merged_input(tbl: Table, data: Any) -> tuple[Table, Iterator[ArrowData]]:
    """The table a ``schema_mode="merge"`` write writes under, and its data: the table's
    latest schema plus the data's new columns, planned but not committed (the write
    commits it with its data, :func:`adopt_planned_schema`, so a refused write adds no
    column); table columns the data lacks are written null.

    A list or tuple of chunks (in memory already) brings the new columns of every chunk;
    a stream brings its first chunk's, and a later chunk with others is refused."""
    chunks = iter_input(data, tbl.schema)
    if isinstance(data, list | tuple):
        listed = list(chunks)
        schemas = [chunk.schema for chunk in listed]
        chunks = iter(listed)
    else:
        first = next(chunks, None)
        if first is None:
            return tbl, iter(())
        schemas = [first.schema]
        chunks = itertools.chain([first], chunks)
    from raylake.table.table import Table

    _, planned = with_new_columns(tbl, *schemas)
    target = Table(tbl.file_io, planned, tbl.source)
    return target, (fill_missing_columns(chunk, planned) for chunk in chunks)


def adopt_planned_schema(tbl: Table, target: Table, messages: list[CommitMessage]) -> None:
    """Commit the schema ``target`` (from :func:`merged_input`) planned, if new, just
    before the data's commit, and take it on ``tbl``; if that fails, delete the files of
    ``messages``."""
    if target is tbl:
        return
    try:
        commit_planned_schema(tbl.file_io, target.table_schema)
    except BaseException:
        abort_messages(tbl.file_io, messages)
        raise
    tbl.table_schema = target.table_schema


def merged_columns(table_schema: pa.Schema, data_schema: pa.Schema) -> pa.Schema:
    """The table columns a merge-mode write must find in its data (after its new columns
    were added): those the data has, and those that may not be null."""
    return pa.schema([f for f in table_schema if f.name in data_schema.names or not f.nullable])


def fill_missing_columns(chunk: ArrowData, ts: TableSchema) -> pa.Table:
    """``chunk`` with null columns for the nullable table columns it lacks."""
    pa_table = chunk if isinstance(chunk, pa.Table) else pa.Table.from_batches([chunk])
    for f in ts.arrow_schema:
        if f.name not in pa_table.column_names and f.nullable:
            pa_table = pa_table.append_column(f.name, pa.nulls(pa_table.num_rows, f.type))
    return pa_table
