"""Wrong arguments of raylake.spark's write/read/to_ray/from_ray are refused on the
driver, naming the argument, before any Spark job runs and without touching the table:
create_if_missing='no' used to create the table, commit_properties={'run': 1} was
committed, and a pandas DataFrame failed as an AttributeError."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import raylake
import raylake.spark as rs
from raylake.errors import InvalidArgumentError, UnknownKeywordError

pytestmark = pytest.mark.spark


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"create_if_missing": "no"}, "create_if_missing must be True or False, got str 'no'"),
        ({"commit_properties": {"run": 1}}, "commit_properties must be a dict of strings to"),
        ({"commit_properties": "run=1"}, "commit_properties must be a dict with string keys"),
        ({"mode": "apend"}, "mode must be one of ['append', 'overwrite', 'upsert'] or None"),
    ],
)
def test_write_names_a_bad_keyword_before_any_spark_job(
    spark: Any, warehouse: Path, spark_jobs: Any, kwargs: dict[str, Any], message: str
) -> None:
    df = spark.createDataFrame([(1, 1.0)], "id long, x double")
    existing = str(warehouse / "t")
    raylake.create_table(existing, pa.schema([("id", pa.int64()), ("x", pa.float64())]))
    before = files(warehouse)
    for uri in (existing, str(warehouse / "new")):
        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            rs.write(df, uri, **kwargs)
    assert spark_jobs() == [] and files(warehouse) == before


def test_engines_name_an_argument_that_is_not_a_spark_object(
    spark: Any, warehouse: Path, spark_jobs: Any
) -> None:
    uri = str(warehouse / "t")
    raylake.from_pandas(pa.table({"id": [1]}).to_pandas(), uri)
    pandas_df = pa.table({"id": [2]}).to_pandas()
    calls = {
        "df must be a pyspark.sql.DataFrame": [
            lambda: rs.write(pandas_df, uri),
            lambda: rs.to_ray(pandas_df, via="table", uri=str(warehouse / "h")),
        ],
        "spark must be a pyspark.sql.SparkSession": [lambda: rs.read(None, uri)],
        "ds must be a ray.data.Dataset": [lambda: rs.from_ray(pa.table({"id": [1]}), spark)],
    }
    before = files(warehouse)
    for message, refused in calls.items():
        for call in refused:
            with pytest.raises(InvalidArgumentError, match=re.escape(message)):
                call()
    assert spark_jobs() == [] and files(warehouse) == before


def test_a_misspelled_keyword_is_named_with_the_closest(warehouse: Path) -> None:
    uri = str(warehouse / "t")
    calls = {
        "primary_keys": (lambda: rs.write(None, uri, primary_keys=["id"]), "primary_key"),  # type: ignore[arg-type]
        "colums": (lambda: rs.read(None, uri, colums=["id"]), "columns"),  # type: ignore[arg-type]
        "num_executor": (lambda: rs.session(num_executor=2), "num_executors"),
    }
    for keyword, (call, closest) in calls.items():
        with pytest.raises(UnknownKeywordError, match=f"'{keyword}'; did you mean '{closest}'"):
            call()
    assert not (warehouse / "t").exists()


def test_a_memory_table_is_refused_before_any_spark_job(
    spark: Any, warehouse: Path, spark_jobs: Any
) -> None:
    """Spark's executors do not see the driver's memory://: a write's commit said its
    files had been deleted, a read failed in every task with Spark's PythonException."""
    uri = "memory://raylake-spark-reach/t"
    df = spark.createDataFrame([(1, 1.0)], "id long, x double")
    raylake.create_table(uri, pa.schema([("id", pa.int64()), ("x", pa.float64())]))
    try:
        calls = [
            lambda: rs.write(df, uri),
            lambda: rs.read(spark, uri),
            lambda: rs.merge(df, uri, "id"),
        ]
        for call in calls:
            with pytest.raises(InvalidArgumentError, match="memory:// table lives only"):
                call()
        assert spark_jobs() == [] and raylake.open_table(uri).snapshots() == []
    finally:
        raylake.open_table(uri).file_io.fs.rm("/raylake-spark-reach", recursive=True)


def test_a_streaming_dataframe_is_refused_naming_foreach_batch(spark: Any, warehouse: Path) -> None:
    """Its rows exist only batch by batch: Spark's AnalysisException about
    writeStream.start() came out of write, merge and the hand-off."""
    uri = str(warehouse / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())]), primary_key=["id"], buckets=1)
    stream = spark.readStream.format("rate").load().selectExpr("value AS id")
    before = files(warehouse)
    calls = [
        lambda: rs.write(stream, uri),
        lambda: rs.write(stream, str(warehouse / "new")),
        lambda: rs.merge(stream, uri, on="id").when_not_matched_insert().execute(),
        lambda: rs.to_ray(stream, via="table", uri=str(warehouse / "h")),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match=r"not a streaming one.*foreachBatch"):
            call()
    assert files(warehouse) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_ray": "false"}, "on_ray must be True or False, got str 'false'"),
        ({"master": 5}, "master must be a Spark master URL (a string) or None, got int 5"),
        ({"configs": "a=b"}, "configs must be a dict with string keys, or None, got str"),
        ({"app_name": None}, "app_name must be a string, got NoneType None"),
        ({"num_executors": 0}, "num_executors must be an int >= 1, got int 0"),
        ({"executor_cores": "2"}, "executor_cores must be an int >= 1, got str '2'"),
        ({"executor_memory": 1.5}, "executor_memory must be a size ('1G', '512m') or a number"),
    ],
)
def test_session_names_a_bad_keyword_before_starting_spark(
    kwargs: dict[str, Any], message: str
) -> None:
    """on_ray='false' ran Spark on Ray (or said Ray was not running), a master that is no
    string killed the Java gateway, configs that are no dict raised a bare AttributeError;
    the others reached RayDP, or were ignored by local Spark."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        rs.session(**{"on_ray": False, **kwargs})


def test_session_takes_numpy_counts_as_ints() -> None:
    from raylake.spark.session import _check_session_args

    taken = _check_session_args(
        "a", np.True_, None, np.int64(2), np.int32(1), np.int64(1 << 30), None
    )
    assert taken == (True, 2, 1, 1 << 30) and [type(v) for v in taken] == [bool, int, int, int]
