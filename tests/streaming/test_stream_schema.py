"""Streams and streaming jobs across schema changes (issue 18)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import SchemaEvolutionError
from raylake.streaming import ROW_KIND
from raylake.streaming.job import JobSpec, ShardWorker
from raylake.streaming.job_check import check_job
from raylake.streaming.options import JOB_DEFAULTS

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int32())])


def rows_of(plan: object) -> list[dict]:
    return sorted(plan.to_arrow().to_pylist(), key=lambda r: r["id"])  # type: ignore[attr-defined]


def evolve(tbl: raylake.Table) -> None:
    with tbl.update_schema() as u:
        u.rename_column("v", "v2")
        u.update_column("v2", pa.int64())
        u.add_column("w", pa.string())


@pytest.mark.parametrize("kind", ["append", "pk", "pk-changelog"])
def test_plans_after_a_change_carry_the_new_schema(warehouse: Path, kind: str) -> None:
    options = {"changelog-producer": "input"} if kind == "pk-changelog" else {}
    tbl = raylake.create_table(
        str(warehouse / "t"), SCHEMA, primary_key=["id"] if kind != "append" else [],
        options=options,
    )  # fmt: skip
    tbl.write(pa.table({"id": [1, 2], "v": [1, 2]}, schema=SCHEMA))
    reader = raylake.open_table(tbl.uri).stream(start="earliest", consumer_id="c")
    first = reader.poll()
    assert first is not None and first.schema.names == ["id", "v"] and len(rows_of(first)) == 2
    evolve(tbl)
    tbl.write(pa.table({"id": [3], "v2": [30], "w": ["c"]}))
    plan = reader.poll()
    assert plan is not None
    assert plan.schema.names == ["id", "v2", "w"]
    assert rows_of(plan) == [{"id": 3, "v2": 30, "w": "c"}]
    reader.checkpoint()
    # A consumer resumed later plans under the schema of what it reads next.
    tbl.write(pa.table({"id": [4], "v2": [40], "w": ["d"]}))
    resumed = raylake.open_table(tbl.uri).stream(consumer_id="c")
    assert rows_of(resumed.poll()) == [{"id": 4, "v2": 40, "w": "d"}]


def test_a_reader_started_after_a_change_reads_older_snapshots_in_the_new_columns(
    warehouse: Path,
) -> None:
    """A stream's columns only move forward (docs/streaming.md, "Schema changes")."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    evolve(tbl)
    with raylake.open_table(tbl.uri).stream(start="earliest") as reader:
        plans = list(reader.plans(timeout=0))
        assert [rows_of(p) for p in plans] == [[{"id": 1, "v2": 1, "w": None}]]


def test_a_stream_keeps_its_projection_and_filter_by_field_id(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA, primary_key=["id"])
    tbl.write(pa.table({"id": [1, 2], "v": [1, 20]}, schema=SCHEMA))
    reader = tbl.stream(start="earliest", columns=["v"], filter="v > 5", include_row_kind=True)
    assert reader.poll().to_arrow().to_pylist() == [{"v": 20, ROW_KIND: "+I"}]  # type: ignore[union-attr]
    evolve(tbl)
    tbl.write(pa.table({"id": [1, 3], "v2": [10, 3], "w": ["a", "c"]}))
    plan = reader.poll()
    assert plan is not None and plan.schema.names == ["v2", ROW_KIND]
    assert sorted(plan.to_arrow().to_pylist(), key=lambda r: r[ROW_KIND]) == [
        {"v2": 10, ROW_KIND: "+U"}
    ]


