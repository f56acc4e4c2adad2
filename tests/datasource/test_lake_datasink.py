"""LakeDatasink on a real local Ray cluster: one atomic snapshot per job, nothing left on failure."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_depth import examples

ray = pytest.importorskip("ray")
from lake_ray_util import (  # noqa: E402
    DAYS,
    EVENTS_SCHEMA,
    ds_to_arrow,
    events_batch,
    fail_on_block_with,
    make_events,
    rows,
)
from ray.data.datasource.datasink import WriteResult  # noqa: E402

import raylake  # noqa: E402
from raylake import LakeDatasink, LakeDatasource, read_lake, write_lake  # noqa: E402
from raylake.errors import (  # noqa: E402
    InvalidOptionError,
    NullConstraintError,
    SchemaError,
    SchemaMismatchError,
    TableLocationError,
    TableNotFoundError,
    UnsupportedOperationError,
)
from raylake.format.manifest import live_files, read_entries  # noqa: E402
from raylake.format.snapshot import SnapshotManager  # noqa: E402
from raylake.table import table_exists  # noqa: E402

pytestmark = pytest.mark.ray

# One row group per 100 rows and a new file after every row group: a task writes
# several files, so failures leave something to clean up.
TINY_FILES = {"write.row-group-rows": 100, "write.target-file-size": 1}


def data_files_on_disk(tbl: raylake.Table) -> set[str]:
    return {rel for rel, _ in tbl.file_io.list_files("data")}


def live_data_files(tbl: raylake.Table) -> set[str]:
    snap = tbl.latest_snapshot()
    if snap is None:
        return set()
    live = live_files(read_entries(tbl.file_io, snap.base_manifests, tbl.table_schema))
    return set(live.column("path").to_pylist())


def from_batches(tables: list[pa.Table]) -> Any:
    """A dataset with one block per table, in this order."""
    return ray.data.from_arrow(tables)


# -- appends and overwrites -------------------------------------------------------------


def test_write_creates_the_table_from_the_dataset_schema(ray_cluster: Any, tmp_path: Path) -> None:
    batches = [events_batch(i * 300, 300, "2024-01-01", seed=i) for i in range(4)]
    snap = write_lake(from_batches(batches), str(tmp_path / "t"), partition_by=["dt"])
    tbl = raylake.open_table(str(tmp_path / "t"))
    assert snap is not None and [s.id for s in tbl.snapshots()] == [snap.id]
    assert tbl.schema == EVENTS_SCHEMA
    assert tbl.table_schema.partition_keys == ("dt",)
    assert rows(tbl.to_arrow()) == rows(pa.concat_tables(batches))


def test_new_table_takes_the_schema_after_a_map(ray_cluster: Any, tmp_path: Path) -> None:
    """Ray gives the sink the first block's schema before a fused map_batches."""
    source = make_events(tmp_path / "source", rows_per_day=100)

    def add_score(batch: pa.Table) -> pa.Table:
        return batch.append_column("score", pa.array(np.ones(batch.num_rows)))

    ds = read_lake(source.uri, columns=["id", "x"]).map_batches(add_score, batch_format="pyarrow")
    snap = write_lake(ds, str(tmp_path / "scores"))
    target = raylake.open_table(str(tmp_path / "scores"))
    assert snap is not None and target.schema.names == ["id", "x", "score"]
    assert target.count() == source.count()


def test_append_and_overwrite_commit_one_snapshot_each(ray_cluster: Any, tmp_path: Path) -> None:
    tbl = make_events(tmp_path / "t", rows_per_day=200)
    before = tbl.to_arrow()
    extra = [events_batch(10_000 + i * 50, 50, "2024-01-09", seed=i) for i in range(3)]
    snap = write_lake(from_batches(extra), tbl.uri)
    assert snap is not None and snap.commit_kind == "APPEND" and snap.id == 4
    assert rows(tbl.to_arrow()) == rows(pa.concat_tables([before, *extra]))

    snap = write_lake(from_batches(extra[:1]), tbl.uri, mode="overwrite")
    assert snap is not None and snap.commit_kind == "OVERWRITE"
    assert rows(tbl.to_arrow()) == rows(extra[0])
    assert rows(tbl.to_arrow(snapshot_id=4)) == rows(pa.concat_tables([before, *extra]))


