"""merge_lake: a Ray Dataset merged into a primary-key table, one task per bucket and
one commit, equal to Table.merge of the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

ray = pytest.importorskip("ray")

from merge_case import (  # noqa: E402
    SCHEMA,
    change_schema_meanwhile,
    expected_after_change,
    merge_clauses,
    rows_after_change,
    source_table,
    target_rows,
)
from ray_leftovers import leftovers  # noqa: E402

import raylake  # noqa: E402
from raylake.datasource.merge import LakeMerger  # noqa: E402
from raylake.errors import (  # noqa: E402
    MergeCardinalityError,
    SchemaMismatchError,
    UnsupportedOperationError,
)

pytestmark = pytest.mark.ray


def test_merge_lake_equals_the_local_merge(tmp_path: Path, ray_cluster: Any) -> None:
    target = target_rows()
    source = source_table()
    tables = []
    for name in ("local", "ray"):
        tbl = raylake.create_table(str(tmp_path / name), SCHEMA, primary_key=["k"], buckets=4)
        tbl.write(target)
        tables.append(tbl)
    local = merge_clauses(tables[0].merge(source, on="k")).execute()
    ds = ray.data.from_arrow(source).repartition(3)
    distributed = merge_clauses(raylake.merge_lake(ds, tables[1].uri, on="k")).execute()
    assert (distributed.inserted, distributed.updated, distributed.deleted) == (
        local.inserted,
        local.updated,
        local.deleted,
    )
    assert local.inserted and local.updated and local.deleted
    assert [len(t.snapshots()) for t in tables] == [2, 2]  # one commit each
    assert tables[1].to_arrow().sort_by("k") == tables[0].to_arrow().sort_by("k")
    changes = [
        t.changes(1, include_row_kind=True)
        .to_arrow()
        .sort_by([("k", "ascending"), ("_rl_kind", "ascending")])
        for t in tables
    ]
    assert changes[0] == changes[1]


def test_merge_lake_refusals_write_nothing(tmp_path: Path, ray_cluster: Any) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=["k"], buckets=2)
    tbl.write(pa.table({"k": [1, 2], "n": [1, 2], "s": ["a", "b"]}, schema=SCHEMA))
    before = set((tmp_path / "t" / "data").rglob("*"))
    twice = ray.data.from_arrow(pa.table({"k": [2, 2], "n": [1, 1], "s": ["x", "y"]}))
    with pytest.raises(MergeCardinalityError):
        raylake.merge_lake(twice, tbl.uri, on="k").when_matched_update().execute()
    with pytest.raises(UnsupportedOperationError, match="by_source"):
        raylake.merge_lake(twice, tbl.uri, on="k").when_not_matched_by_source_delete().execute()
    with pytest.raises(UnsupportedOperationError, match="primary key"):
        raylake.merge_lake(
            twice, tbl.uri, on="t.k = s.k and s.n > 0"
        ).when_matched_delete().execute()
    assert len(tbl.snapshots()) == 1
    assert set((tmp_path / "t" / "data").rglob("*")) == before


def test_merge_lake_into_an_append_table_equals_the_local_merge(
    tmp_path: Path, ray_cluster: Any
) -> None:
    tables = []
    for name in ("local", "ray"):
        tbl = raylake.create_table(str(tmp_path / name), SCHEMA)
        for i in range(5):  # five files, disjoint key ranges
            keys = range(i * 40, i * 40 + 40)
            tbl.write(
                pa.table({"k": keys, "n": [k % 7 for k in keys], "s": ["a"] * 40}, schema=SCHEMA)
            )
        tables.append(tbl)
    source = pa.table({"k": [5, 6, 45, 300, 301, 302], "n": [1, -1, 2, 3, None, 4],
                       "s": ["u", "del", "u", "u", "u", "u"]})  # fmt: skip

    def clauses(merger: Any) -> Any:
        return merge_clauses(merger).when_not_matched_by_source_update(
            {"s": "'old'"}, predicate="t.k >= 190"
        )

    local = clauses(tables[0].merge(source, on="k")).execute()
    ds = ray.data.from_arrow(source).repartition(2)
    distributed = clauses(raylake.merge_lake(ds, tables[1].uri, on="k")).execute()
    assert (distributed.inserted, distributed.updated, distributed.deleted) == (
        local.inserted, local.updated, local.deleted,
    )  # fmt: skip
    assert local.files_rewritten == distributed.files_rewritten == 3
    assert tables[1].to_arrow().sort_by("k") == tables[0].to_arrow().sort_by("k")
    assert [t.latest_snapshot().commit_kind for t in tables] == ["OVERWRITE"] * 2
    twice = ray.data.from_arrow(pa.table({"k": [7, 7], "n": [1, 1], "s": ["x", "y"]}))
    before = set((tmp_path / "ray" / "data").rglob("*"))
    with pytest.raises(MergeCardinalityError):
        raylake.merge_lake(twice, tables[1].uri, on="k").when_matched_delete().execute()
    assert set((tmp_path / "ray" / "data").rglob("*")) == before


@pytest.mark.parametrize("primary_key", [["k"], []])
def test_a_source_type_that_does_not_fit_is_refused_before_any_task(
    tmp_path: Path, ray_cluster: Any, monkeypatch: pytest.MonkeyPatch, primary_key: list[str]
) -> None:
    """The driver sees the source's schema only, no rows: its column types are checked
    against the target's there, as Table.merge checks its rows before reading anything."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=primary_key)
    tbl.write(pa.table({"k": [1, 2], "n": [1, 2], "s": ["a", "b"]}, schema=SCHEMA))

    def ran(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the merge started its Ray tasks")

    monkeypatch.setattr(LakeMerger, "_merge_primary_key", ran)
    monkeypatch.setattr(LakeMerger, "_merge_append", ran)
    strings = ray.data.from_arrow(pa.table({"k": [2], "n": ["x"], "s": ["y"]}))
    with pytest.raises(SchemaMismatchError, match="'n' has type string") as excinfo:
        raylake.merge_lake(strings, tbl.uri, on="k").when_matched_update().execute()
    assert type(excinfo.value) is SchemaMismatchError  # not a RayTaskError of one
    assert len(tbl.snapshots()) == 1


@pytest.mark.parametrize("primary_key", [["k"], []])
def test_a_key_of_another_name_and_type_joins_in_the_tasks(
    tmp_path: Path, ray_cluster: Any, primary_key: list[str]
) -> None:
    """``t.k = s.key`` with an int32 key: each task casts it to the target key's type,
    so it hashes to the bucket of its target row (the driver refused it as another type)."""
    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, primary_key=primary_key, buckets=4 if primary_key else None
    )
    tbl.write(target_rows())
    ds = ray.data.from_arrow(pa.table({"key": pa.array([3, 5, 400], pa.int32()), "n": [9] * 3}))
    result = (
        raylake.merge_lake(ds, tbl.uri, on="t.k = s.key")
        .when_matched_update({"n": "s.n"})
        .when_not_matched_insert({"k": "s.key", "n": "s.n"})
        .execute()
    )
    assert (result.updated, result.inserted) == (2, 1)
    assert tbl.count() == 201
    assert sorted(tbl.to_arrow(filter="n = 9")["k"].to_pylist()) == [3, 5, 400]


