"""One kind of argument mistake raises one error, whichever entry point it is made at:
:class:`InvalidArgumentError` naming the argument (raylake/arguments.py). Before, the same
mistake raised InvalidArgumentError, StreamError, ConsumerError, InvalidOptionError,
SchemaError, UnsupportedOperationError or a bare ValueError, depending on the module.
Where a module's own class was raised before, the error is still one (a subclass of both),
so that ``except StreamError`` keeps working."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import raylake
from raylake.arguments import check_count, check_optional_count, check_seconds
from raylake.errors import (
    ConsumerError,
    FilterError,
    InvalidArgumentError,
    InvalidOptionError,
    MergeError,
    SchemaError,
    StreamError,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
ROWS = pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA)
Call = Callable[[raylake.Table, Path], Any]


def _sink(**kwargs: Any) -> Call:
    def call(tbl: raylake.Table, tmp: Path) -> Any:
        pytest.importorskip("ray")  # the lowest-versions leg has no Ray
        from raylake.datasource import LakeDatasink

        return LakeDatasink(str(tmp / "sink"), **kwargs)

    return call


def _stream_dataset(**kwargs: Any) -> Call:
    def call(tbl: raylake.Table, tmp: Path) -> Any:
        from raylake.train.torch_stream import LakeStreamDataset

        return LakeStreamDataset(tbl, **kwargs)

    return call


def _iterable(**kwargs: Any) -> Call:
    def call(tbl: raylake.Table, tmp: Path) -> Any:
        from raylake.train import LakeIterableDataset

        return LakeIterableDataset(tbl, **kwargs)

    return call


def _job(**kwargs: Any) -> Call:
    def call(tbl: raylake.Table, tmp: Path) -> Any:
        pytest.importorskip("ray")
        from raylake.streaming import StreamingJob

        return StreamingJob(tbl.uri, lambda rows: rows, **{"consumer_id": "job", **kwargs})

    return call


def _lake_stream(**kwargs: Any) -> Call:
    def call(tbl: raylake.Table, tmp: Path) -> Any:
        pytest.importorskip("ray")
        from raylake.streaming import read_lake_stream

        return read_lake_stream(tbl.uri, **kwargs)

    return call


def _new(**kwargs: Any) -> Call:
    return lambda tbl, tmp: raylake.create_table(str(tmp / "new"), SCHEMA, **kwargs)


def _pandas(**kwargs: Any) -> Call:
    df = pd.DataFrame({"id": [1], "v": ["a"]})
    return lambda tbl, tmp: raylake.from_pandas(df, str(tmp / "new"), **kwargs)


def _messages(**kwargs: Any) -> Call:
    def call(tbl: raylake.Table, tmp: Path) -> Any:
        writer = tbl.new_writer()
        writer.write(ROWS)
        return tbl.commit(writer.prepare_commit(), **kwargs)

    return call


def _merge(clause: Callable[[Any], Any]) -> Call:
    def call(tbl: raylake.Table, tmp: Path) -> Any:
        return clause(tbl.merge(ROWS, on="id")).execute()

    return call


# (kind of mistake, entry point, call, the argument named, the old class still raised)
CASES: list[tuple[str, str, Call, str, type[Exception] | None]] = [
    # a flag that is not True or False
    ("flag", "Table.write", lambda t, p: t.write(ROWS, allow_empty="no"), "allow_empty", None),
    ("flag", "create_table", _new(exist_ok="yes"), "exist_ok", None),
    ("flag", "Table.stream", lambda t, p: t.stream(include_row_kind="yes"), "include_row_kind",
     StreamError),
    ("flag", "StreamingJob", _job(include_row_kind="yes"), "include_row_kind", StreamError),
    ("flag", "read_lake_stream", _lake_stream(prefetch="no"), "prefetch", StreamError),
    ("flag", "LakeDatasink", _sink(create_if_missing="no"), "create_if_missing", None),
    ("flag", "LakeIterableDataset", _iterable(shuffle="no"), "shuffle", None),
    ("flag", "LakeStreamDataset", _stream_dataset(shuffle="no"), "shuffle", None),
    # a count out of range
    ("count", "create_table", _new(buckets=0), "buckets", SchemaError),
    ("count", "from_pandas", _pandas(buckets=0), "buckets", SchemaError),
    ("count", "LakeDatasink", _sink(buckets=0), "buckets", SchemaError),
    ("count", "Table.stream", lambda t, p: t.stream(catch_up_after=0), "catch_up_after",
     StreamError),
    ("count", "StreamingJob", _job(num_shards=0), "num_shards", StreamError),
    ("count", "read_lake_stream", _lake_stream(max_snapshots_per_dataset=0),
     "max_snapshots_per_dataset", StreamError),
    ("count", "LakeIterableDataset", _iterable(batch_size=0), "batch_size", None),
    ("count", "LakeStreamDataset", _stream_dataset(batch_size=0), "batch_size", None),
    ("count", "Table.expire_snapshots", lambda t, p: t.expire_snapshots(retain_last=0),
     "retain_last", InvalidOptionError),
    # one string where a list of column names is wanted
    ("names", "create_table", _new(primary_key="id"), "primary_key", SchemaError),
    ("names", "from_pandas", _pandas(partition_by="v"), "partition_by", SchemaError),
    ("names", "LakeDatasink", _sink(primary_key="id"), "primary_key", SchemaError),
    ("names", "Table.to_arrow", lambda t, p: t.to_arrow(columns="id"), "columns", None),
    ("names", "Table.stream", lambda t, p: t.stream(columns="id"), "columns", StreamError),
    ("names", "StreamingJob", _job(columns="id"), "columns", StreamError),
    ("names", "LakeStreamDataset", _stream_dataset(columns="id"), "columns", None),
    # a mode or other choice that is not one of the choices
    ("choice", "Table.commit", _messages(mode="sideways"), "mode", None),
    ("choice", "Table.write", lambda t, p: t.write(ROWS, mode="apend"), "mode", None),
    ("choice", "from_pandas", _pandas(mode="ignore"), "mode", None),
    ("choice", "LakeDatasink", _sink(mode="sideways"), "mode", InvalidOptionError),
    ("choice", "Table.stream", lambda t, p: t.stream(on_overwrite="ignore"), "on_overwrite",
     StreamError),
    ("choice", "StreamingJob", _job(on_overwrite="ignore"), "on_overwrite", StreamError),
    ("choice", "Table.stream start", lambda t, p: t.stream(start="soon"), "start", StreamError),
    # a filter that is no filter (a pyarrow expression, bytes)
    ("filter", "Table.to_arrow", lambda t, p: t.to_arrow(filter=pc.field("id") > 1), "filter",
     FilterError),
    ("filter", "Table.changes", lambda t, p: t.changes(0, filter=b"id > 1"), "filter",
     FilterError),
    ("filter", "LakeIterableDataset", _iterable(columns=["id"], filter=b"id > 1"), "filter",
     FilterError),
    ("filter", "Table.stream", lambda t, p: t.stream(filter=b"id > 1"), "filter", StreamError),
    # a schema that is none
    ("schema", "from_pandas", _pandas(schema="id"), "schema", SchemaError),
    ("schema", "create_table", lambda t, p: raylake.create_table(str(p / "new"), "id"),
     "schema", SchemaError),
    ("schema", "LakeDatasink", _sink(schema="id"), "schema", SchemaError),
    # a consumer id that cannot be one
    ("consumer", "Table.stream", lambda t, p: t.stream(consumer_id="a/b"), "consumer_id",
     ConsumerError),
    ("consumer", "Table.reset_consumer", lambda t, p: t.reset_consumer("a/b", 1), "consumer_id",
     ConsumerError),
    ("consumer", "StreamingJob", _job(consumer_id="a/b"), "consumer_id", ConsumerError),
    ("consumer", "read_lake_stream", _lake_stream(consumer_id=7), "consumer_id", ConsumerError),
    # a merge clause's column or value of the wrong type
    ("merge", "when_matched_update", _merge(lambda m: m.when_matched_update({1: "s.v"})),
     "a column to set", MergeError),
    ("merge", "when_not_matched_insert", _merge(lambda m: m.when_not_matched_insert({"v": [1]})),
     "a merge value", MergeError),
    # a table option set to None
    ("option", "create_table", _new(options={"bucket": None}), "bucket", InvalidOptionError),
    ("option", "LakeDatasink", _sink(options={"bucket": None}), "bucket", InvalidOptionError),
]  # fmt: skip


@pytest.fixture
def tbl(tmp_path: Path) -> raylake.Table:
    created = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    created.write(ROWS)
    return created


@pytest.mark.parametrize(
    ("kind", "entry", "call", "name", "old"),
    CASES,
    ids=[f"{kind}-{entry}-{name}" for kind, entry, _, name, _ in CASES],
)
def test_the_same_mistake_raises_invalid_argument_error_everywhere(
    tbl: raylake.Table,
    tmp_path: Path,
    kind: str,
    entry: str,
    call: Call,
    name: str,
    old: type[Exception] | None,
) -> None:
    snapshots = [s.id for s in tbl.snapshots()]
    with pytest.raises(InvalidArgumentError) as info:
        call(tbl, tmp_path)
    error = info.value
    assert error.name == name and name in str(error)  # it names the argument
    assert isinstance(error, TypeError | ValueError)
    if old is not None:
        assert isinstance(error, old)  # what callers caught before still catches it
    assert [s.id for s in tbl.snapshots()] == snapshots and tbl.consumers() == []
    assert not (tmp_path / "new").exists() and not (tmp_path / "sink").exists()


def test_every_kind_of_mistake_is_tried_at_several_entry_points() -> None:
    kinds: dict[str, set[str]] = {}
    for kind, entry, *_ in CASES:
        kinds.setdefault(kind, set()).add(entry)
    assert all(len(entries) >= 2 for entries in kinds.values()), kinds


def test_the_cli_reports_an_argument_mistake_by_name(
    tbl: raylake.Table, capsys: pytest.CaptureFixture[str]
) -> None:
    from raylake.cli import main

    assert main(["consumers", tbl.uri, "--snapshot", "2"]) == 2
    assert "--snapshot must be given only with --reset ID" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("check", "value", "expected"),
    [
        (lambda v: check_count("n", v), np.int64(3), 3),
        (lambda v: check_count("n", v, 1), np.uint8(1), 1),
        (lambda v: check_optional_count("n", v), np.int32(2), 2),
        (lambda v: check_seconds("s", v), np.float32(0.5), 0.5),
        (lambda v: check_seconds("s", v), np.int64(2), 2.0),
    ],
)
def test_the_shared_checks_take_numpy_numbers_as_python_ones(
    check: Callable[[Any], Any], value: Any, expected: Any
) -> None:
    """Counts and seconds from numpy (an array's length, a config read with numpy) are the
    numbers they are, returned as Python ones for Ray, JSON and saved states; numpy's
    bools stay refused."""
    got = check(value)
    assert got == expected and type(got) is type(expected)
    with pytest.raises(InvalidArgumentError):
        check(np.True_)