def test_a_stream_filtering_a_deleted_column_fails_clearly(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    reader = tbl.stream(start="earliest", filter="v > 0")
    assert reader.poll() is not None
    with tbl.update_schema() as u:
        u.delete_column("v")
    tbl.write(pa.table({"id": [2]}))
    with pytest.raises(SchemaEvolutionError, match="'v'"):
        reader.poll()


def test_snapshots_read_one_by_one_after_a_refused_catch_up_keep_their_schema(
    warehouse: Path,
) -> None:
    """A catch-up over an append table's delete is read snapshot by snapshot: those
    plans were made under the latest schema, which the catch-up had moved to, so a
    column deleted since was missing from the snapshots that had it."""
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    tbl.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    reader = tbl.stream(start="latest-new", catch_up_after=2, prefetch=False)
    tbl.write(pa.table({"id": [2], "v": [2]}, schema=SCHEMA))
    tbl.delete("id = 1")  # copy-on-write: an OVERWRITE, so no catch-up over it
    with tbl.update_schema() as u:
        u.delete_column("v")
    tbl.refresh().write(pa.table({"id": [3]}))
    plans = list(reader.plans(timeout=0))
    assert [(p.snapshot_id, p.kind, p.schema.names) for p in plans] == [
        (2, "delta", ["id", "v"]),
        (3, "refresh", ["id", "v"]),
        (4, "delta", ["id"]),
    ]
    assert rows_of(plans[0]) == [{"id": 2, "v": 2}]


def test_a_job_sink_in_merge_mode_follows_its_source(warehouse: Path) -> None:
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    spec = JobSpec(source.uri, lambda t: t, "job", 1, sink_uri=sink.uri, schema_mode="merge")
    source.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    worker = ShardWorker(spec, 0)
    assert worker.step().plans == 1
    with source.update_schema() as u:
        u.add_column("w", pa.string())
    source.write(pa.table({"id": [2], "v": pa.array([2], pa.int32()), "w": ["b"]}))
    assert worker.step().plans == 1
    assert raylake.open_table(sink.uri).schema.names == ["id", "v", "w"]
    assert sorted(sink.refresh().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1, "w": None},
        {"id": 2, "v": 2, "w": "b"},
    ]
    strict = JobSpec(source.uri, lambda t: t, "job2", 1, sink_uri=str(warehouse / "dst2"))
    raylake.create_table(strict.sink_uri, SCHEMA)  # type: ignore[arg-type]
    with pytest.raises(raylake.errors.SchemaMismatchError):
        ShardWorker(strict, 0).step()


def test_a_shard_restarted_after_a_rename_reads_the_jobs_columns_by_field_id(
    warehouse: Path,
) -> None:
    """A running shard follows a rename; an actor Ray restarts opens the source anew, and
    its reader refused the job's old names with UnknownColumnError at every step."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), pa.schema([("id", pa.int64())]))
    source.write(pa.table({"id": [1, -2], "v": [1, 1]}, schema=SCHEMA))
    stream = JOB_DEFAULTS.replace(columns=["id"], filter="id > 0 and v > 0")
    spec = JobSpec(source.uri, lambda t: t.rename_columns(["id"]), "job", 1, sink_uri=sink.uri,
                   stream=stream)  # fmt: skip
    spec = dataclasses.replace(spec, source_schema_id=check_job(
        spec, output_schema=None, storage_options=None, sink_storage_options=None
    ))  # fmt: skip
    assert ShardWorker(spec, 0).step().plans == 1
    with source.update_schema() as u:
        u.rename_column("id", "key")
        u.rename_column("v", "v2")
    source.refresh().write(pa.table({"key": [3, 4], "v2": [1, 0]}))
    restarted = ShardWorker(spec, 0)  # the actor, restarted by Ray on another node
    assert restarted.step().plans == 1
    assert sorted(sink.to_arrow().column("id").to_pylist()) == [1, 3]


def test_a_shard_restarted_on_a_source_created_again_takes_the_jobs_names_as_they_are(
    warehouse: Path,
) -> None:
    """The new source's schema of the id the job was checked under lacks a column the
    filter names, which its latest schema has: the restarted shard failed with
    UnknownColumnError looking the names up there."""
    import shutil

    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), pa.schema([("id", pa.int64())]))
    source.write(pa.table({"id": [1], "v": [1]}, schema=SCHEMA))
    stream = JOB_DEFAULTS.replace(columns=["id"], filter="v > 0")
    spec = JobSpec(source.uri, lambda t: t, "job", 1, sink_uri=sink.uri, stream=stream)
    spec = dataclasses.replace(spec, source_schema_id=source.table_schema.schema_id)
    assert ShardWorker(spec, 0).step().plans == 1
    shutil.rmtree(warehouse / "src")
    source = raylake.create_table(str(warehouse / "src"), pa.schema([("id", pa.int64())]))
    with source.update_schema() as u:
        u.add_column("v", pa.int32())
    source.refresh().write(pa.table({"id": [5, 6], "v": [3, 0]}, schema=SCHEMA))
    assert ShardWorker(spec, 0).step().plans == 1
    assert sorted(sink.to_arrow().column("id").to_pylist()) == [1, 5]


def test_a_failed_merge_mode_step_adds_no_column_to_the_sink(warehouse: Path) -> None:
    """The new columns are committed with the step's data: a step refused on the way
    (here its second output, whose 'v' cannot fit) leaves the sink's schema as it was,
    and the step after the fix commits columns and rows together."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    bad = [True]

    def fn(t: pa.Table) -> pa.Table:
        if t["id"][0].as_py() == 1:
            return t.append_column("w", pa.array(["x"] * t.num_rows))
        v = pa.array(["bad"] * t.num_rows) if bad else t["v"]
        return pa.table({"id": t["id"], "v": v})

    spec = JobSpec(source.uri, fn, "job", 1, sink_uri=sink.uri, schema_mode="merge")
    for i in (1, 2):
        source.write(pa.table({"id": [i], "v": pa.array([i], pa.int32())}))
    worker = ShardWorker(spec, 0)
    with pytest.raises(raylake.errors.SchemaMismatchError, match="'v'"):
        worker.step()
    after = raylake.open_table(sink.uri)
    assert after.schema.names == ["id", "v"] and after.latest_snapshot() is None
    assert not list((warehouse / "dst" / "data").rglob("*.parquet"))
    bad.clear()
    assert worker.step().plans == 2
    assert sink.refresh().schema.names == ["id", "v", "w"]
    assert sorted(sink.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1, "w": "x"},
        {"id": 2, "v": 2, "w": None},
    ]


