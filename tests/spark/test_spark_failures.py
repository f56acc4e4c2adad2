"""Task retries commit every row exactly once; failed jobs and bad input leave nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
import raylake.spark as rs
from raylake.errors import (
    EnvironmentSetupError,
    NullConstraintError,
    SchemaMismatchError,
    UnsupportedTypeError,
)

pytestmark = pytest.mark.spark

# Spark's Python workers cannot import test modules: ship this module's functions by value.
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SMALL_FILES = {"write.row-group-rows": "10", "write.target-file-size": "2048"}


def _kill_first_attempt(flag: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Pass batches through; the first attempt ever dies hard after two batches."""
    for i, batch in enumerate(batches):
        if i == 2 and not os.path.exists(flag):
            open(flag, "w").close()
            os._exit(1)  # an executor-side crash: no cleanup code runs
        yield batch


def _always_fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for i, batch in enumerate(batches):
        if i == 1:
            raise RuntimeError("boom: the job fails")
        yield batch


def _files(tbl: raylake.Table) -> set[str]:
    return {rel for rel, _ in tbl.file_io.list_files("data")}


def _live(tbl: raylake.Table) -> set[str]:
    return {p for s in tbl.scan().plan() for p in s.paths}


@pytest.mark.parametrize("primary_key", [(), ("id",)])
def test_a_retried_task_commits_each_row_once(
    spark: Any, warehouse: Path, tmp_path: Path, primary_key: tuple[str, ...]
) -> None:
    uri = str(warehouse / "retry")
    tbl = raylake.create_table(
        uri,
        pa.schema([("id", pa.int64()), ("v", pa.float64())]),
        primary_key=primary_key,
        options=SMALL_FILES,
    )
    df = spark.range(0, 400, numPartitions=2).selectExpr("id", "cast(id as double) as v")
    flag = str(tmp_path / "killed-once")
    flaky = df.mapInArrow(lambda it: _kill_first_attempt(flag, it), df.schema)
    snap = rs.write(flaky, uri)
    assert os.path.exists(flag)  # the first attempt really died
    assert snap is not None
    counts = Counter(tbl.to_arrow()["id"].to_pylist())
    assert set(counts) == set(range(400)) and set(counts.values()) == {1}
    assert _files(tbl) == _live(tbl)  # the dead attempt's files are gone


def test_a_failed_job_leaves_the_table_unchanged(spark: Any, warehouse: Path) -> None:
    uri = str(warehouse / "fail")
    tbl = raylake.create_table(
        uri, pa.schema([("id", pa.int64()), ("v", pa.float64())]), options=SMALL_FILES
    )
    tbl.write(pa.table({"id": [1], "v": [1.0]}))
    before, files = tbl.latest_snapshot(), _files(tbl)
    df = spark.range(0, 300, numPartitions=2).selectExpr("id", "cast(id as double) as v")
    with pytest.raises(Exception, match="boom"):
        rs.write(df.mapInArrow(_always_fail, df.schema), uri)
    assert tbl.latest_snapshot() == before
    assert _files(tbl) == files


def test_a_failed_job_into_a_new_table_leaves_no_table(spark: Any, warehouse: Path) -> None:
    uri = str(warehouse / "never")
    df = spark.range(0, 300, numPartitions=2).selectExpr("id")
    with pytest.raises(Exception, match="boom"):
        rs.write(df.mapInArrow(_always_fail, df.schema), uri)
    assert not raylake.table.table_exists(uri)