def test_a_dynamic_overwrite_replaces_only_the_days_written(
    ray_cluster: Any, tmp_path: Path
) -> None:
    tbl = make_events(tmp_path / "t", rows_per_day=100)
    before = tbl.to_arrow()
    new_day, other_day = events_batch(5_000, 30, DAYS[0], seed=7), events_batch(6_000, 5, "d9", 8)
    snap = write_lake(
        from_batches([new_day, other_day]),
        tbl.uri,
        mode="overwrite",
        partition_overwrite_mode="dynamic",
    )
    assert snap is not None and snap.commit_kind == "OVERWRITE"
    kept = before.filter(pc.not_equal(before.column("dt"), DAYS[0]))
    assert rows(tbl.to_arrow()) == rows(pa.concat_tables([kept, new_day, other_day]))
    # No rows: no partition is replaced, and nothing is committed.
    assert write_lake(from_batches([new_day.slice(0, 0)]), tbl.uri, mode="overwrite",
                      partition_overwrite_mode="dynamic") is None  # fmt: skip
    assert tbl.latest_snapshot() == snap
    with pytest.raises(UnsupportedOperationError, match="only to mode='overwrite'"):
        LakeDatasink(tbl.uri, partition_overwrite_mode="dynamic")


def test_datasink_object_with_write_datasink(ray_cluster: Any, tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), EVENTS_SCHEMA)
    sink = LakeDatasink(tbl.uri, mode="append", commit_properties={"job": "nightly"})
    from_batches([events_batch(0, 100, "d", 0)]).write_datasink(sink)
    assert sink.snapshot is not None and sink.snapshot.properties == {"job": "nightly"}
    assert tbl.count() == 100


def test_round_trip_read_map_write(ray_cluster: Any, tmp_path: Path) -> None:
    source = make_events(tmp_path / "source", rows_per_day=500)

    def double(batch: pa.Table) -> pa.Table:
        x = batch.column("x").to_numpy() * 2
        return batch.set_column(batch.schema.get_field_index("x"), "x", pa.array(x))

    ds = read_lake(source.uri, filter="label != 0").map_batches(double, batch_format="pyarrow")
    snap = write_lake(ds, str(tmp_path / "target"), partition_by=["dt"])
    target = raylake.open_table(str(tmp_path / "target"))
    expected = source.to_arrow(filter="label != 0")
    expected = expected.set_column(2, "x", pa.array(expected.column("x").to_numpy() * 2))
    assert snap is not None and target.latest_snapshot() == snap
    assert rows(target.to_arrow()) == rows(expected)
    assert source.latest_snapshot() is not None and source.latest_snapshot().id == 3


def test_empty_dataset(ray_cluster: Any, tmp_path: Path) -> None:
    tbl = make_events(tmp_path / "t", rows_per_day=10)
    empty = read_lake(tbl.uri, filter="id < 0")
    assert write_lake(empty, tbl.uri) is None
    assert len(tbl.snapshots()) == 3
    snap = write_lake(empty, tbl.uri, mode="overwrite")
    assert snap is not None and tbl.count() == 0


