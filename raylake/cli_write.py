"""``raylake write``: Parquet, CSV or JSON-lines files into a table as one commit."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from raylake.cli_args import key_columns_arg, positive_arg
from raylake.errors import InvalidArgumentError, SchemaError, TableLocationError
from raylake.format.table_spec import TableSpec
from raylake.table import Snapshot, Table, create_table, open_table, table_exists
from raylake.table.aborted import outcome_unknown
from raylake.table.catalog import new_table_schema
from raylake.table.kind import kind_of
from raylake.table.location import other_files
from raylake.table.new_tables import drop_new_table
from raylake.table.pandas_types import dataframe_schema


def cmd_write(args: argparse.Namespace) -> int:
    """Write Parquet, CSV or JSON-lines files into a table as one commit."""
    from raylake.files import check_files

    if args.partition_overwrite_mode == "dynamic" and args.mode != "overwrite":
        # Named by its flags: the library's refusal names its keywords.
        raise InvalidArgumentError(
            "--partition-overwrite-mode",
            args.partition_overwrite_mode,
            "static unless --mode overwrite is given (dynamic replaces the partitions the "
            "files have rows in)",
        )
    check_files(args.files, args.format)  # before a table is created for them
    if table_exists(args.uri) or not args.create:
        _refuse_create_options(args)
        return _write_files(args, open_table(args.uri))
    tbl = _create_for_files(args)
    try:
        return _write_files(args, tbl)
    except BaseException as exc:
        # Left behind, the empty table would refuse the corrected command's --create.
        if not outcome_unknown(exc):  # a commit that may have landed keeps its table
            # Made among the user's files (--allow-other-files): only the table goes.
            drop_new_table(tbl, beside_other_files=bool(args.allow_other_files))
        raise


def add_write_command(sub: Any) -> None:
    """The ``write`` subcommand's arguments (``sub``: the parser's subparsers)."""
    write = sub.add_parser("write", help="write Parquet, CSV or JSON-lines files, one commit")
    write.add_argument("uri")
    write.add_argument("files", nargs="+")
    write.add_argument("--format", choices=["auto", "parquet", "csv", "json"], default="auto")
    write.add_argument("--mode", choices=["append", "overwrite", "upsert"], help="table default")
    write.add_argument(
        "--partition-overwrite-mode",
        choices=["static", "dynamic"],
        default="static",
        help="with --mode overwrite: replace the whole table (static, the default) or only "
        "the partitions the files have rows in (dynamic)",
    )
    write.add_argument(
        "--schema-mode",
        choices=["strict", "merge"],
        default="strict",
        help="merge: add the columns the files have and the table lacks (strict, the "
        "default: refuse them)",
    )
    write.add_argument("--create", action="store_true", help="create the table from the files")
    write.add_argument(
        "--partition-by", type=key_columns_arg, help="with --create: comma-separated columns"
    )
    write.add_argument(
        "--primary-key", type=key_columns_arg, help="with --create: comma-separated key columns"
    )
    write.add_argument("--buckets", type=positive_arg, help="with --create: bucket count")
    write.add_argument(
        "--allow-other-files",
        action="store_true",
        default=None,
        help="with --create: create the table in a directory that holds other files",
    )
    write.set_defaults(func=cmd_write)


def cmd_delete(args: argparse.Namespace) -> int:
    """``raylake delete URI FILTER``: the rows the filter selects, as one commit."""
    tbl = open_table(args.uri)
    before = tbl.latest_snapshot()
    snap = tbl.delete(args.filter)
    if snap is None or snap == before:
        print("no row matched: nothing to delete")
        return 0
    if tbl.is_primary_key_table:  # its files hold -D rows: a count needs a merge
        print(f"deleted the matching rows: snapshot {snap.id}")
    else:
        assert before is not None
        gone = before.total_record_count - snap.total_record_count
        print(f"deleted {gone} row(s): snapshot {snap.id}")
    return 0


def _refuse_create_options(args: argparse.Namespace) -> None:
    options = ("partition_by", "primary_key", "buckets", "allow_other_files")
    given = [f for f in options if getattr(args, f) is not None]
    if given:  # they would be ignored: the table exists, or none is created
        flags = ", ".join("--" + f.replace("_", "-") for f in given)
        raise InvalidArgumentError(
            flags,
            getattr(args, given[0]),
            "given only with --create, for a table that does not exist",
        )


def _create_for_files(args: argparse.Namespace) -> Table:
    """The table --create makes from the first file's columns, once the options and
    --mode are known to fit it (a primary-key table refuses --mode append)."""
    from raylake.files import file_dataset

    # A file df.to_parquet() wrote (pandas' metadata) gives the types from_pandas gives
    # its DataFrame: pandas 3's large_string and timestamp[us] would make the table
    # depend on the pandas that wrote the file.
    inferred = dataframe_schema(file_dataset(args.files[0], args.format).schema)
    schema = pa.schema([pa.field(f.name, f.type, f.nullable) for f in inferred])
    untyped = [f.name for f in schema if pa.types.is_null(f.type)]
    if untyped:  # a null column takes no value, and no command here could retype it
        raise SchemaError(
            f"column(s) {untyped} of {args.files[0]!r} have no values to tell their types "
            "(a header-only CSV, an empty column, a JSON field always null): create "
            "from a file with values in every column"
        )
    layout = {
        "partition_by": args.partition_by or [],
        "primary_key": args.primary_key or [],
        "buckets": args.buckets,
    }
    if args.mode is not None:
        kind_of(new_table_schema(schema, TableSpec.of(**layout))).check_write_mode(args.mode)
    try:
        return create_table(
            args.uri, schema, allow_other_files=bool(args.allow_other_files), **layout
        )
    except TableLocationError as exc:
        if not exc.found:  # the path is a file
            raise
        # The library's advice names its keyword and method; a shell user has flags.
        why = other_files(exc.found, "pass --allow-other-files", "raylake orphans")
        raise TableLocationError(exc.path, why, exc.found) from None


def _write_files(args: argparse.Namespace, tbl: Table) -> int:
    from raylake.files import file_batches

    before = tbl.latest_snapshot()
    rows = _RowCount()
    try:
        snap = tbl.write(
            rows.of(file_batches(args.files, args.format, tbl.schema)),
            mode=args.mode,
            partition_overwrite_mode=args.partition_overwrite_mode,
            schema_mode=args.schema_mode,
        )
    except SchemaError as exc:  # rows the table refuses: which of the files holds them
        if rows.path is None:
            raise
        raise SchemaError(f"in {rows.path!r}: {exc}") from exc
    if snap is None or snap == before:
        print("nothing to write")
        return 0
    # The snapshot's delta is rows added minus rows removed: an overwrite's is no count
    # of rows written, so the rows read from the files are counted instead.
    line = f"wrote {rows.total} row(s) from {len(args.files)} file(s): snapshot {snap.id}"
    print(line + _replaced(tbl, before, snap, rows.total))
    return 0


class _RowCount:
    """The rows of the batches passed through ``of``, and the file of the batch being
    written (None once all are)."""

    def __init__(self) -> None:
        self.total = 0
        self.path: str | None = None

    def of(self, batches: Iterator[tuple[str, pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
        for self.path, batch in batches:
            self.total += batch.num_rows
            yield batch
        self.path = None


def _replaced(tbl: Table, before: Snapshot | None, snap: Snapshot, written: int) -> str:
    """What an overwrite of an append table replaced, from the manifests' counts (the
    rows before, plus those written, less those after: a dynamic overwrite replaces only
    some). A primary-key table's live rows need a merge of the keys, too much for a
    message."""
    if snap.commit_kind != "OVERWRITE" or tbl.is_primary_key_table:
        return ""
    had = 0 if before is None else before.total_record_count
    return f" (replaced {had + written - snap.total_record_count} row(s))"