def _twin_tables(tmp_path: Path, primary_key: list[str]) -> list[raylake.Table]:
    """Two tables of the same rows: one merged locally, one by merge_lake."""
    tables = []
    for name in ("local", "ray"):
        tbl = raylake.create_table(str(tmp_path / name), SCHEMA, primary_key=primary_key)
        tbl.write(pa.table({"k": [1, 2], "n": [1, 2], "s": ["a", "b"]}, schema=SCHEMA))
        tables.append(tbl)
    return tables


def _upsert(builder: Any) -> Any:
    return builder.when_matched_update().when_not_matched_insert().execute()


@pytest.mark.parametrize("primary_key", [["k"], []])
def test_a_merge_that_adds_columns_equals_the_local_merge(
    tmp_path: Path, ray_cluster: Any, primary_key: list[str]
) -> None:
    """The bucket tasks of a primary-key table read the stored schema, which lacked the
    columns schema_mode="merge" adds: every task failed with Arrow's KeyError."""
    source = pa.table({"k": [1, 9], "n": [5, 5], "score": [1.5, 2.5]})
    tables = _twin_tables(tmp_path, primary_key)
    local = _upsert(tables[0].merge(source, on="k", schema_mode="merge"))
    ds = ray.data.from_arrow(source)
    distributed = _upsert(raylake.merge_lake(ds, tables[1].uri, on="k", schema_mode="merge"))
    assert (distributed.inserted, distributed.updated) == (local.inserted, local.updated) == (1, 1)
    got, expected = (raylake.open_table(t.uri).to_arrow().sort_by("k") for t in tables)
    assert got.schema.names == ["k", "n", "s", "score"]
    assert got == expected