def test_a_dataset_without_blocks_creates_the_table_from_its_known_schema(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """limit(0) brings the write no block, so on_write_start never ran: the table was not
    created ("no schema is known"), though Ray knew the dataset's schema."""
    empty = ray.data.from_arrow(events_batch(0, 5, "d", seed=0)).limit(0)
    assert write_lake(empty, str(tmp_path / "t"), partition_by=["dt"]) is None
    tbl = raylake.open_table(str(tmp_path / "t"))
    assert tbl.schema == EVENTS_SCHEMA and tbl.table_schema.partition_keys == ("dt",)
    snap = write_lake(empty, str(tmp_path / "o"), mode="overwrite")
    assert snap is not None and raylake.open_table(str(tmp_path / "o")).count() == 0


def test_blocks_a_filter_emptied_are_skipped(ray_cluster: Any, tmp_path: Path) -> None:
    """A filter that keeps no row of a block leaves Ray a block without rows and without
    columns; the write skips it rather than checking its (empty) schema."""
    tbl = raylake.create_table(str(tmp_path / "t"), EVENTS_SCHEMA)
    tbl.write(events_batch(0, 10, "d", seed=0))
    source = from_batches([events_batch(100 + i * 50, 50, "d", seed=i) for i in range(3)])
    snap = write_lake(source.filter(lambda r: r["id"] >= 240), tbl.uri)  # 2 blocks emptied
    assert snap is not None and tbl.count() == 20

    nothing = source.filter(lambda r: r["id"] < 0)
    assert write_lake(nothing, tbl.uri) is None
    mapped = nothing.map_batches(lambda b: b, batch_format="pyarrow")
    assert write_lake(mapped, tbl.uri) is None
    assert len(tbl.snapshots()) == 2 and tbl.count() == 20
    snap = write_lake(mapped, tbl.uri, mode="overwrite")
    assert snap is not None and snap.commit_kind == "OVERWRITE" and tbl.count() == 0


def test_a_sink_used_again_starts_each_job_afresh(ray_cluster: Any, tmp_path: Path) -> None:
    """Ray calls on_write_start only when a first bundle arrives: a sink's next job
    without any (limit(0)) went on from the last job's base snapshot, so its overwrite
    conflicted with that job's own commit, and its snapshot stayed the last job's."""
    tbl = make_events(tmp_path / "t", rows_per_day=10)
    sink = LakeDatasink(tbl.uri, mode="overwrite")
    read_lake(tbl.uri).write_datasink(sink)
    first = sink.snapshot
    assert first is not None and tbl.count() == 30
    read_lake(tbl.uri).limit(0).write_datasink(sink)
    assert sink.snapshot is not None and sink.snapshot.id == first.id + 1
    assert tbl.count() == 0

    appends = LakeDatasink(tbl.uri)
    ray.data.from_arrow(events_batch(0, 5, "d", seed=0)).write_datasink(appends)
    assert appends.snapshot is not None
    ray.data.from_arrow(events_batch(5, 5, "d", seed=1)).limit(0).write_datasink(appends)
    assert appends.snapshot is None and tbl.count() == 5


# -- failures leave nothing behind ------------------------------------------------------


def test_failed_task_leaves_table_and_files_unchanged(
    ray_cluster: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), EVENTS_SCHEMA, options=TINY_FILES)
    tbl.write(events_batch(0, 250, "d", seed=0))
    before, files_before = tbl.to_arrow(), data_files_on_disk(tbl)

    ds = ray.data.from_arrow([events_batch(1_000 + i * 400, 400, "d", i) for i in range(6)])
    ds = ds.map_batches(
        fail_on_block_with,
        batch_format="pyarrow",
        batch_size=200,
        fn_kwargs={"data_dir": str(tmp_path / "t" / "data"), "last_id": 1_000 + 6 * 400 - 1},
    )
    with (
        caplog.at_level(logging.WARNING, "raylake.datasource.datasink"),
        pytest.raises(Exception, match="injected failure at id 3399"),
    ):
        write_lake(ds, tbl.uri)

    # Tasks that had succeeded wrote files that the failed job then found and deleted.
    (cleanup,) = [r.getMessage() for r in caplog.records if "deleted" in r.getMessage()]
    assert int(re.search(r"deleted (\d+) file", cleanup).group(1)) > 0  # type: ignore[union-attr]

    assert [s.id for s in tbl.snapshots()] == [1]
    assert rows(tbl.to_arrow()) == rows(before)
    assert data_files_on_disk(tbl) == files_before == live_data_files(tbl)