def test_a_merge_mode_shard_that_loses_the_schema_race_writes_again(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another shard adds a different column between this shard's planning and its
    commit: this one writes its output again under the winner's schema plus its own
    column, and the files of its first try are deleted."""
    from raylake.streaming import shard_worker

    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    spec = JobSpec(
        source.uri, lambda t: t.append_column("w", t["v"]), "job", 1, sink_uri=sink.uri,
        schema_mode="merge",
    )  # fmt: skip
    source.write(pa.table({"id": [1], "v": pa.array([1], pa.int32())}))
    written, tries = shard_worker._written, []

    def other_shard_first(*args: object) -> object:
        if not tries:  # the other shard commits its column first
            with raylake.open_table(sink.uri).update_schema() as u:
                u.add_column("other", pa.string())
        tries.append(1)
        return written(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(shard_worker, "_written", other_shard_first)
    assert ShardWorker(spec, 0).step().plans == 1
    assert len(tries) == 2
    assert sink.refresh().schema.names == ["id", "v", "other", "w"]
    assert sink.to_arrow().to_pylist() == [{"id": 1, "v": 1, "other": None, "w": 1}]
    assert len(list((warehouse / "dst" / "data").rglob("*.parquet"))) == 1


def test_a_merge_mode_jobs_output_schema_is_checked_before_any_actor(warehouse: Path) -> None:
    """Under ``schema_mode="merge"`` the declared output is checked as a shard's commit
    checks it (the sink's columns must fit, the new ones must be storable), without
    adding any: it was not checked at all, and a shard failed at its first commit."""
    source = raylake.create_table(str(warehouse / "src"), SCHEMA)
    sink = raylake.create_table(str(warehouse / "dst"), SCHEMA)
    spec = JobSpec(source.uri, lambda t: t, "job", 1, sink_uri=sink.uri, schema_mode="merge")

    def check(output_schema: pa.Schema) -> None:
        check_job(spec, output_schema=output_schema, storage_options=None,
                  sink_storage_options=None)  # fmt: skip

    with pytest.raises(raylake.errors.SchemaMismatchError, match="'v' has type string"):
        check(pa.schema([("id", pa.int64()), ("v", pa.string()), ("w", pa.string())]))
    with pytest.raises(raylake.errors.SchemaError, match="'i'"):
        check(pa.schema([("id", pa.int64()), ("i", pa.month_day_nano_interval())]))
    check(pa.schema([("id", pa.int64()), ("w", pa.string())]))  # new columns are fine
    assert raylake.open_table(sink.uri).schema.names == ["id", "v"]  # and none was added
