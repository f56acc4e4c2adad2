"""raylake.spark.merge: a Spark DataFrame merged into a primary-key or an append
table, one commit, equal to Table.merge of the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from merge_case import (
    SCHEMA,
    change_schema_meanwhile,
    expected_after_change,
    merge_clauses,
    rows_after_change,
    source_rows,
    source_table,
    target_rows,
)

import raylake
import raylake.spark as rs
from raylake.errors import MergeCardinalityError, SchemaMismatchError, UnsupportedOperationError
from raylake.spark.merge import SparkMerger

pytestmark = pytest.mark.spark


def test_spark_merge_equals_the_local_merge(spark: Any, warehouse: Path) -> None:
    target = target_rows()
    rows = source_rows()
    source = source_table()
    tables = []
    for name in ("local", "spark"):
        tbl = raylake.create_table(str(warehouse / name), SCHEMA, primary_key=["k"], buckets=4)
        tbl.write(target)
        tables.append(tbl)
    local = merge_clauses(tables[0].merge(source, on="k")).execute()
    df = spark.createDataFrame(rows, "k long, n long, s string").repartition(3)
    remote = merge_clauses(rs.merge(df, tables[1].uri, on="k")).execute()
    counts = (remote.inserted, remote.updated, remote.deleted)
    assert counts == (local.inserted, local.updated, local.deleted) and all(counts)
    assert [len(t.snapshots()) for t in tables] == [2, 2]
    assert tables[1].to_arrow().sort_by("k") == tables[0].to_arrow().sort_by("k")
    data = warehouse / "spark" / "data"
    committed = {p for s in tables[1].scan().plan() for p in s.paths}
    on_disk = {str(p.relative_to(warehouse / "spark")) for p in data.rglob("*.parquet")}
    assert on_disk == committed  # no file of a discarded attempt is left


def test_spark_merge_refusals_write_nothing(spark: Any, warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA, primary_key=["k"], buckets=2)
    tbl.write(pa.table({"k": [1, 2], "n": [1, 2], "s": ["a", "b"]}, schema=SCHEMA))
    before = set((warehouse / "t" / "data").rglob("*"))
    twice = spark.createDataFrame([(2, 1, "x"), (2, 1, "y")], "k long, n long, s string")
    with pytest.raises(MergeCardinalityError, match=r"matched 2 source rows"):
        rs.merge(twice, tbl.uri, on="k").when_matched_update().execute()
    with pytest.raises(UnsupportedOperationError, match="by_source"):
        rs.merge(twice, tbl.uri, on="k").when_not_matched_by_source_delete().execute()
    assert len(tbl.snapshots()) == 1
    assert set((warehouse / "t" / "data").rglob("*")) == before


def _append_tables(warehouse: Path) -> list[raylake.Table]:
    tables = []
    for name in ("local", "spark"):
        tbl = raylake.create_table(str(warehouse / name), SCHEMA)
        for i in range(6):  # six files, disjoint key ranges: dealt among several tasks
            keys = range(i * 40, i * 40 + 40)
            tbl.write(
                pa.table({"k": keys, "n": [k % 7 for k in keys], "s": ["a"] * 40}, schema=SCHEMA)
            )
        tables.append(tbl)
    return tables


def _files_on_disk(tbl: raylake.Table) -> set[str]:
    return {rel for rel, _ in tbl.file_io.list_files("data")}


def _live(tbl: raylake.Table) -> set[str]:
    return {p for s in tbl.scan().plan() for p in s.paths}


def test_spark_merge_into_an_append_table_equals_the_local_merge(
    spark: Any, warehouse: Path
) -> None:
    tables = _append_tables(warehouse)
    rows = [(5, 1, "u"), (6, -1, "del"), (45, 2, "u"), (130, 5, "u"), (131, 0, "del"),
            (300, 3, "u"), (301, None, "u"), (302, 4, "u")]  # fmt: skip
    source = pa.table({"k": [r[0] for r in rows], "n": [r[1] for r in rows],
                       "s": [r[2] for r in rows]})  # fmt: skip

    def clauses(merger: Any) -> Any:
        return merge_clauses(merger).when_not_matched_by_source_update(
            {"s": "'old'"}, predicate="t.k >= 230"
        )

    local = clauses(tables[0].merge(source, on="k")).execute()
    df = spark.createDataFrame(rows, "k long, n long, s string").repartition(3)
    remote = clauses(rs.merge(df, tables[1].uri, on="k")).execute()
    counts = (remote.inserted, remote.updated, remote.deleted)
    assert counts == (local.inserted, local.updated, local.deleted) and all(counts)
    assert local.files_rewritten == remote.files_rewritten == 4
    assert tables[1].to_arrow().sort_by("k") == tables[0].to_arrow().sort_by("k")
    assert [t.latest_snapshot().commit_kind for t in tables] == ["OVERWRITE"] * 2
    assert [len(t.snapshots()) for t in tables] == [7, 7]
    lingering = [len(_files_on_disk(t) - _live(t)) for t in tables]
    assert lingering == [4, 4]  # the rewritten files (until expiration), no task's leftovers


def test_spark_append_merge_that_fails_in_a_task_leaves_no_files(
    spark: Any, warehouse: Path
) -> None:
    tbl = _append_tables(warehouse)[1]
    before = _files_on_disk(tbl)
    # Key 7 matches twice (an error in the task holding the first file), while the
    # tasks of the other files rewrite theirs.
    rows = [(7, 1, "x"), (7, 2, "y"), (47, 1, "u"), (87, 1, "u"), (127, 1, "u")]
    df = spark.createDataFrame(rows, "k long, n long, s string")
    with pytest.raises(MergeCardinalityError, match=r"matched 2 source rows"):
        rs.merge(df, tbl.uri, on="k").when_matched_update().when_not_matched_insert().execute()
    assert len(tbl.snapshots()) == 6
    assert _files_on_disk(tbl) == before


def test_spark_merge_into_an_empty_append_table_inserts(spark: Any, warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "empty"), SCHEMA)
    df = spark.createDataFrame([(1, 1, "a"), (2, 2, "b")], "k long, n long, s string")
    result = rs.merge(df, tbl.uri, on="k").when_matched_update().when_not_matched_insert()
    assert result.execute().inserted == 2
    assert tbl.to_arrow().sort_by("k")["k"].to_pylist() == [1, 2]


def test_spark_merge_raises_cardinality_errors_as_themselves(spark: Any, warehouse: Path) -> None:
    """Found in the tasks, raised on the driver as MergeCardinalityError."""
    append = raylake.create_table(str(warehouse / "append"), SCHEMA)
    pk = raylake.create_table(str(warehouse / "pk"), SCHEMA, primary_key=["k"], buckets=2)
    for tbl in (append, pk):
        tbl.write(pa.table({"k": [1, 2], "n": [1, 2], "s": ["a", "b"]}, schema=SCHEMA))
        twice = spark.createDataFrame([(2, 1, "x"), (2, 2, "y")], "k long, n long, s string")
        with pytest.raises(MergeCardinalityError, match="matched 2 source rows") as info:
            rs.merge(twice, tbl.uri, on="k").when_matched_update().execute()
        assert info.value.count == 2
    inserts = spark.createDataFrame([(5, 1, "x"), (5, 2, "y")], "k long, n long, s string")
    with pytest.raises(MergeCardinalityError, match="would insert primary key"):
        rs.merge(inserts, pk.uri, on="k").when_not_matched_insert().execute()
    assert [len(t.snapshots()) for t in (append, pk)] == [1, 1]


@pytest.mark.parametrize("primary_key", [[], ["k"]])
def test_spark_merge_checks_types_and_literals_before_any_job(
    spark: Any, warehouse: Path, spark_jobs: Any, primary_key: list[str]
) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA, primary_key=primary_key)
    tbl.write(pa.table({"k": [1, 2], "n": [1, 2], "s": ["a", "b"]}, schema=SCHEMA))
    strings = spark.createDataFrame([(1, "oops", "x")], "k long, n string, s string")
    with pytest.raises(SchemaMismatchError, match="'n'"):
        rs.merge(strings, tbl.uri, on="k").when_matched_update().execute()
    source = spark.createDataFrame([(1, 5, "x")], "k long, n long, s string")
    with pytest.raises(SchemaMismatchError, match="'n'"):
        rs.merge(source, tbl.uri, on="k").when_matched_update({"n": "'str'"}).execute()
    assert spark_jobs() == [] and len(tbl.snapshots()) == 1


@pytest.mark.parametrize("primary_key", [["id"], []])
def test_spark_merge_after_a_schema_change_while_planning_keeps_the_new_column(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch, primary_key: list[str]
) -> None:
    """Another writer adds a column and writes rows with it after the merge planned: each
    attempt merges under the schema it finds (its tasks read and rewrote the rows under
    the planned schema, and the column's values were lost)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int64())])
    tbl = raylake.create_table(
        str(warehouse / "t"), schema, primary_key=primary_key, buckets=2 if primary_key else None
    )
    tbl.write(pa.table({"id": [1, 2], "n": [1, 2]}, schema=schema))
    meanwhile = change_schema_meanwhile(monkeypatch, SparkMerger, tbl.uri)
    df = spark.createDataFrame([(1, 1)], "id long, n long")
    rs.merge(df, tbl.uri, on="id").when_matched_update({"n": "t.n + s.n"}).execute()
    assert meanwhile
    assert rows_after_change(tbl.uri) == expected_after_change(primary_key)


def test_spark_insert_only_merge_into_an_append_table_skips_matched_rows(
    spark: Any, warehouse: Path
) -> None:
    """Without an update clause no task ran, so no source row counted as matched: every
    one was inserted, a second copy of the rows the merge should have skipped."""
    tables = _append_tables(warehouse)
    rows = [(5, 1, "u"), (45, 2, "u"), (300, 3, "u")]
    source = pa.table({"k": [r[0] for r in rows], "n": [r[1] for r in rows],
                       "s": [r[2] for r in rows]})  # fmt: skip
    local = tables[0].merge(source, on="k").when_not_matched_insert().execute()
    df = spark.createDataFrame(rows, "k long, n long, s string")
    remote = rs.merge(df, tables[1].uri, on="k").when_not_matched_insert().execute()
    assert remote.inserted == local.inserted == 1
    assert tables[1].to_arrow().sort_by("k") == tables[0].to_arrow().sort_by("k")


def test_spark_merge_raises_a_key_that_does_not_fit_as_itself(spark: Any, warehouse: Path) -> None:
    """The bucket pass failed on a source key too large for the key column: Spark retried
    the task and raised a PythonException holding the traceback."""
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("v", pa.string())])
    tbl = raylake.create_table(str(warehouse / "t"), schema, primary_key=["id"], buckets=2)
    tbl.write(pa.table({"id": pa.array([1], pa.int32()), "v": ["a"]}, schema=schema))
    before = tbl.latest_snapshot()
    src = spark.createDataFrame([(2, "b"), (2**40, "x")], "id long, v string")
    with pytest.raises(SchemaMismatchError, match=r"'id'.*does not fit int32"):
        rs.merge(src, tbl.uri, on="id").when_matched_update().when_not_matched_insert().execute()
    assert tbl.latest_snapshot() == before