def test_bad_rows_in_one_task_leave_nothing_behind(ray_cluster: Any, tmp_path: Path) -> None:
    """The writer itself rejects a block (nulls in a non-nullable column) mid-job."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64(), nullable=False)])
    tbl = raylake.create_table(str(tmp_path / "t"), schema, options=TINY_FILES)
    good = [
        pa.table({"id": np.arange(i * 300, (i + 1) * 300), "v": np.ones(300, dtype=np.int64)})
        for i in range(5)
    ]
    bad = pa.table({"id": [9_999, 10_000], "v": pa.array([1, None], pa.int64())})
    with pytest.raises(NullConstraintError, match="'v'"):
        write_lake(from_batches([*good, bad]), tbl.uri)
    assert tbl.snapshots() == []
    assert data_files_on_disk(tbl) == set()


def test_schema_mismatch_fails_before_writing(ray_cluster: Any, tmp_path: Path) -> None:
    tbl = make_events(tmp_path / "t", rows_per_day=10)
    wrong = from_batches([pa.table({"id": [1], "dt": ["d"], "x": ["not a float"]})])
    with pytest.raises(SchemaMismatchError, match="missing column"):
        write_lake(wrong, tbl.uri)
    renamed = events_batch(0, 5, "d", 0).rename_columns(["id", "dt", "x", "label", "TAG"])
    with pytest.raises(SchemaMismatchError, match=r"missing column\(s\) \['tag'\]"):
        write_lake(from_batches([renamed]), tbl.uri)
    assert len(tbl.snapshots()) == 3
    assert data_files_on_disk(tbl) == live_data_files(tbl)


def test_a_known_dataset_schema_is_checked_before_execution(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """The error comes from the driver before Ray runs anything: a plain raylake error,
    not one re-raised from Ray's executor or a write task; the message shows both sides."""
    tbl = make_events(tmp_path / "t", rows_per_day=10)
    before = tbl.latest_snapshot()
    lacking = events_batch(0, 5, "d", 0).drop_columns(["tag"])
    with pytest.raises(SchemaMismatchError) as excinfo:
        write_lake(from_batches([lacking]), tbl.uri)
    message = str(excinfo.value)
    assert "missing column(s) ['tag']" in message
    assert "the data has columns ['id', 'dt', 'x', 'label']" in message
    assert "the table has columns ['id', 'dt', 'x', 'label', 'tag']" in message
    assert type(excinfo.value) is SchemaMismatchError and excinfo.value.__cause__ is None
    batch = events_batch(0, 5, "d", 0)
    wrong_type = batch.set_column(2, "x", pa.array(["not a float"] * 5))
    with pytest.raises(SchemaMismatchError, match="'x' has type string") as excinfo:
        write_lake(from_batches([wrong_type]), tbl.uri)
    assert type(excinfo.value) is SchemaMismatchError and excinfo.value.__cause__ is None
    assert excinfo.value.column == "x"
    assert tbl.latest_snapshot() == before
    assert data_files_on_disk(tbl) == live_data_files(tbl)


def test_a_schema_known_only_at_run_time_fails_before_any_write_task(
    ray_cluster: Any, tmp_path: Path
) -> None:
    tbl = make_events(tmp_path / "t", rows_per_day=10)
    before = tbl.latest_snapshot()
    batch = events_batch(0, 5, "d", 0)
    wrong_type = batch.set_column(2, "x", pa.array(["not a float"] * 5))
    ds = from_batches([wrong_type]).map_batches(lambda b: b, batch_format="pyarrow")
    assert ds.schema(fetch_if_missing=False) is None
    with pytest.raises(SchemaMismatchError, match="'x' has type string") as excinfo:
        ds.write_datasink(LakeDatasink(tbl.uri))
    # Raised by on_write_start on the driver, not by a write task (a RayTaskError).
    assert not isinstance(excinfo.value, ray.exceptions.RayTaskError)
    assert tbl.latest_snapshot() == before
    assert data_files_on_disk(tbl) == live_data_files(tbl)