def test_columns_a_dataframe_source_adds_take_the_types_of_the_local_merge(
    tmp_path: Path, ray_cluster: Any
) -> None:
    """Table.merge of a DataFrame adds its columns as from_pandas types them (times in
    nanoseconds); merge_lake of ray.data.from_pandas of it took Ray's types, microseconds
    for a datetime64[us] column (what pandas 3's pd.to_datetime gives)."""
    import pandas as pd

    when = pd.to_datetime(["2024-01-01", "2024-01-02"]).astype("datetime64[us]")
    source = pd.DataFrame({"k": [1, 9], "n": [5, 5], "t": when})
    tables = _twin_tables(tmp_path, ["k"])
    _upsert(tables[0].merge(source, on="k", schema_mode="merge"))
    ds = ray.data.from_pandas(source)
    _upsert(raylake.merge_lake(ds, tables[1].uri, on="k", schema_mode="merge"))
    got, expected = (raylake.open_table(t.uri).to_arrow().sort_by("k") for t in tables)
    assert got.schema.field("t").type == pa.timestamp("ns")
    assert got == expected


@pytest.mark.parametrize("primary_key", [["k"], []])
@pytest.mark.parametrize("keep", [[9], []])
def test_a_source_with_blocks_without_rows_equals_the_local_merge(
    tmp_path: Path, ray_cluster: Any, primary_key: list[str], keep: list[int]
) -> None:
    """A filter that keeps no row of a block leaves one without columns, which Ray's
    groupby of a primary-key merge failed on in a reduce task (Arrow's 'No match for
    FieldRef'), as it did for a source without any row."""
    source = pa.table({"k": [1, 9], "n": [5, 5], "s": ["x", "y"]}, schema=SCHEMA)
    tables = _twin_tables(tmp_path, primary_key)
    kept = source.filter(pc.is_in(source["k"], pa.array(keep, pa.int64())))
    local = _upsert(tables[0].merge(kept, on="k"))
    ds = ray.data.from_arrow([source.slice(0, 1), source.slice(1)])
    ds = ds.filter(lambda row: row["k"] in keep)
    distributed = _upsert(raylake.merge_lake(ds, tables[1].uri, on="k"))
    assert (distributed.inserted, distributed.updated) == (local.inserted, local.updated)
    assert distributed.inserted == len(keep)
    assert [len(t.snapshots()) for t in tables] == [1 + len(keep)] * 2
    assert tables[1].to_arrow().sort_by("k") == tables[0].to_arrow().sort_by("k")