def test_bad_input_is_refused_by_name_and_nothing_is_committed(spark: Any, warehouse: Path) -> None:
    uri = str(warehouse / "strict")
    tbl = raylake.create_table(
        uri, pa.schema([("id", pa.int64()), ("name", pa.string())]), primary_key=["id"]
    )
    with pytest.raises(SchemaMismatchError, match="extra"):
        rs.write(spark.createDataFrame([(1, "a", 2)], "id long, name string, extra int"), uri)
    with pytest.raises(SchemaMismatchError, match="primary-key column"):
        rs.write(spark.createDataFrame([("a",)], "name string"), uri)
    with pytest.raises(SchemaMismatchError, match="name"):
        rs.write(spark.createDataFrame([(1, [1])], "id long, name array<int>"), uri)
    with pytest.raises(UnsupportedTypeError, match="'gap'"):
        rs.write(spark.sql("select 1L as id, interval 1 day as gap"), str(warehouse / "iv"))
    assert not raylake.table.table_exists(str(warehouse / "iv"))
    assert tbl.latest_snapshot() is None
    assert _files(tbl) == set()


def test_a_tasks_refusal_of_its_rows_is_raised_as_itself(spark: Any, warehouse: Path) -> None:
    """A null in a column that holds none is found by the task writing it: the driver
    raises raylake's error (it was a PythonException holding a traceback string, after
    Spark had retried the task), and nothing of the job stays."""
    uri = str(warehouse / "not-null")
    schema = pa.schema([("id", pa.int64()), pa.field("name", pa.string(), nullable=False)])
    tbl = raylake.create_table(uri, schema, options=SMALL_FILES)
    tbl.write(pa.table({"id": [1], "name": ["a"]}, schema=schema))
    before, files = tbl.latest_snapshot(), _files(tbl)
    rows = [(i, None if i == 150 else "x") for i in range(300)]
    df = spark.createDataFrame(rows, "id long, name string").repartition(3)
    with pytest.raises(NullConstraintError, match="'name'") as excinfo:
        rs.write(df, uri)
    assert excinfo.value.column == "name"
    assert tbl.latest_snapshot() == before and _files(tbl) == files


def test_a_wrong_column_type_is_refused_before_any_spark_job(
    spark: Any, warehouse: Path, spark_jobs: Any
) -> None:
    uri = str(warehouse / "typed")
    tbl = raylake.create_table(uri, pa.schema([("id", pa.int64()), ("score", pa.float64())]))
    tbl.write(pa.table({"id": [1], "score": [0.5]}))
    before, files = tbl.latest_snapshot(), _files(tbl)
    df = spark.createDataFrame([(2, "high"), (3, "low")], "id long, score string")
    with pytest.raises(SchemaMismatchError, match="'score' has type string") as excinfo:
        rs.write(df, uri)
    # Refused from df.schema on the driver, not by executors (a PythonException).
    assert type(excinfo.value) is SchemaMismatchError and excinfo.value.column == "score"
    assert spark_jobs() == []
    assert tbl.latest_snapshot() == before and _files(tbl) == files
    assert df.count() == 2 and spark_jobs() != []  # the control: jobs are seen


def test_raydp_hand_off_on_local_spark_names_the_fix(ray_cluster: Any) -> None:
    """RayDP's own error on a local session is a bare ValueError about an actor name.
    The child joins the session's Ray cluster as a second driver (as the soak does)
    rather than starting a cluster of its own."""
    address = ray_cluster.get_runtime_context().gcs_address
    script = (
        "import ray\n"
        "import raylake.spark as rs\n"
        "from raylake.errors import EnvironmentSetupError\n"
        f"ray.init(address={address!r}, log_to_driver=False)\n"
        "spark = rs.session('local-app', on_ray=False, master='local[1]')\n"
        "ds = ray.data.range(3)\n"
        "calls = {'from_ray': lambda: rs.from_ray(ds, spark),\n"
        "         'to_ray': lambda: rs.to_ray(spark.range(3))}\n"
        "for name, call in calls.items():\n"
        "    try:\n"
        "        call()\n"
        "    except EnvironmentSetupError as exc:\n"
        "        print('ERROR', name, exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    for name in ("from_ray", "to_ray"):
        assert f"ERROR {name} " in out.stdout, out.stderr[-3000:]
    assert "'local-app'" in out.stdout and "session(on_ray=True)" in out.stdout


def test_no_java_and_raydp_without_ray_get_clear_errors(tmp_path: Path) -> None:
    script = (
        "import raylake.spark as rs\n"
        "from raylake.errors import EnvironmentSetupError\n"
        "try:\n"
        "    rs.session(on_ray=True)\n"
        "except EnvironmentSetupError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert "ERROR" in out.stdout and "ray.init()" in out.stdout, out.stderr[-2000:]
    no_java = {**env, "JAVA_HOME": str(tmp_path / "nowhere"), "PATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", script.replace("on_ray=True", "on_ray=False")],
        capture_output=True,
        text=True,
        env=no_java,
    )
    assert "ERROR" in out.stdout and "install one" in out.stdout, out.stderr[-2000:]


def test_check_java_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from raylake.spark.session import check_java

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "missing-jdk"))
    with pytest.raises(EnvironmentSetupError, match="openjdk-17"):
        check_java()


