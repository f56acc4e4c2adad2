"""Columns named like Spark paths (``user.name``) or with a backtick are written, read and
merged by their exact names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
import raylake.spark as rs
from raylake.errors import SchemaError

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("user.name", pa.string()), ("x`y", pa.int64())]
)
DDL = "id long, `user.name` string, `x``y` long"


@pytest.mark.parametrize("primary_key", [[], ["id"]])
def test_write_read_merge_columns_with_dots_and_backticks(
    spark: Any, warehouse: Path, primary_key: list[str]
) -> None:
    uri = str(warehouse / "t")
    if primary_key:  # else written into a new table
        raylake.create_table(uri, SCHEMA, primary_key=primary_key, buckets=2)
    rs.write(spark.createDataFrame([(1, "a", 10)], DDL), uri)
    rs.write(spark.createDataFrame([(2, "b", 20)], DDL), uri)  # into the existing table
    tbl = raylake.open_table(uri)
    assert tbl.schema.names == SCHEMA.names
    source = spark.createDataFrame([(2, "B", 21), (3, "c", 30)], DDL)
    merge = rs.merge(source, uri, on="id").when_matched_update().when_not_matched_insert()
    assert (merge.execute().inserted, tbl.to_arrow().num_rows) == (1, 3)
    expected = [(1, "a", 10), (2, "B", 21), (3, "c", 30)]
    assert [tuple(r.values()) for r in tbl.to_arrow().sort_by("id").to_pylist()] == expected
    for filter in (None, "id > 1"):
        rows = rs.read(spark, uri, filter=filter).orderBy("id").collect()
        assert (
            rows
            == [r for r in spark.createDataFrame(expected, DDL).collect()][
                (0 if filter is None else 1) :
            ]
        )
        assert rs.read(spark, uri, columns=["x`y"], filter=filter).columns == ["x`y"]


def test_columns_that_differ_only_in_case(spark: Any, warehouse: Path, spark_jobs: Any) -> None:
    """A table from pandas may hold `a` and `A`: Spark reads it (by raylake's reader), and
    a write of such a DataFrame in a case-insensitive session is refused by name, before
    anything is created, as Spark's own writer refuses it."""
    schema = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("A", pa.string())])
    tbl = raylake.create_table(str(warehouse / "t"), schema)
    tbl.write(pa.table({"id": [1, 2], "a": [10, 20], "A": ["x", "y"]}, schema=schema))
    assert spark.conf.get("spark.sql.caseSensitive") == "false"
    rows = rs.read(spark, tbl.uri).orderBy("id").collect()
    assert [tuple(r) for r in rows] == [(1, 10, "x"), (2, 20, "y")]
    assert [
        tuple(r) for r in rs.read(spark, tbl.uri, columns=["A"], filter="a > 10").collect()
    ] == [("y",)]
    df = spark.createDataFrame([(3, 30, "z")], "id long, a long, A string")
    jobs = spark_jobs()
    for uri in (tbl.uri, str(warehouse / "new")):
        with pytest.raises(SchemaError, match=r"'a' and 'A'.*spark\.sql\.caseSensitive"):
            rs.write(df, uri)
    assert spark_jobs() == jobs and len(tbl.snapshots()) == 1
    assert not (warehouse / "new").exists()


@pytest.mark.parametrize("primary_key", [[], ["id"]])
def test_a_column_named_in_another_case_writes_the_tables_column(
    spark: Any, warehouse: Path, primary_key: list[str]
) -> None:
    """In a case-insensitive session (Spark's default) `ID` is `id`, as Spark resolves it:
    a write of `ID` was refused, and with schema_mode="merge" it added a column `ID` and
    wrote the ids as nulls into `id` (of an append table)."""
    uri = str(warehouse / "t")
    schema = pa.schema([("id", pa.int64()), ("Name", pa.string())])
    raylake.create_table(uri, schema, primary_key=primary_key, buckets=1 if primary_key else None)
    rs.write(spark.createDataFrame([(1, "a")], "ID long, name string"), uri)
    df = spark.createDataFrame([(2, "b", 2.5)], "Id long, NAME string, score double")
    rs.write(df, uri, schema_mode="merge")
    tbl = raylake.open_table(uri)
    assert tbl.schema.names == ["id", "Name", "score"]
    assert sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "Name": "a", "score": None},
        {"id": 2, "Name": "b", "score": 2.5},
    ]
