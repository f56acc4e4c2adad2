"""Typical mistakes at the table API fail at the call, naming the argument, and write
nothing: no snapshot, no schema change, no data file (docs/decisions.md, "Bad input at
the table API"). Each case here was accepted, or failed deep inside, before."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake.cli import main
from raylake.errors import (
    CommitConflictError,
    CommitFailedError,
    InvalidArgumentError,
    InvalidOptionError,
    SchemaError,
    SchemaMismatchError,
)
from raylake.table import table_exists

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
ROWS = pa.table({"id": [9], "v": ["z"]}, schema=SCHEMA)
Call = Callable[[raylake.Table, str], Any]


def _files(uri: str) -> set[str]:
    return {os.path.join(d, f) for d, _, names in os.walk(uri) for f in names}


def _table(warehouse: Path, primary_key: bool) -> raylake.Table:
    tbl = raylake.create_table(
        str(warehouse / "t"), SCHEMA, primary_key=["id"] if primary_key else ()
    )
    tbl.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    tbl.write(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    return tbl


def _schema_change(change: Callable[[Any], Any]) -> Call:
    def call(tbl: raylake.Table, _: str) -> Any:
        with tbl.update_schema() as update:
            change(update)

    return call


def _pandas(df: Any, **kwargs: Any) -> Call:
    return lambda _, new_uri: raylake.from_pandas(df, new_uri, **kwargs)


NULL_KEY = pd.DataFrame({"id": pd.array([1, None], dtype="Int64"), "v": ["a", "b"]})
EMPTY = ROWS.slice(0, 0)

# (id, primary-key table?, call, error, words the message must hold)
CASES: list[tuple[str, bool, Call, type[Exception], str]] = [
    ("commit-no-list", False, lambda t, _: t.commit(None), InvalidArgumentError,
     "messages must be a list of CommitMessage"),
    ("commit-not-messages", False, lambda t, _: t.commit(["x"]), InvalidArgumentError,
     "messages must be a list of CommitMessage"),
    # Table.write: truthy strings and non-str properties.
    ("write-allow-empty-str", False, lambda t, _: t.write(EMPTY, allow_empty="no"),
     InvalidArgumentError, "allow_empty must be True or False"),
    ("write-properties-str", False, lambda t, _: t.write(ROWS, properties="x"),
     InvalidArgumentError, "properties must be a mapping"),
    ("write-properties-int-value", False, lambda t, _: t.write(ROWS, properties={"n": 1}),
     InvalidArgumentError, "properties must be a mapping of str to str"),
    ("writer-prefix-path", False, lambda t, _: t.new_writer(file_prefix="../x").write(ROWS),
     InvalidArgumentError, "file_prefix must be letters, digits"),
    # Maintenance flags and ages.
    ("compact-full-str", True, lambda t, _: t.compact(full="yes"), InvalidArgumentError,
     "full must be True or False"),
    ("expire-dry-run-str", False, lambda t, _: t.expire_snapshots(dry_run="no"),
     InvalidArgumentError, "dry_run must be True or False"),
    ("orphans-dry-run-str", False, lambda t, _: t.remove_orphan_files(dry_run="no"),
     InvalidArgumentError, "dry_run must be True or False"),
    ("expire-negative-millis", False, lambda t, _: t.expire_snapshots(older_than=-1),
     InvalidOptionError, "an int is a time in epoch milliseconds"),
    ("expire-age-as-int", False, lambda t, _: t.expire_snapshots(older_than=7),
     InvalidOptionError, "1970-01-01T00:00:00.007000+00:00, before anything a table holds"),
    # Creating tables.
    ("create-exist-ok-str", False,
     lambda _, u: raylake.create_table(u, SCHEMA, exist_ok="no"),
     InvalidArgumentError, "exist_ok must be True or False"),
    ("create-storage-options-str", False,
     lambda _, u: raylake.create_table(u, SCHEMA, storage_options="anon"),
     InvalidArgumentError, "storage_options must be a dict"),
    ("open-storage-options-str", False,
     lambda t, _: raylake.open_table(t.uri, storage_options="anon"),
     InvalidArgumentError, "storage_options must be a dict"),
    ("exists-uri-none", False, lambda _, u: table_exists(None), InvalidArgumentError,
     "uri must be a non-empty path"),
    ("create-null-typed-key", False,
     lambda _, u: raylake.create_table(
         u, pa.schema([("id", pa.null()), ("v", pa.string())]), primary_key=["id"]
     ),
     SchemaError, "primary-key column 'id' has type null"),
    ("create-option-none", False,
     lambda _, u: raylake.create_table(u, SCHEMA, options={"write.compression": None}),
     InvalidOptionError, "leave the key out for the default"),
    ("from-pandas-dict", False, _pandas({"id": [1]}), InvalidArgumentError,
     "df must be a pandas DataFrame"),
    ("from-pandas-arrow", False, _pandas(ROWS), InvalidArgumentError,
     "df must be a pandas DataFrame (Table.write takes Arrow data)"),
    # A SchemaError alone, which except InvalidArgumentError (a TypeError) did not catch.
    ("from-pandas-schema-str", False, _pandas(NULL_KEY, schema="id"), InvalidArgumentError,
     "schema must be None, a pyarrow.Schema, a list of column names or a list of pyarrow"),
    ("from-pandas-schema-short", False, _pandas(NULL_KEY, schema=["id"]), InvalidArgumentError,
     "schema must be a list of 2 entries, one per column ['id', 'v']"),
    ("from-pandas-schema-mixed", False, _pandas(NULL_KEY, schema=["id", pa.string()]),
     InvalidArgumentError, "schema must be a list of only column names (str) or only pyarrow"),
    ("from-pandas-null-key", False, _pandas(NULL_KEY, primary_key=["id"]), SchemaError,
     "primary-key column 'id' cannot hold nulls"),
    ("from-pandas-mixed-object", False, _pandas(pd.DataFrame({"id": [1, "x"]})),
     SchemaMismatchError, "DataFrame column 'id' of dtype object does not convert to Arrow"),
    ("from-pandas-complex", False, _pandas(pd.DataFrame({"id": [1], "z": [1j]})),
     SchemaMismatchError, "DataFrame column 'z' of dtype complex128 does not convert"),
    ("write-pandas-mixed-object", False, lambda t, _: t.write(pd.DataFrame({"id": [1, "x"]})),
     SchemaMismatchError, "DataFrame column 'id' of dtype object does not convert to Arrow"),
    # A Python int beyond 64 bits raised pyarrow's bare OverflowError, naming no column.
    ("from-pandas-int-beyond-64-bits", False,
     _pandas(pd.DataFrame({"id": [1], "big": pd.Series([2**64], dtype=object)})),
     SchemaMismatchError, "DataFrame column 'big' of dtype object does not convert"),
    ("write-pandas-int-beyond-64-bits", False,
     lambda t, _: t.write(pd.DataFrame({"id": pd.Series([2**64], dtype=object), "v": ["z"]})),
     SchemaMismatchError, "DataFrame column 'id' of dtype object does not convert"),
    # Schema changes.
    ("add-column-nullable-str", False,
     _schema_change(lambda u: u.add_column("z", pa.int64(), nullable="no")),
     InvalidArgumentError, "nullable must be True or False"),
    ("update-column-nullable-str", False,
     _schema_change(lambda u: u.update_column("v", nullable="yes")),
     InvalidArgumentError, "nullable must be True or False"),
    ("update-column-type-str", False, _schema_change(lambda u: u.update_column("id", "int64")),
     InvalidArgumentError, "field_type must be a pyarrow DataType (pa.int64(), ...) for column 'id'"),
    ("union-by-name-str", False, _schema_change(lambda u: u.union_by_name("z")),
     InvalidArgumentError, "schema must be a pyarrow.Schema"),
    # Reads.
    ("columns-twice", False, lambda t, _: t.to_arrow(columns=["id", "id"]),
     InvalidArgumentError, "columns must be a list of distinct column names"),
    ("snapshot-id-and-as-of", False, lambda t, _: t.to_arrow(snapshot_id=1, as_of=0),
     InvalidArgumentError, "as_of must be None when snapshot_id is given"),
    ("split-size-zero", False, lambda t, _: t.scan().with_split_size(0).plan(),
     InvalidArgumentError, "target_bytes must be an int >= 1"),
    ("read-split-str", False, lambda t, _: list(t.read_split("x")),
     InvalidArgumentError, "split must be a Split"),
    ("stream-row-kind-str", False, lambda t, _: t.stream(include_row_kind="yes"),
     InvalidArgumentError, "include_row_kind must be True or False"),
    # Primary-key deletes.
    ("delete-dict-of-scalars", True, lambda t, _: t.delete({"id": 1}), InvalidArgumentError,
     "a dict of key columns (lists of values)"),
    # A bare key, or a list of them, said the table "cannot write int".
    ("delete-a-key", True, lambda t, _: t.delete(1), InvalidArgumentError,
     "keys_or_filter must be a filter, or keys in columns"),
    ("delete-a-list-of-keys", True, lambda t, _: t.delete([1, 2]), InvalidArgumentError,
     "keys_or_filter must be a filter, or keys in columns"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("primary_key", "call", "error", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_refused_at_the_call_and_nothing_written(
    warehouse: Path, primary_key: bool, call: Call, error: type[Exception], message: str
) -> None:
    tbl = _table(warehouse, primary_key)
    new_uri = str(warehouse / "new")
    before, schema = _files(tbl.uri), tbl.schema
    with pytest.raises(error) as info:
        call(tbl, new_uri)
    assert message in str(info.value)
    assert _files(tbl.uri) == before  # no snapshot, schema, manifest or data file
    assert not os.path.exists(new_uri) or not _files(new_uri)
    reopened = raylake.open_table(tbl.uri)  # and the table still loads
    assert [s.id for s in reopened.snapshots()] == [1, 2]
    assert reopened.schema == schema


# (id, how the messages are passed, keywords, words the message must hold)
COMMIT_CASES: list[tuple[str, Callable[[list[Any]], Any], dict[str, Any], str]] = [
    # A str commit_identifier used to be written, and the table then failed to load.
    ("identifier-str", list, {"commit_identifier": "x"}, "commit_identifier must be an int"),
    ("mode-case", list, {"mode": "Append"},
     "mode must be one of ['append', 'overwrite', 'upsert']"),
    ("base-str", list, {"base_snapshot_id": "2"}, "base_snapshot_id must be a snapshot id"),
    ("user-int", list, {"commit_user": 5}, "commit_user must be a string"),
    ("properties-list", list, {"properties": [1]}, "properties must be a mapping of str to str"),
    ("properties-int-value", list, {"properties": {"n": 1}},
     "properties must be a mapping of str to str"),
    ("allow-empty-str", list, {"allow_empty": "no"}, "allow_empty must be True or False"),
    ("filter-without-overwrite", list, {"overwrite_filter": "id = 1"},
     "overwrite_filter applies only to mode='overwrite'"),
    ("one-message", lambda messages: messages[0], {}, "messages must be a list of CommitMessage"),
    # A set has no order, and a key's upserts in a later message win.
    ("set-of-messages", set, {}, "messages must be a list of CommitMessage"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "kwargs", "message"), [pytest.param(*c[1:], id=c[0]) for c in COMMIT_CASES]
)
def test_a_commit_refused_for_its_arguments_touches_nothing_and_its_messages_still_commit(
    warehouse: Path, shape: Callable[[list[Any]], Any], kwargs: dict[str, Any], message: str
) -> None:
    """After a long distributed write, a typo in the commit's keywords must not cost the
    data: the refusal writes and deletes nothing, and the corrected call commits it."""
    tbl = _table(warehouse, False)
    writer = tbl.new_writer()
    writer.write(ROWS)
    messages = writer.prepare_commit()
    before = _files(tbl.uri)
    with pytest.raises(Exception) as info:
        tbl.commit(shape(messages), **kwargs)
    assert message in str(info.value)
    assert _files(tbl.uri) == before  # no snapshot; the written data file is still there
    tbl.commit(messages)
    assert sorted(raylake.open_table(tbl.uri).to_arrow()["id"].to_pylist()) == [1, 2, 3, 9]


def test_the_messages_of_a_failed_commit_are_refused_if_committed_again(
    warehouse: Path,
) -> None:
    """A failed commit deletes its messages' files; committing the same messages again
    used to make a snapshot of missing files, and every later read of the table failed."""
    tbl = _table(warehouse, False)
    writer = tbl.new_writer()
    writer.write(ROWS)
    messages = writer.prepare_commit()
    tbl.write(ROWS)  # snapshot 3 appends after the writer's base, snapshot 2
    with pytest.raises(CommitConflictError):
        tbl.commit(messages, mode="overwrite", base_snapshot_id=2)
    with pytest.raises(CommitFailedError, match="deleted when an earlier commit of them failed"):
        tbl.commit(messages)
    reopened = raylake.open_table(tbl.uri)
    assert [s.id for s in reopened.snapshots()] == [1, 2, 3]
    assert sorted(reopened.to_arrow()["id"].to_pylist()) == [1, 2, 3, 9]


def test_no_columns_reads_the_row_count(warehouse: Path) -> None:
    """The decision for ``columns=[]``: no columns, every row (as pyarrow reads it)."""
    result = _table(warehouse, False).to_arrow(columns=[])
    assert (result.num_columns, result.num_rows) == (0, 3)


def test_an_empty_column_name_is_refused_at_create(tmp_path: Path) -> None:
    """No filter can name a column named '' (the filter refuses the name): refused, not
    created, as are the tables from_pandas would make of it."""
    with pytest.raises(SchemaError, match="a column name must not be empty"):
        raylake.create_table(str(tmp_path / "a"), pa.schema([("", pa.int64()), ("x", pa.int8())]))
    with pytest.raises(SchemaError, match="a column name must not be empty"):
        raylake.from_pandas(pd.DataFrame({"": [1], "x": [2]}), str(tmp_path / "b"))
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def cli_table(warehouse: Path, tmp_path: Path) -> tuple[str, Path]:
    tbl = _table(warehouse, False)
    return tbl.uri, tmp_path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["scan", "{uri}", "--limit", "-5"], "'-5' is not a whole number >= 0"),
        (["snapshots", "{uri}", "--live-rows", "-1"], "'-1' is not a whole number >= 0"),
        (["tail", "{uri}", "--max-plans", "-1"], "'-1' is not a whole number >= 0"),
        (["tail", "{uri}", "--timeout", "-1"], "'-1' is not a number of seconds >= 0"),
    ],
)
def test_cli_refuses_negative_counts(
    cli_table: tuple[str, Path], argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, _ = cli_table
    with pytest.raises(SystemExit) as info:
        main([a.format(uri=uri) for a in argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ("id,v\n1,a\n", ["--partition-by", "v"], "--partition-by must be given only with --create"),
        ("id,v\n1,a\n", ["--buckets", "2"], "--buckets must be given only with --create"),
        ("id,v\n1,a\nx,b\n", [], "cannot read"),
    ],
)
def test_cli_write_refuses_and_commits_nothing(
    cli_table: tuple[str, Path],
    content: str,
    flags: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    uri, tmp_path = cli_table
    csv = tmp_path / "rows.csv"
    csv.write_text(content)
    before = _files(uri)
    assert main(["write", uri, str(csv), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert _files(uri) == before


def test_python_dash_m_raylake_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "raylake", "--version"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("raylake ")


@pytest.mark.parametrize(
    "layout",
    [
        {"partition_by": [".s"]},
        {"primary_key": [".s"]},
        {"primary_key": ["id"], "options": {"sequence.field": ".s"}},
    ],
)
def test_a_column_named_like_a_struct_path_cannot_partition_key_or_order(
    tmp_path: Path, layout: dict[str, Any]
) -> None:
    # Arrow's group_by and sort read ".s" as a path into a struct: the first write
    # failed with its ArrowInvalid, after the table was created.
    schema = pa.schema([("id", pa.int64()), (".s", pa.int64())])
    with pytest.raises(SchemaError, match=r"column '\.s' cannot partition, key or order"):
        raylake.create_table(str(tmp_path / "t"), schema, **layout)
    assert not table_exists(str(tmp_path / "t"))
    tbl = raylake.create_table(str(tmp_path / "plain"), schema)  # any other column is fine
    tbl.write(pa.table({"id": [1], ".s": [2]}))
    assert tbl.to_arrow().to_pylist() == [{"id": 1, ".s": 2}]