def test_a_map_before_the_write_is_checked_by_its_output(ray_cluster: Any, tmp_path: Path) -> None:
    """Ray fuses map_batches with a write and then reports the map's input schema: the
    sink must see (and create tables from) the columns the map returns."""
    tbl = make_events(tmp_path / "t", rows_per_day=10)
    batch = events_batch(100, 5, "d", 0)

    def dataset() -> Any:
        lacking = from_batches([batch.drop_columns(["tag"])])
        return lacking.map_batches(
            lambda b: b.append_column("tag", pa.array(["t"] * b.num_rows)),
            batch_format="pyarrow",
        )

    write_lake(dataset(), tbl.uri)
    assert tbl.count() == 35
    dataset().write_datasink(LakeDatasink(str(tmp_path / "new")))
    assert raylake.open_table(str(tmp_path / "new")).schema == EVENTS_SCHEMA


def test_missing_table_without_creation(ray_cluster: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "missing")
    with pytest.raises(TableNotFoundError):
        write_lake(from_batches([events_batch(0, 5, "d", 0)]), uri, create_if_missing=False)
    # An empty dataset that yields no block and whose schema Ray does not know before
    # running it (a map), so no schema reaches the sink.
    source = LakeDatasource(make_events(tmp_path / "t", rows_per_day=5).uri, filter="id < 0")
    empty = ray.data.read_datasource(source).map_batches(lambda b: b).limit(0)
    with pytest.raises(SchemaError, match="pass schema="):
        write_lake(empty, uri)
    assert not table_exists(uri)
    snap = write_lake(empty, uri, schema=EVENTS_SCHEMA, mode="overwrite")
    assert snap is not None and raylake.open_table(uri).schema == EVENTS_SCHEMA


def test_created_table_is_removed_when_the_first_job_fails(
    ray_cluster: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "new")
    bad = pa.table({"id": [1], "x": [1.5]})
    with pytest.raises(SchemaMismatchError, match="'x'"):
        write_lake(from_batches([bad]), uri, schema=pa.schema([("id", pa.int64())]))
    with pytest.raises(TableNotFoundError):
        raylake.open_table(uri)
    with pytest.raises(UnsupportedOperationError, match="'upsert'"):
        write_lake(from_batches([bad]), uri, mode="upsert")
    assert not table_exists(uri)
    assert not (tmp_path / "new").exists()


