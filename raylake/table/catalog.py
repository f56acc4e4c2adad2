"""Entry points: create, open, and create-from-pandas."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import pyarrow as pa

from raylake.arguments import check_choice, check_flag, refuse_unknown_keywords
from raylake.errors import (
    InvalidArgumentError,
    NullConstraintError,
    SchemaArgumentError,
    SchemaError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from raylake.format.schema import SYSTEM_PREFIX, TableSchema
from raylake.format.schema_files import forget_schemas, schema_path
from raylake.format.table_spec import TableSpec
from raylake.io import FileIO
from raylake.io.credentials import OptionsLike
from raylake.io.temp_names import temp_path
from raylake.table.aborted import outcome_unknown
from raylake.table.args import uri_arg
from raylake.table.commit import check_commit_safety
from raylake.table.conform import conform
from raylake.table.conform import pandas_to_arrow as dataframe_as_written
from raylake.table.evolve import schema_mode_arg
from raylake.table.kind import kind_of
from raylake.table.location import (
    check_empty_location,
    created_at_location,
    raise_missing_bucket,
)
from raylake.table.new_tables import (
    directory_exists,
    drop_new_table,
    keep_directory,
    sink_location,
)
from raylake.table.pandas_types import pandas_to_arrow, with_index_columns
from raylake.table.source import source_for
from raylake.table.table import Table
from raylake.table.writer import DATA_DIR
from raylake.table.written_partitions import (
    PartitionOverwriteMode,
    check_dynamic_mode,
    partition_overwrite_mode_arg,
)


@refuse_unknown_keywords
def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str] | None = (),
    primary_key: Sequence[str] | None = (),
    buckets: int | None = None,
    options: Mapping[str, Any] | None = None,
    storage_options: OptionsLike | None = None,
    exist_ok: bool = False,
    allow_other_files: bool = False,
) -> Table:
    """Create a table at ``uri`` (any fsspec URL or local path) and return it.

    With ``exist_ok=True`` an existing table is opened instead, if it is the table asked
    for: the same schema, partition columns and primary key, and the bucket count and
    options where given; otherwise a :class:`SchemaError` names the difference.
    A directory that holds anything but a table is refused (:class:`TableLocationError`)
    unless ``allow_other_files=True``; ``remove_orphan_files`` never deletes those files.
    """
    uri = uri_arg(uri)
    spec = TableSpec.of(
        partition_by=partition_by, primary_key=primary_key, buckets=buckets, options=options
    )
    ts = new_table_schema(schema, spec)
    allow = check_flag("allow_other_files", allow_other_files)
    return _create(uri, ts, storage_options, check_flag("exist_ok", exist_ok), allow, spec)[0]


def new_table_schema(schema: pa.Schema, spec: TableSpec) -> TableSchema:
    """The schema of a new table, checked by the rules of its kind (nothing written)."""
    ts = spec.table_schema(schema)
    kind_of(ts).validate_schema()
    return ts


def _create(
    uri: str,
    ts: TableSchema,
    storage_options: OptionsLike | None,
    exist_ok: bool,
    allow_other_files: bool = False,
    spec: TableSpec | None = None,
) -> tuple[Table, bool]:
    """The table made at ``uri`` and True, or with ``exist_ok`` the table found there
    (of the same schema and layout) and False."""
    file_io = FileIO(uri, storage_options)
    check_commit_safety(file_io, ts)
    forget_schemas()  # a table deleted and created again at this place is a new table
    # A raylake schema file beside another format's would hide their table: it is never
    # written.
    source = source_for(file_io)
    other = source.exists() and not source.writable
    if not source.exists():
        check_empty_location(file_io, allow_other_files)
    existed = directory_exists(file_io)
    created = not other and created_at_location(
        file_io, lambda: file_io.create_if_absent(schema_path(ts.schema_id), ts.to_bytes())
    )
    if not created:
        if not exist_ok and other:
            raise TableAlreadyExistsError(
                file_io.uri,
                "raylake reads it (open_table) but never writes it",
                what=source.described,
            )
        if not exist_ok:
            raise TableAlreadyExistsError(file_io.uri)
        existing = open_table(uri, storage_options=storage_options)
        check_layout(existing, spec)
        if existing.schema != ts.arrow_schema:
            raise SchemaError(
                f"a table with another schema exists at {uri!r}: {existing.schema} "
                f"(asked for {ts.arrow_schema})"
            )
        return existing, False
    made = Table(file_io, ts)
    if existed:
        keep_directory(made)
    return made, True


def check_layout(existing: Table, spec: TableSpec | None, given_only: bool = False) -> None:
    """Refuse a table found in place of the one asked for, naming what differs."""
    if spec is None or not existing.source.writable:
        return
    found = spec.differences(existing.table_schema, given_only=given_only)
    if found:
        raise SchemaError(
            f"a table of another layout exists at {existing.uri!r}: it has {'; '.join(found)}"
        )


@refuse_unknown_keywords
def open_table(uri: str, *, storage_options: OptionsLike | None = None) -> Table:
    """Open the table at ``uri``; raise TableNotFoundError if there is none."""
    file_io = FileIO(uri_arg(uri), storage_options)
    try:
        return source_for(file_io).open()
    except TableNotFoundError as exc:
        raise_missing_bucket(file_io, exc)
        raise


@refuse_unknown_keywords
def table_exists(uri: str, *, storage_options: OptionsLike | None = None) -> bool:
    """Whether a table (raylake's, or a Paimon table raylake reads) exists at ``uri``."""
    return source_for(FileIO(uri_arg(uri), storage_options)).exists()


def open_or_create_table(
    uri: str,
    schema: pa.Schema | None,
    *,
    create_if_missing: bool = True,
    spec: TableSpec | None = None,
    storage_options: Mapping[str, Any] | None = None,
    schema_hint: str = "",
) -> tuple[Table, bool]:
    """The table at ``uri``, created from ``schema`` when missing; and whether it was created.

    What the sinks (Ray Data, Spark) share. A new table takes the schema's columns
    without system (``_rl_``) columns, whatever its kind: those are never table columns,
    and whether the data may carry them is the kind's call when the write checks its
    schema (a primary-key table accepts ``_rl_kind``). Two writers creating the same
    table at once both get it (the loser opens the winner's, if the schema is the same).
    Raises :class:`TableNotFoundError` when the table is missing and
    ``create_if_missing`` is False, :class:`SchemaError` when there is no ``schema`` to
    create it from (``schema_hint`` says how to give one).
    """
    if table_exists(uri, storage_options=storage_options):
        existing = open_table(uri, storage_options=storage_options)
        check_layout(existing, spec, given_only=True)  # a layout asked for, if any
        return existing, False
    if not create_if_missing:
        raise TableNotFoundError(uri)
    if schema is None:
        raise SchemaError(f"cannot create the table at {uri!r}: no schema is known. {schema_hint}")
    spec = spec or TableSpec()
    ts = new_table_schema(table_columns(schema), spec)
    with sink_location():
        # The loser of a race to create it opened the winner's: not created, so a failed
        # job of the loser's does not drop the table the winner's job writes into.
        return _create(uri_arg(uri), ts, storage_options, exist_ok=True, spec=spec)


def open_or_join_table(
    uri: str, schema: pa.Schema | None, *, job_prefix: str, **how: Any
) -> tuple[Table, bool, str]:
    """:func:`open_or_create_table` (``how``: its keywords) for a job whose tasks write
    the data files, named ``<job_prefix>-...`` (a Ray Data or Spark job), and the file
    that marks the job in a table found with no snapshot ('' where none was written).

    Another job may have just created that table: if it fails, it drops the table
    unless another writer's file is there (:func:`drop_new_table`), and this job's data
    files show only once a task flushes them. The marker, named as this job's files
    are, keeps the table; the job deletes it with its files, or when it ends.
    """
    for _ in range(3):
        tbl, created = open_or_create_table(uri, schema, **how)
        if created or tbl.latest_snapshot() is not None:
            return tbl, created, ""
        marker = temp_path(f"{DATA_DIR}/{job_prefix}-writing")
        try:
            tbl.file_io.write_bytes(marker, b"")
            there = table_exists(uri, storage_options=how.get("storage_options"))
        except BaseException:
            # The job fails before its tasks run: a marker whose write was carried out
            # with its answer lost, or written before the check failed, would keep a
            # table with no snapshot from being dropped until remove_orphan_files.
            tbl.file_io.delete_quietly([marker])
            raise
        if there:
            return tbl, False, marker  # there after the marker: it keeps it
        # Dropped meanwhile (its creator failed): the marker goes, and the table is
        # made anew here, or opened where another job made it first.
        tbl.file_io.delete_quietly([marker])
    return (*open_or_create_table(uri, schema, **how), "")


def table_columns(schema: pa.Schema) -> pa.Schema:
    """The columns a new table takes from a data schema: no system columns, no metadata."""
    return pa.schema(
        [
            pa.field(f.name, f.type, f.nullable)
            for f in schema
            if not f.name.startswith(SYSTEM_PREFIX)
        ]
    )


SchemaSpec: TypeAlias = pa.Schema | Sequence[str] | Sequence[pa.DataType] | None


@refuse_unknown_keywords
def from_pandas(
    df: Any,
    uri: str,
    schema: SchemaSpec = None,
    *,
    mode: Literal["error", "append", "overwrite"] = "error",
    partition_by: Sequence[str] | None = (),
    primary_key: Sequence[str] | None = (),
    buckets: int | None = None,
    options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_other_files: bool = False,
    partition_overwrite_mode: PartitionOverwriteMode = "static",
    schema_mode: str = "strict",
) -> Table:
    """Create a table from a pandas DataFrame and write it, in one call.

    ``schema`` takes the four forms a pandas user expects: omitted (inferred), a
    pyarrow Schema, a list of column names (renames the DataFrame's columns by
    position, types inferred, as in ``spark.createDataFrame(pdf, ["a", "b"])``), or a
    list of pyarrow types (names from the DataFrame). ``mode`` says what to do when
    a table already exists: raise (``"error"``), append, or overwrite: the whole table,
    or with ``partition_overwrite_mode="dynamic"`` (Spark's) only the partitions the
    DataFrame has rows in, as ``Table.write`` takes it. Into a table that exists,
    ``schema_mode="merge"`` adds the DataFrame's columns the table lacks, as
    ``Table.write`` does (typed as a new table's would be).

    The index follows pyarrow's ``preserve_index`` convention for named indexes: each
    named level becomes a column, before the others (``df.groupby("user").sum()`` keeps
    ``user``); an unnamed index (a default ``RangeIndex``, or what a filter left of one) is
    row numbering and is not stored. Inferred types are the same with pandas 2 and 3:
    strings are ``string``, times ``timestamp[ns]`` (docs/pandas.md).
    """
    check_choice("mode", mode, ("error", "append", "overwrite"))
    partition_overwrite_mode = partition_overwrite_mode_arg(partition_overwrite_mode)
    check_dynamic_mode(partition_overwrite_mode, mode)
    schema_mode = schema_mode_arg(schema_mode)
    spec = TableSpec.of(
        partition_by=partition_by, primary_key=primary_key, buckets=buckets, options=options
    )
    allow = check_flag("allow_other_files", allow_other_files)
    _check_dataframe(df)
    source = source_for(FileIO(uri_arg(uri), storage_options))
    exists = source.exists()
    fix = "pass mode='append' or mode='overwrite' to write into it"
    if exists and mode == "error":
        if not source.writable:
            fix = "raylake reads it (open_table) but never writes it"
        raise TableAlreadyExistsError(source.file_io.uri, fix, what=source.described)
    tbl: Table | None = None
    if not exists:
        # Only a new table takes the inferred types; into one that exists the DataFrame is
        # cast to the table's types as Table.write casts it (a time before 1678 fits a
        # microsecond column, though not the nanoseconds a new table would get).
        pa_table = _arrow_from_pandas(df, schema, infer=True)
        _check_no_null_keys(pa_table, spec.primary_key)
        ts = new_table_schema(pa_table.schema, spec)
        # Rows the new table would refuse (nulls in a key) fail before it is created;
        # the write then finds them conformed.
        pa_table = conform(pa_table, ts.arrow_schema)
        try:
            tbl, _ = _create(
                uri_arg(uri), ts, storage_options, exist_ok=False, allow_other_files=allow
            )
        except TableAlreadyExistsError as exc:
            if mode == "error":
                raise TableAlreadyExistsError(source.file_io.uri, fix) from exc
            # Another writer created it since (parallel jobs appending to a new table):
            # the rows go into that table, as into any that exists.
    created = tbl is not None
    if tbl is None:
        tbl = open_table(uri, storage_options=storage_options)
        check_layout(tbl, spec, given_only=True)
        # A column pyarrow cannot type alone (a map column as to_pandas gives it) takes
        # the table's type, as in Table.write.
        pa_table = _arrow_from_pandas(df, schema, infer=False, types=tbl.schema)
    write_mode: Literal["overwrite"] | None = "overwrite" if mode == "overwrite" else None
    try:
        tbl.write(
            pa_table,
            mode=write_mode,
            partition_overwrite_mode=partition_overwrite_mode,
            schema_mode=schema_mode,
        )
    except BaseException as exc:
        # Left empty, it would make the corrected call fail ("already exists"); a commit
        # that may have landed keeps it, and its CommitStateUnknownError is what is raised.
        if created and not outcome_unknown(exc):
            drop_new_table(tbl, beside_other_files=allow)
        raise
    return tbl


def _check_no_null_keys(pa_table: pa.Table, primary_key: Sequence[str]) -> None:
    """A null in a key column is the problem to name, before the type it gave the column
    (pandas stores an integer column with a missing value as float64)."""
    for name in primary_key:
        if name in pa_table.column_names and pa_table.column(name).null_count:
            raise NullConstraintError(name, pa_table.column(name).null_count, key=True)


def _check_dataframe(df: Any) -> None:
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        hint = " (Table.write takes Arrow data)" if isinstance(df, pa.Table) else ""
        raise InvalidArgumentError("df", df, f"a pandas DataFrame{hint}")


def _arrow_from_pandas(
    df: Any, schema: SchemaSpec, infer: bool, types: pa.Schema | None = None
) -> pa.Table:
    df = with_index_columns(df)
    columns = [str(c) for c in df.columns]
    if schema is None:
        return _converted(df, infer=infer, types=types)
    if isinstance(schema, pa.Schema):
        return _with_schema(df, schema)
    if isinstance(schema, str) or not isinstance(schema, Sequence):
        raise SchemaArgumentError(
            "schema", schema, "None, a pyarrow.Schema, a list of column names or a list of "
            "pyarrow types",
        )  # fmt: skip
    items = list(schema)
    if len(items) != len(columns):
        raise SchemaArgumentError(
            "schema", schema, f"a list of {len(columns)} entries, one per column {columns}"
        )
    if all(isinstance(i, str) for i in items):
        return _converted(df.set_axis(items, axis=1), infer=infer, types=types)
    if all(isinstance(i, pa.DataType) for i in items):
        # Column labels may be ints (pd.DataFrame([[1, 2]])); the schema names are strings.
        return _with_schema(df.set_axis(columns, axis=1), pa.schema(list(zip(columns, items))))
    raise SchemaArgumentError(
        "schema", schema, "a list of only column names (str) or only pyarrow types"
    )


def _with_schema(df: Any, schema: pa.Schema) -> pa.Table:
    missing = [n for n in schema.names if n not in df.columns]
    if missing:
        raise SchemaError(f"schema names column(s) {missing} that the DataFrame lacks")
    extra = [str(c) for c in df.columns if c not in schema.names]
    if extra:  # silently dropping a column would lose data
        raise SchemaError(f"the DataFrame has column(s) {extra} that the schema does not name")
    return _converted(df[schema.names], schema)


def _converted(
    df: Any, schema: pa.Schema | None = None, infer: bool = True, types: pa.Schema | None = None
) -> pa.Table:
    try:
        if schema is None and not infer:
            return dataframe_as_written(df, types)
        return pandas_to_arrow(df, schema)
    except SchemaError:
        raise  # names the column already
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        target = "Arrow" if schema is None else f"schema {schema}"
        raise SchemaError(f"DataFrame does not convert to {target}: {exc}") from exc