@pytest.mark.parametrize("primary_key", [["id"], []])
def test_a_schema_change_while_planning_keeps_the_new_column(
    tmp_path: Path, ray_cluster: Any, monkeypatch: pytest.MonkeyPatch, primary_key: list[str]
) -> None:
    """Another writer adds a column and writes rows with it after the merge planned: the
    merge runs again under the new schema (its tasks read and rewrote the rows without
    it, and the column's values were lost)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int64())])
    tbl = raylake.create_table(
        str(tmp_path / "t"), schema, primary_key=primary_key, buckets=2 if primary_key else None
    )
    tbl.write(pa.table({"id": [1, 2], "n": [1, 2]}, schema=schema))
    meanwhile = change_schema_meanwhile(monkeypatch, LakeMerger, tbl.uri)
    ds = ray.data.from_arrow(pa.table({"id": [1], "n": [1]}))
    merger = raylake.merge_lake(ds, tbl.uri, on="id").when_matched_update({"n": "t.n + s.n"})
    result = merger.execute()
    assert meanwhile and result.attempts == 2
    assert rows_after_change(tbl.uri) == expected_after_change(primary_key)


def test_an_append_merge_whose_task_fails_leaves_no_file_of_its_other_tasks(
    tmp_path: Path, ray_cluster: Any
) -> None:
    """The first task fails (key 1 matched twice) while the second has yet to run (an
    actor holds the other CPU): the driver raised at the first failure and deleted the
    merge's files then, and the second task's file, written after that, stayed."""
    schema = pa.schema([("id", pa.int64()), ("n", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"id": [0, 1], "n": [0, 0]}, schema=schema))
    tbl.write(pa.table({"id": [10, 20], "n": [0, 0]}, schema=schema))
    before = {rel for rel, _ in tbl.file_io.list_files("data")}
    source = ray.data.from_arrow(pa.table({"id": [1, 1, 20], "n": [1, 2, 3]}))

    class Hold:  # defined here: Ray's workers cannot import this test module
        def ready(self) -> bool:
            return True

    hold = ray.remote(num_cpus=ray.cluster_resources()["CPU"] - 1)(Hold).remote()
    try:
        ray.get(hold.ready.remote())  # one CPU left: the merge's tasks run one by one
        with pytest.raises(MergeCardinalityError):
            raylake.merge_lake(source, tbl.uri, on="id").when_matched_update().execute()
    finally:
        ray.kill(hold)
    assert leftovers(None) is None  # every task the merge started has ended
    assert {rel for rel, _ in tbl.file_io.list_files("data")} == before
    assert len(tbl.snapshots()) == 2


@pytest.mark.parametrize("primary_key", [["k"], []])
def test_blocks_of_other_column_types_equal_the_local_merge(
    tmp_path: Path, ray_cluster: Any, primary_key: list[str]
) -> None:
    """Ray's blocks may hold a column in different types (int32 and large_string in one,
    int64 and string in another), each of which casts to the target's: an append-table
    merge joined the blocks before casting them and failed with Arrow's ArrowTypeError."""
    first = pa.table(
        {
            "k": pa.array([1, 5], pa.int32()),
            "n": pa.array([1, 1], pa.int32()),
            "s": pa.array(["a", "b"], pa.large_string()),
        }
    )
    second = pa.table({"k": [2, 6], "n": [2, 2], "s": ["c", "d"]})
    tables = _twin_tables(tmp_path, primary_key)
    rows = pa.concat_tables([first.cast(second.schema), second])
    local = _upsert(tables[0].merge(rows, on="k"))
    distributed = _upsert(
        raylake.merge_lake(ray.data.from_arrow([first, second]), tables[1].uri, on="k")
    )
    assert (distributed.inserted, distributed.updated) == (local.inserted, local.updated) == (2, 2)
    assert tables[1].to_arrow().sort_by("k") == tables[0].to_arrow().sort_by("k")


def test_a_source_key_that_does_not_fit_raises_the_local_merges_error(
    tmp_path: Path, ray_cluster: Any
) -> None:
    """An int64 key beyond an int32 key column: hashing it to its bucket failed in Ray's
    map of the source, raised as Ray's UserCodeException, not as SchemaMismatchError."""
    schema = pa.schema([pa.field("k", pa.int32(), nullable=False), ("n", pa.int64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["k"], buckets=2)
    tbl.write(pa.table({"k": [1, 2], "n": [0, 0]}, schema=schema))
    source = pa.table({"k": [1, 2**40], "n": [1, 1]})
    with pytest.raises(SchemaMismatchError) as local:
        _upsert(tbl.merge(source, on="k"))
    with pytest.raises(SchemaMismatchError) as distributed:
        _upsert(raylake.merge_lake(ray.data.from_arrow(source), tbl.uri, on="k"))
    assert str(local.value) in str(distributed.value)
    assert len(tbl.snapshots()) == 1