def test_a_failed_job_that_created_the_table_can_be_run_again(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Nothing is left of a table the failed job created, not even empty directories,
    which would make the location refuse the corrected job as already holding data."""
    uri = str(tmp_path / "new")
    batches = [events_batch(i * 400, 400, "d", i) for i in range(4)]
    failing = from_batches(batches).map_batches(
        fail_on_block_with,
        batch_format="pyarrow",
        batch_size=200,
        fn_kwargs={"data_dir": f"{uri}/data", "last_id": 4 * 400 - 1},
    )
    with pytest.raises(Exception, match="injected failure"):
        write_lake(failing, uri, options=TINY_FILES)
    assert not (tmp_path / "new").exists()
    snap = write_lake(from_batches(batches), uri, options=TINY_FILES)
    assert snap is not None and raylake.open_table(uri).count() == 1_600

    # Values only the rows show do not fit the new table's type: checked in the tasks.
    uri = str(tmp_path / "narrow")
    narrow = pa.schema([("id", pa.int32())])
    too_big = from_batches([pa.table({"id": pa.array([2**40], pa.int64())})])
    with pytest.raises(SchemaMismatchError, match="'id'"):
        write_lake(too_big, uri, schema=narrow)
    assert not (tmp_path / "narrow").exists()
    raylake.create_table(uri, narrow)


def test_a_failed_creator_keeps_the_table_another_job_writes_into(tmp_path: Path) -> None:
    """Two jobs create the same new table; the creator fails while the other job's task
    holds its rows unflushed (was: the creator dropped the table, the other job's commit
    found no table, and the empty directories it left refused every later write)."""
    uri = str(tmp_path / "new")
    schema = pa.schema([("id", pa.int64())])
    creator, other = LakeDatasink(uri), LakeDatasink(uri)
    creator.on_write_start(schema)
    other.on_write_start(schema)  # finds the table the creator made, with no snapshot
    creator.on_write_failed(RuntimeError("the creator's map failed"))
    done = other.write([pa.table({"id": [1, 2]})], SimpleNamespace(task_idx=0))  # type: ignore[arg-type]
    other.on_write_complete(WriteResult(num_rows=2, size_bytes=0, write_returns=[done]))
    assert raylake.open_table(uri).to_arrow().column("id").to_pylist() == [1, 2]
    files = [p.name for p in (tmp_path / "new" / "data").rglob("*") if p.is_file()]
    assert len(files) == 1 and files[0].endswith(".parquet")  # the marker is gone


def test_directories_a_dropped_table_left_do_not_refuse_a_new_one(tmp_path: Path) -> None:
    """A table dropped under a job writing into it leaves that job's empty directories."""
    (tmp_path / "t" / "data" / "bucket-0").mkdir(parents=True)
    (tmp_path / "t" / "manifest").mkdir()
    raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    (tmp_path / "u" / "data" / "bucket-0").mkdir(parents=True)
    (tmp_path / "u" / "data" / "bucket-0" / "mine.parquet").write_bytes(b"")
    with pytest.raises(TableLocationError, match="already holds data"):
        raylake.create_table(str(tmp_path / "u"), pa.schema([("id", pa.int64())]))
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "data").symlink_to(tmp_path / "nowhere")  # not a directory
    with pytest.raises(TableLocationError, match="already holds data"):
        raylake.create_table(str(tmp_path / "v"), pa.schema([("id", pa.int64())]))


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"partition_by": ["nope"]}, SchemaError, r"partition column\(s\) \['nope'\]"),
        ({"primary_key": ["nope"]}, SchemaError, r"primary key column\(s\) \['nope'\]"),
        ({"mode": "upsert"}, UnsupportedOperationError, "'upsert' is not supported"),
        ({"mode": "append", "primary_key": ["id"]}, UnsupportedOperationError, "'append'"),
    ],
)
def test_bad_arguments_for_a_new_table_are_refused_before_execution(
    ray_cluster: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    arguments: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    def executed(self: Any, schema: Any = None) -> None:
        raise AssertionError("Ray started executing the dataset")

    monkeypatch.setattr(LakeDatasink, "on_write_start", executed)
    with pytest.raises(error, match=match):
        write_lake(from_batches([events_batch(0, 5, "d", 0)]), str(tmp_path / "new"), **arguments)
    assert not (tmp_path / "new").exists()


def test_a_directory_holding_other_files_is_refused_before_execution(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table is created when the first block reaches the write: a dataset whose schema
    Ray knows only by running it (after a map) ran its first tasks before the directory's
    other files refused the table."""

    def executed(self: Any, schema: Any = None) -> None:
        raise AssertionError("Ray started executing the dataset")

    monkeypatch.setattr(LakeDatasink, "on_write_start", executed)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.csv").write_text("a\n1\n")
    mapped = from_batches([events_batch(0, 5, "d", 0)]).map_batches(lambda b: b)
    with pytest.raises(TableLocationError, match=r"holds notes\.csv.*create_table\(\.\.\., allow"):
        write_lake(mapped, str(tmp_path / "other"))
    with pytest.raises(TableLocationError, match=r"holds notes\.csv"):
        LakeDatasink(str(tmp_path / "other"))
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == ["notes.csv"]


@pytest.mark.parametrize(
    "layout",
    [
        {"primary_key": ["id"]},
        {"partition_by": ["tag"]},
        {"options": {"merge-engine": "first-row"}},
    ],
    ids=["primary_key", "partition_by", "options"],
)
def test_an_existing_table_of_another_layout_is_refused_before_execution(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: dict[str, Any]
) -> None:
    """The layout asked for was compared with the table's only when the first block
    reached the write, after the dataset's first tasks (a map) had run."""
    tbl = make_events(tmp_path / "t", rows_per_day=5)

    def executed(self: Any, schema: Any = None) -> None:
        raise AssertionError("Ray started executing the dataset")

    monkeypatch.setattr(LakeDatasink, "on_write_start", executed)
    mapped = from_batches([events_batch(0, 5, "d", 0)]).map_batches(lambda b: b)
    with pytest.raises(SchemaError, match="a table of another layout exists"):
        write_lake(mapped, tbl.uri, **layout)
    assert len(tbl.snapshots()) == 3


def test_a_schema_without_the_layouts_columns_is_refused_by_the_sink(tmp_path: Path) -> None:
    """For ds.write_datasink, which runs no check_schema: the sink was made, and the
    refusal came once Ray had run the dataset up to its first block."""
    uri = str(tmp_path / "new")
    with pytest.raises(SchemaError, match=r"primary key column\(s\) \['key'\]"):
        LakeDatasink(uri, schema=EVENTS_SCHEMA, primary_key=["key"])
    with pytest.raises(SchemaError, match=r"partition column\(s\) \['day'\]"):
        LakeDatasink(uri, schema=EVENTS_SCHEMA, partition_by=["day"])
    assert not (tmp_path / "new").exists()


def test_a_schema_that_does_not_fit_the_existing_table_is_refused_by_the_sink(
    tmp_path: Path,
) -> None:
    """schema= was ignored where the table exists: the data was then checked against
    the table only once Ray ran the dataset (or never, for an empty one)."""
    tbl = make_events(tmp_path / "t", rows_per_day=5)
    other = pa.schema([(f.name, pa.string()) for f in EVENTS_SCHEMA])
    with pytest.raises(SchemaMismatchError, match="column"):
        LakeDatasink(tbl.uri, schema=other)
    before = len(tbl.snapshots())
    LakeDatasink(tbl.uri, schema=EVENTS_SCHEMA)  # the table's own: taken
    assert len(tbl.snapshots()) == before


def test_bad_modes(ray_cluster: Any, tmp_path: Path) -> None:
    tbl = make_events(tmp_path / "t", rows_per_day=5)
    with pytest.raises(InvalidOptionError, match="mode"):
        LakeDatasink(tbl.uri, mode="merge")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedOperationError, match="'upsert' is not supported"):
        LakeDatasink(tbl.uri, mode="upsert")


# -- a model of the table under random jobs ---------------------------------------------

_jobs = st.lists(
    st.tuples(
        st.sampled_from(["append", "overwrite", "fail"]),
        st.lists(st.integers(1, 120), min_size=1, max_size=4),  # block sizes
    ),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=examples(8),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(jobs=_jobs)
def test_jobs_against_a_model(ray_cluster: Any, tmp_path_factory: Any, jobs: Any) -> None:
    """Random append/overwrite/failing jobs: the table always equals the model's last state."""
    root = tmp_path_factory.mktemp("model") / "t"
    tbl = raylake.create_table(str(root), EVENTS_SCHEMA, options=TINY_FILES)
    model: list[dict[str, Any]] = []
    next_id = 0
    for mode, sizes in jobs:
        blocks = []
        for size in sizes:
            blocks.append(events_batch(next_id, size, "d", seed=next_id))
            next_id += size
        new_rows = rows(pa.concat_tables(blocks))
        if mode == "fail":
            bad = pa.table({"id": [next_id], "x": ["oops"]})
            with pytest.raises(SchemaMismatchError):
                write_lake(from_batches([*blocks, bad]), tbl.uri)
        else:
            write_lake(from_batches(blocks), tbl.uri, mode=mode)  # type: ignore[arg-type]
            model = (
                new_rows if mode == "overwrite" else sorted(model + new_rows, key=lambda r: r["id"])
            )
        assert rows(tbl.to_arrow()) == model
        assert rows(ds_to_arrow(read_lake(tbl.uri))) == model
        assert data_files_on_disk(tbl) == live_data_files(tbl) | _replaced_files(tbl)


def _replaced_files(tbl: raylake.Table) -> set[str]:
    """Files of earlier snapshots that an overwrite replaced (kept for time travel)."""
    out: set[str] = set()
    for snap in tbl.snapshots():
        live = live_files(read_entries(tbl.file_io, snap.base_manifests, tbl.table_schema))
        out |= set(live.column("path").to_pylist())
    return out


def test_failure_reported_after_the_commit_keeps_the_committed_files(
    ray_cluster: Any, tmp_path: Path
) -> None:
    # Ray calls on_write_failed for errors raised after on_write_complete committed
    # (review finding): deleting the job's files then would break the new snapshot.
    tbl = raylake.create_table(str(tmp_path / "t"), EVENTS_SCHEMA)
    sink = LakeDatasink(tbl.uri, mode="append")
    from_batches([events_batch(0, 100, "d", 0)]).write_datasink(sink)
    assert sink.snapshot is not None
    sink.on_write_failed(RuntimeError("reported after the commit"))
    assert tbl.count() == 100
    assert rows(tbl.to_arrow()) == rows(events_batch(0, 100, "d", 0))


def test_failure_reported_after_the_commit_was_expired_keeps_the_committed_files(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink's snapshot expired (its files live on in the next one): the failure
    handler deleted them, and one expired while it looked raised SnapshotNotFoundError."""
    tbl = raylake.create_table(str(tmp_path / "t"), EVENTS_SCHEMA)
    tbl.write(events_batch(0, 10, "d", 0))
    sink = LakeDatasink(tbl.uri, mode="append")
    from_batches([events_batch(10, 20, "d", 0)]).write_datasink(sink)
    tbl.write(events_batch(20, 30, "d", 0))
    expected = rows(tbl.to_arrow())
    earliest = SnapshotManager.earliest_id

    def expiring(self: SnapshotManager) -> int | None:
        found = earliest(self)
        tbl.expire_snapshots(retain_last=1)  # between listing and reading
        return found

    monkeypatch.setattr(SnapshotManager, "earliest_id", expiring)
    sink.on_write_failed(RuntimeError("reported after the commit"))
    monkeypatch.undo()
    tbl.expire_snapshots(retain_last=1)
    sink.on_write_failed(RuntimeError("reported again"))
    assert [s.id for s in tbl.snapshots()] == [3]
    assert rows(tbl.refresh().to_arrow()) == expected


def test_system_columns_never_become_table_columns(ray_cluster: Any, tmp_path: Path) -> None:
    """Both sinks open or create the same way: a new table drops ``_rl_`` columns, and an
    append table then refuses data carrying one, naming it (docs/decisions.md)."""
    uri = str(tmp_path / "new")
    data = pa.table({"id": [1, 2], "_rl_kind": ["+I", "+I"]})
    with pytest.raises(SchemaMismatchError, match="_rl_kind"):
        write_lake(from_batches([data]), uri)
    assert not table_exists(uri)
    snap = write_lake(from_batches([data]), uri, primary_key=["id"], buckets=1)
    assert snap is not None and raylake.open_table(uri).schema.names == ["id"]