def test_a_null_key_is_raised_as_itself_by_the_bucket_pass(spark: Any, warehouse: Path) -> None:
    """A primary-key write's first pass computes each row's bucket, and a null key failed
    it: Spark retried the task and raised a PythonException holding the traceback."""
    uri = str(warehouse / "null-key")
    schema = pa.schema([("k", pa.string()), ("id", pa.int64())])
    tbl = raylake.create_table(uri, schema, primary_key=["k", "id"], buckets=2)
    tbl.write(pa.table({"k": ["a"], "id": [1]}, schema=schema))
    before, files = tbl.latest_snapshot(), _files(tbl)
    df = spark.createDataFrame([("b", 2), (None, 3)], "k string, id long")
    with pytest.raises(NullConstraintError, match="'k'") as excinfo:
        rs.write(df, uri)
    assert excinfo.value.column == "k"
    assert tbl.latest_snapshot() == before and _files(tbl) == files


def test_a_failed_job_waits_for_its_running_tasks_before_deleting_their_files(
    warehouse: Path,
) -> None:
    """A job that fails raises at once while Spark stops its other tasks asynchronously:
    a task still writing (partition 0 here, its files in many small row groups) wrote
    files after the driver had deleted the job's, and they stayed in the table. Two
    tasks must run at once, so the job runs in a local[2] session of its own (the
    package's session has one executor core)."""
    uri = str(warehouse / "late-task")
    tbl = raylake.create_table(
        uri, pa.schema([("id", pa.int64()), ("v", pa.float64())]), options=SMALL_FILES
    )
    tbl.write(pa.table({"id": [1], "v": [1.0]}))
    before, files = tbl.latest_snapshot(), _files(tbl)
    script = (
        "import os, time\n"
        "from pyspark import TaskContext\n"
        "import raylake.spark as rs\n"
        f"uri = {uri!r}\n"
        "def fail_once_writing(batches):\n"
        "    # partition 1 fails as soon as partition 0 has written a file\n"
        "    if TaskContext.get().partitionId() == 1:\n"
        "        deadline = time.time() + 60\n"
        "        while time.time() < deadline and not any(\n"
        "            f.startswith('spark-') for _, _, fs in os.walk(uri + '/data') for f in fs\n"
        "        ):\n"
        "            time.sleep(0.01)\n"
        "        raise RuntimeError('boom: the job fails')\n"
        "    yield from batches\n"
        "spark = rs.session('late-task', on_ray=False, master='local[2]')\n"
        "spark.conf.set('spark.sql.execution.arrow.maxRecordsPerBatch', '1000000')\n"
        "df = spark.range(0, 30000, numPartitions=2).selectExpr('id', 'cast(id as double) as v')\n"
        "try:\n"
        "    rs.write(df.mapInArrow(fail_once_writing, df.schema), uri)\n"
        "except Exception as exc:\n"
        "    print('FAILED', 'boom' in str(exc))\n"
        "time.sleep(3)  # a task that still ran would write meanwhile\n"
        "rs.stop()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert "FAILED True" in out.stdout, out.stderr[-3000:]
    assert tbl.latest_snapshot() == before
    assert _files(tbl) == files
