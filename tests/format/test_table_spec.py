"""The table-creation keywords are one frozen value, TableSpec (raylake/format/table_spec.py),
made and checked once per call by every entry point that can create a table; the public
keywords keep working."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake.cli import main
from raylake.errors import InvalidArgumentError, InvalidOptionError, SchemaError
from raylake.format.schema import build_table_schema
from raylake.format.table_spec import TableSpec
from raylake.table.catalog import open_or_create_table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("x", pa.float64())])
LAYOUT: dict[str, Any] = {
    "partition_by": ["dt"],
    "primary_key": ["id", "dt"],
    "buckets": 2,
    "options": {"merge-engine": "deduplicate", "write.target-file-size": 1 << 20},
}


def test_a_spec_is_checked_normalized_and_frozen() -> None:
    spec = TableSpec.of(**LAYOUT)
    assert spec.partition_by == ("dt",) and spec.primary_key == ("id", "dt")
    assert spec.options == {"merge-engine": "deduplicate", "write.target-file-size": str(1 << 20)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.buckets = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert TableSpec.of() == TableSpec() and TableSpec().buckets is None


def test_none_is_no_columns_at_every_entry_point(tmp_path: Path) -> None:
    """``primary_key=None`` and ``partition_by=None``, as pypaimon, deltalake and PyIceberg
    users write them, make an unpartitioned append table (were refused: "must be a list
    of column names, got NoneType None")."""
    assert TableSpec.of(partition_by=None, primary_key=None) == TableSpec()
    none: dict[str, Any] = {"partition_by": None, "primary_key": None}
    made = [
        raylake.create_table(str(tmp_path / "a"), SCHEMA, **none),
        raylake.from_pandas(pd.DataFrame({"id": [1]}), str(tmp_path / "b"), **none),
        open_or_create_table(str(tmp_path / "c"), SCHEMA, spec=TableSpec.of(**none))[0],
    ]
    for tbl in made:
        assert (tbl.table_schema.primary_key, tbl.table_schema.partition_keys) == ((), ())
    assert raylake.create_table(made[0].uri, SCHEMA, exist_ok=True, **none).uri == made[0].uri


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"partition_by": "dt"}, "partition_by must be a list of column names (for one column"),
        ({"primary_key": [1]}, "primary_key must be a list of column names (strings)"),
        ({"buckets": 0}, "buckets must be an int >= 1 or None, got int 0"),
        ({"buckets": "2"}, "buckets must be an int >= 1 or None, got str '2'"),
        # each write sized an array by it: 2**31 + 5 buckets, 16 GiB for a write of 3 rows
        ({"buckets": 2**31 + 5}, "buckets must be at most 65536 (each bucket is a directory"),
        ({"options": ["a"]}, "options must be a mapping of option names to values"),
        ({"options": {"bucket": None}}, "invalid option bucket=None"),
        # A set has no order: Python iterates a set of strings differently in every
        # process, so the same call made tables of other key orders (other buckets) and
        # refused, now and then, a table made from the same set as another layout.
        ({"primary_key": {"id", "dt"}}, "primary_key must be a list of column names, in order"),
        ({"partition_by": frozenset({"dt"})}, "partition_by must be a list of column names, in"),
    ],
)
def test_a_bad_keyword_is_refused_by_the_spec(keywords: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        TableSpec.of(**keywords)
    assert message in str(info.value)
    assert isinstance(info.value, SchemaError | InvalidOptionError)  # the classes of before


def _layout(tbl: raylake.Table) -> tuple[Any, ...]:
    ts = tbl.table_schema
    return ts.partition_keys, ts.primary_key, ts.buckets, dict(ts.options), tbl.schema


def test_every_entry_point_creates_the_same_table_from_the_same_keywords(tmp_path: Path) -> None:
    rows = pa.table({"id": [1], "dt": ["d"], "x": [0.5]}, schema=SCHEMA)
    by_create = raylake.create_table(str(tmp_path / "a"), SCHEMA, **LAYOUT)
    by_pandas = raylake.from_pandas(rows.to_pandas(), str(tmp_path / "b"), SCHEMA, **LAYOUT)
    by_sink, created = open_or_create_table(
        str(tmp_path / "c"), SCHEMA, spec=TableSpec.of(**LAYOUT)
    )
    assert created
    assert _layout(by_create) == _layout(by_pandas) == _layout(by_sink)
    direct = build_table_schema(SCHEMA, **LAYOUT)  # the format's entry, the same spec
    assert (direct.partition_keys, direct.primary_key, direct.buckets) == (("dt",), ("id", "dt"), 2)


def test_a_sink_makes_its_spec_when_it_is_made(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from raylake.datasource import LakeDatasink

    sink = LakeDatasink(str(tmp_path / "t"), **LAYOUT)
    assert sink._create.layout == TableSpec.of(**LAYOUT)
    with pytest.raises(SchemaError, match="buckets must be"):
        LakeDatasink(str(tmp_path / "t"), buckets=-1)


def test_the_cli_creates_with_the_same_spec(tmp_path: Path) -> None:
    csv = tmp_path / "rows.csv"
    csv.write_text("id,dt,x\n1,d,0.5\n")
    uri = str(tmp_path / "t")
    flags = ["--create", "--partition-by", "dt", "--primary-key", "id,dt", "--buckets", "2"]
    assert main(["write", uri, str(csv), *flags]) == 0
    ts = raylake.open_table(uri).table_schema
    assert (ts.partition_keys, ts.primary_key, ts.buckets) == (("dt",), ("id", "dt"), 2)


def test_from_pandas_checks_the_spec_before_reading_the_frame(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="primary_key must be a list"):
        raylake.from_pandas(pd.DataFrame({"id": [None]}), str(tmp_path / "t"), primary_key="id")
    assert not (tmp_path / "t").exists()


def test_an_append_table_refuses_more_than_one_bucket_from_every_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It has no key to spread rows by: buckets=4 was stored and meant nothing."""
    rows = pa.table({"id": [1], "dt": ["d"], "x": [0.5]}, schema=SCHEMA)
    message = "buckets must be 1 or None for an append table"
    with pytest.raises(SchemaError, match=message):
        raylake.create_table(str(tmp_path / "a"), SCHEMA, buckets=4)
    with pytest.raises(SchemaError, match=message):
        raylake.from_pandas(rows.to_pandas(), str(tmp_path / "b"), buckets=2)
    with pytest.raises(SchemaError, match=message):  # the Ray, Spark and streaming sinks'
        open_or_create_table(str(tmp_path / "c"), SCHEMA, spec=TableSpec.of(buckets=3))
    csv = tmp_path / "rows.csv"
    csv.write_text("id,dt,x\n1,d,0.5\n")
    assert main(["write", str(tmp_path / "d"), str(csv), "--create", "--buckets", "2"]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv"]  # nothing written
    assert raylake.create_table(str(tmp_path / "e"), SCHEMA, buckets=1).table_schema.buckets == 1
