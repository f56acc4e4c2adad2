"""Schema evolution (issue 18): the API, its refusals, and reads of old files by field id."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import (
    ColumnExistsError,
    CommitConflictError,
    IncompatibleTypeChangeError,
    InvalidArgumentError,
    ProtectedColumnError,
    SchemaError,
    SchemaEvolutionError,
    SchemaMismatchError,
    UnknownColumnError,
)
from raylake.format.schema_files import schema_ids
from raylake.table import Table

SCHEMA = pa.schema([("x", pa.int32()), ("y", pa.string()), ("label", pa.float32())])


def rows(tbl: Table, key: str = "x2", **kwargs: Any) -> list[dict[str, Any]]:
    return sorted(tbl.to_arrow(**kwargs).to_pylist(), key=lambda r: r[key])


def files_planned(tbl: Table, **kwargs: Any) -> int:
    return sum(len(s.files) for s in tbl.scan(**kwargs).plan())


def data_files(root: Path) -> set[str]:
    return {str(p) for p in (root / "data").rglob("*.parquet")}


@pytest.fixture
def evolved(tmp_path: Path) -> Table:
    """Two files under schema 0, then add z, rename x, widen label, drop y; one file under 1."""
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    tbl.write(pa.table({"x": [1, 2], "y": ["a", "b"], "label": [0.5, 1.5]}, schema=SCHEMA))
    tbl.write(pa.table({"x": [3], "y": ["c"], "label": [2.5]}, schema=SCHEMA))
    with tbl.update_schema() as u:
        u.add_column("z", pa.float32(), after="x")
        u.rename_column("x", "x2")
        u.update_column("label", pa.float64())
        u.delete_column("y")
    tbl.write(pa.table({"x2": pa.array([4], pa.int32()), "z": pa.array([9.0], pa.float32()),
                        "label": [3.5]}))  # fmt: skip
    return tbl


def test_old_files_read_under_the_new_schema(evolved: Table) -> None:
    assert evolved.schema == pa.schema(
        [("x2", pa.int32()), ("z", pa.float32()), ("label", pa.float64())]
    )
    assert rows(evolved) == [
        {"x2": 1, "z": None, "label": 0.5},
        {"x2": 2, "z": None, "label": 1.5},
        {"x2": 3, "z": None, "label": 2.5},
        {"x2": 4, "z": 9.0, "label": 3.5},
    ]
    assert rows(evolved, columns=["label", "x2"])[0] == {"label": 0.5, "x2": 1}
    reopened = raylake.open_table(evolved.uri)
    assert reopened.schema == evolved.schema and reopened.count() == 4


def test_a_schema_change_rewrites_no_data_and_makes_no_snapshot(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    tbl.write(pa.table({"x": [1], "y": ["a"], "label": [0.5]}, schema=SCHEMA))
    before = data_files(tmp_path)
    with tbl.update_schema() as u:
        u.rename_column("x", "x2")
        u.add_column("z", pa.int64())
    assert data_files(tmp_path) == before
    assert [s.id for s in tbl.snapshots()] == [1]
    assert schema_ids(tbl.file_io) == [0, 1]
    stored = json.loads((tmp_path / "schema" / "schema-1.json").read_text())
    assert stored["format_version"] == 2
    assert [(f["id"], f["name"]) for f in stored["fields"]] == [
        (0, "x2"), (1, "y"), (2, "label"), (3, "z")
    ]  # fmt: skip
    assert stored["highest_field_id"] == 3


def test_filters_and_pruning_on_renamed_widened_and_added_columns(evolved: Table) -> None:
    assert [r["x2"] for r in rows(evolved, filter="x2 >= 2")] == [2, 3, 4]
    assert files_planned(evolved, filter="x2 >= 4") == 1  # statistics kept their field id
    assert files_planned(evolved, filter="x2 > 100") == 0
    assert [r["x2"] for r in rows(evolved, filter="label > 2.0")] == [3, 4]
    assert files_planned(evolved, filter="label > 3.0") == 1  # widened bounds still prune
    # Files written before z existed hold only nulls in it: never pruned for `z is null`.
    assert [r["x2"] for r in rows(evolved, filter="z is null")] == [1, 2, 3]
    assert files_planned(evolved, filter="z is null") >= 2
    assert evolved.count(filter="z is null") == 3
    assert [r["x2"] for r in rows(evolved, filter="z is not null")] == [4]
    assert [r["x2"] for r in rows(evolved, filter="z > 1 or x2 = 1")] == [1, 4]
    assert [r["x2"] for r in rows(evolved, filter="label != 1.5 and x2 < 3")] == [1]  # rows only


def test_time_travel_reads_each_snapshot_under_its_own_schema(evolved: Table) -> None:
    assert evolved.schema_at(1) == SCHEMA
    assert rows(evolved, key="x", snapshot_id=1) == [
        {"x": 1, "y": "a", "label": 0.5},
        {"x": 2, "y": "b", "label": 1.5},
    ]
    assert [r["y"] for r in rows(evolved, key="x", snapshot_id=2)] == ["a", "b", "c"]
    assert evolved.schema_at(3) == evolved.schema
    assert len(rows(evolved, snapshot_id=3)) == 4
    with pytest.raises(UnknownColumnError):
        evolved.scan(snapshot_id=1, columns=["x2"])
    assert evolved.to_arrow(snapshot_id=2, filter="y = 'c'").column("x").to_pylist() == [3]


def test_a_time_travel_split_read_on_its_own_keeps_its_schema(evolved: Table) -> None:
    # A worker given one split of an old snapshot's plan reads it as the plan saw it.
    (split,) = evolved.scan(snapshot_id=2).plan()
    old = pa.Table.from_batches(evolved.read_split(split, columns=["x", "y"]))
    assert sorted(old.to_pylist(), key=lambda r: r["x"]) == [
        {"x": 1, "y": "a"}, {"x": 2, "y": "b"}, {"x": 3, "y": "c"},
    ]  # fmt: skip
    latest = evolved.scan().plan()  # the latest snapshot, under the current schema
    now = pa.Table.from_batches(b for s in latest for b in evolved.read_split(s))
    assert now.schema == evolved.schema and now.num_rows == 4


def test_a_dropped_then_added_name_is_a_new_column(evolved: Table) -> None:
    with evolved.update_schema() as u:
        u.add_column("y", pa.string())
    assert [r["y"] for r in rows(evolved)] == [None, None, None, None]
    evolved.write(pa.table({"x2": pa.array([5], pa.int32()), "y": ["new"]}), schema_mode="merge")
    assert [r["y"] for r in rows(evolved)] == [None, None, None, None, "new"]
    assert rows(evolved, key="x", snapshot_id=1)[0]["y"] == "a"  # old values stay old


def test_merge_mode_adds_the_new_columns_first(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    tbl.write(pa.table({"x": [1], "y": ["a"], "label": [0.5]}, schema=SCHEMA))
    with pytest.raises(SchemaMismatchError):
        tbl.write(pa.table({"x": [2], "y": ["b"], "label": [1.5], "w": [7]}))
    assert schema_ids(tbl.file_io) == [0]
    tbl.write(pa.table({"x": pa.array([2], pa.int32()), "w": [7]}), schema_mode="merge")
    assert tbl.schema.names == ["x", "y", "label", "w"]
    assert rows(tbl, key="x") == [
        {"x": 1, "y": "a", "label": 0.5, "w": None},
        {"x": 2, "y": None, "label": None, "w": 7},
    ]
    assert schema_ids(tbl.file_io) == [0, 1]
    tbl.write(pa.table({"x": pa.array([3], pa.int32()), "w": [8]}), schema_mode="merge")
    assert schema_ids(tbl.file_io) == [0, 1]  # nothing new: no schema change
    with pytest.raises(InvalidArgumentError, match="schema_mode"):
        tbl.write(pa.table({"x": [1]}), schema_mode="evolve")


def test_merge_mode_refuses_a_column_without_a_type(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    with pytest.raises(SchemaEvolutionError, match="'n'"):
        tbl.write(pa.table({"x": [1], "n": pa.nulls(1)}), schema_mode="merge")
    assert schema_ids(tbl.file_io) == [0]


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"v": pa.array([1], pa.int8()), "w": [7]}, "'k'"),  # no key
        ({"k": [1], "v": ["text"], "w": [7]}, "'v'"),  # a known column that cannot fit
    ],
    ids=["missing-key", "wrong-type"],
)
def test_a_refused_merge_write_adds_no_column(tmp_path: Path, data: dict, named: str) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.int8())])
    tbl = raylake.create_table(str(tmp_path), schema, primary_key=["k"])
    with pytest.raises(SchemaMismatchError, match=named):
        tbl.write(pa.table(data), schema_mode="merge")
    assert schema_ids(tbl.file_io) == [0]
    assert tbl.refresh().schema.names == ["k", "v"]


def test_merge_mode_takes_the_new_columns_of_every_chunk_of_a_list(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), pa.schema([("x", pa.int64())]))
    chunks = [pa.table({"x": [1], "a": [1.5]}), pa.table({"x": [2], "b": ["s"]}).to_batches()[0]]
    tbl.write(chunks, schema_mode="merge")
    assert schema_ids(tbl.file_io) == [0, 1]  # one schema change
    assert rows(tbl.refresh(), key="x") == [
        {"x": 1, "a": 1.5, "b": None},
        {"x": 2, "a": None, "b": "s"},
    ]


def test_a_stream_refused_for_a_later_chunk_adds_no_column(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), pa.schema([("x", pa.int64())]))
    chunks = iter([pa.table({"x": [1], "a": [1.5]}), pa.table({"x": [2], "b": ["s"]})])
    with pytest.raises(SchemaMismatchError, match="'b'"):
        tbl.write(chunks, schema_mode="merge")
    assert schema_ids(tbl.file_io) == [0]
    assert tbl.schema.names == tbl.refresh().schema.names == ["x"]
    assert not data_files(tmp_path)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda u: u.add_column("y", pa.int64()), ColumnExistsError),
        (lambda u: u.rename_column("x", "label"), ColumnExistsError),
        (lambda u: u.add_column("_rl_z", pa.int64()), SchemaEvolutionError),
        (lambda u: u.rename_column("x", "_rl_x"), SchemaEvolutionError),
        (lambda u: u.add_column("z", pa.int64(), nullable=False), SchemaEvolutionError),
        (lambda u: u.update_column("x", pa.int16()), IncompatibleTypeChangeError),
        (lambda u: u.update_column("label", pa.float16()), IncompatibleTypeChangeError),
        (lambda u: u.update_column("x", pa.string()), IncompatibleTypeChangeError),
        (lambda u: u.update_column("y", pa.int64()), IncompatibleTypeChangeError),
        (lambda u: u.update_column("x", pa.uint64()), IncompatibleTypeChangeError),
        (lambda u: u.update_column("x", nullable=False), SchemaEvolutionError),
        (lambda u: u.delete_column("nope"), UnknownColumnError),
        (lambda u: u.add_column("z", pa.int64(), after="nope"), UnknownColumnError),
        (lambda u: u.add_column("z", pa.int64(), after="x", before="y"), SchemaEvolutionError),
    ],
)
def test_bad_changes_are_refused_and_commit_nothing(
    tmp_path: Path, change: Any, error: type[Exception]
) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    with pytest.raises(error), tbl.update_schema() as u:
        u.add_column("fine", pa.int64())  # a good change before the bad one is not kept
        change(u)
    assert schema_ids(tbl.file_io) == [0]
    assert tbl.schema == SCHEMA == raylake.open_table(tbl.uri).schema


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda u: u.add_column(5, pa.int64()), "name must be a column name (a non-empty"),
        (lambda u: u.add_column("", pa.int64()), "name must be a column name (a non-empty"),
        (lambda u: u.rename_column("x", None), "new_name must be a column name"),
        (lambda u: u.add_column("z", "int64"), "field_type must be a pyarrow DataType"),
        (lambda u: u.update_column("x", "int64"), "field_type must be a pyarrow DataType"),
        (lambda u: u.add_column("z", pa.int64(), after="x", before="y"), "after and before"),
    ],
)
def test_an_argument_mistake_is_an_invalid_argument_error(
    tmp_path: Path, change: Any, message: str
) -> None:
    """As nullable='no' already was: these raised a SchemaEvolutionError alone, which
    ``except InvalidArgumentError`` (a TypeError) did not catch. Still a
    SchemaEvolutionError, for code that catches that."""
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as caught:
        change(tbl.update_schema())
    assert isinstance(caught.value, SchemaEvolutionError) and isinstance(caught.value, TypeError)
    assert schema_ids(tbl.file_io) == [0]


def test_an_error_inside_the_block_commits_nothing(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    with pytest.raises(RuntimeError), tbl.update_schema() as u:
        u.add_column("z", pa.int64())
        raise RuntimeError("changed my mind")
    assert schema_ids(tbl.file_io) == [0]


def test_an_update_is_closed_once_its_block_ends(tmp_path: Path) -> None:
    """A change made on ``u`` after its block would be lost without a word: it is refused,
    as is a second commit (which used to blame another writer)."""
    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    with tbl.update_schema() as u:
        u.add_column("z", pa.int64())
    for late in (
        lambda: u.add_column("w", pa.int64()),
        lambda: u.rename_column("x", "x2"),
        lambda: u.update_column("x", pa.int64()),
        lambda: u.delete_column("y"),
        lambda: u.union_by_name(pa.schema([("w", pa.int64())])),
        u.commit,
    ):
        with pytest.raises(SchemaEvolutionError, match="already"):
            late()
    with pytest.raises(RuntimeError), tbl.update_schema() as failed:
        raise RuntimeError("changed my mind")
    with pytest.raises(SchemaEvolutionError, match="already"):
        failed.add_column("w", pa.int64())
    with tbl.update_schema() as committed:  # an explicit commit inside the block is the commit
        committed.add_column("w", pa.int64())
        committed.commit()
    assert schema_ids(tbl.file_io) == [0, 1, 2]
    assert tbl.refresh().schema.names == ["x", "y", "label", "z", "w"]


@pytest.mark.parametrize(
    ("change", "role"),
    [
        (lambda u: u.delete_column("k"), "primary-key"),
        (lambda u: u.rename_column("k", "k2"), "primary-key"),
        (lambda u: u.update_column("k", pa.int64()), "primary-key"),
        (lambda u: u.delete_column("p"), "partition"),
        (lambda u: u.rename_column("p", "p2"), "partition"),
        (lambda u: u.delete_column("ts"), "sequence"),
        (lambda u: u.update_column("ts", pa.int64()), "sequence"),
    ],
)
def test_key_partition_and_sequence_columns_cannot_change(
    tmp_path: Path, change: Any, role: str
) -> None:
    schema = pa.schema(
        [("k", pa.int32()), ("p", pa.string()), ("ts", pa.int32()), ("v", pa.float64())]
    )
    if role == "partition":
        tbl = raylake.create_table(str(tmp_path), schema, partition_by=["p"])
    else:
        tbl = raylake.create_table(
            str(tmp_path), schema, primary_key=["k"], options={"sequence.field": "ts"}
        )
    with pytest.raises(ProtectedColumnError, match=role) as info, tbl.update_schema() as u:
        change(u)
    assert info.value.role == role
    assert schema_ids(tbl.file_io) == [0]


def test_widenings_that_are_allowed(tmp_path: Path) -> None:
    schema = pa.schema(
        [("a", pa.int8()), ("b", pa.uint16()), ("c", pa.float32()), ("d", pa.int32()),
         ("e", pa.decimal128(5, 2)), ("f", pa.string())]
    )  # fmt: skip
    tbl = raylake.create_table(str(tmp_path), schema)
    tbl.write(pa.table({"a": [-3], "b": [65535], "c": [0.25], "d": [2**31 - 1], "e": [None],
                        "f": ["s"]}, schema=schema))  # fmt: skip
    with tbl.update_schema() as u:
        u.update_column("a", pa.int64())
        u.update_column("b", pa.int32())
        u.update_column("c", pa.float64())
        u.update_column("d", pa.float64())
        u.update_column("e", pa.decimal128(9, 2))
        u.update_column("f", pa.large_string())
    assert tbl.to_arrow().to_pylist() == [
        {"a": -3, "b": 65535, "c": 0.25, "d": 2**31 - 1, "e": None, "f": "s"}
    ]
    assert tbl.to_arrow().schema == tbl.schema
    assert tbl.count(filter="b > 65534") == 1 and tbl.count(filter="a < -2") == 1


@pytest.mark.parametrize("primary_key", [(), ["id"]])
def test_a_column_made_without_values_takes_a_type(tmp_path: Path, primary_key: Any) -> None:
    """from_pandas makes an all-None object column of Arrow type null; a write of values
    into it is refused naming the way out, and update_column gives it any type."""
    import pandas as pd

    tbl = raylake.from_pandas(
        pd.DataFrame({"id": [1], "note": [None]}), str(tmp_path / "t"), primary_key=primary_key
    )
    assert tbl.schema.field("note").type == pa.null()
    with pytest.raises(SchemaMismatchError, match="update_column"):
        tbl.write(pa.table({"id": [2], "note": ["x"]}))
    with tbl.update_schema() as u:
        u.update_column("note", pa.string())
    tbl.write(pa.table({"id": [2], "note": ["x"]}))
    assert tbl.to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "note": None},
        {"id": 2, "note": "x"},
    ]
    assert tbl.count(filter="note = 'x'") == 1 and tbl.count(filter="note is null") == 1


def test_a_concurrent_schema_change_conflicts(tmp_path: Path) -> None:
    first = raylake.create_table(str(tmp_path), SCHEMA)
    second = raylake.open_table(str(tmp_path))
    u1, u2 = first.update_schema(), second.update_schema()
    u1.add_column("a", pa.int64())
    u2.add_column("b", pa.int64())
    u1.commit()
    with pytest.raises(CommitConflictError):
        u2.commit()
    assert raylake.open_table(str(tmp_path)).schema.names == [*SCHEMA.names, "a"]


def test_a_writer_opened_before_a_change_still_commits(tmp_path: Path) -> None:
    stale = raylake.create_table(str(tmp_path), SCHEMA)
    fresh = raylake.open_table(str(tmp_path))
    with fresh.update_schema() as u:
        u.rename_column("y", "y2")
        u.add_column("z", pa.int64())
    fresh.write(pa.table({"x": [2], "y2": ["b"], "label": [1.5], "z": [7]}, schema=fresh.schema))
    snap = stale.write(pa.table({"x": [1], "y": ["a"], "label": [0.5]}, schema=SCHEMA))
    # The snapshot never goes back to an older schema than its parent's; its file keeps
    # the schema it was written with and reads by field id.
    assert snap is not None and snap.schema_id == 1
    assert rows(fresh, key="x") == [
        {"x": 1, "y2": "a", "label": 0.5, "z": None},
        {"x": 2, "y2": "b", "label": 1.5, "z": 7},
    ]
    assert stale.refresh().schema == fresh.schema


def test_the_first_commit_after_a_change_records_it_whoever_makes_it(tmp_path: Path) -> None:
    """A writer opened before a change makes the next snapshot: it recorded the older
    schema id (its parent's), so the latest snapshot read as `y` by its id, as `y2` and
    `z` without one. Paimon's commit records the newest schema too."""
    stale = raylake.create_table(str(tmp_path), SCHEMA)
    with raylake.open_table(str(tmp_path)).update_schema() as u:
        u.rename_column("y", "y2")
        u.add_column("z", pa.int64())
    snap = stale.write(pa.table({"x": [1], "y": ["a"], "label": [0.5]}, schema=SCHEMA))
    assert snap is not None and snap.schema_id == 1
    tbl = raylake.open_table(str(tmp_path))
    assert tbl.to_arrow(snapshot_id=snap.id).equals(tbl.to_arrow())
    assert tbl.to_arrow().column_names == ["x", "y2", "label", "z"]


@pytest.mark.parametrize("widen", [False, True])
def test_automatic_compaction_after_a_stale_writer_keeps_newer_columns(
    tmp_path: Path, widen: bool
) -> None:
    """A writer opened before a change triggers the compaction: it runs under the latest
    schema (was: under the writer's, dropping z; with x widened to values its old type
    cannot hold, the write raised after its commit)."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("x", pa.int32())])
    stale = raylake.create_table(
        str(tmp_path), schema, primary_key=["k"], buckets=1,
        options={"compaction.max-overlapping-files": 2},
    )  # fmt: skip
    fresh = raylake.open_table(str(tmp_path))
    with fresh.update_schema() as u:
        u.add_column("z", pa.string())
        if widen:
            u.update_column("x", pa.int64())
    big = 2**40 if widen else 1
    fresh.write(pa.table({"k": [1, 5], "x": [big, 5], "z": ["kept", "kept too"]}, fresh.schema))
    for x in range(3):  # overlapping files: a commit compacts the bucket
        stale.write(pa.table({"k": [1, 2], "x": [x, x]}, schema=schema))
    assert "COMPACT" in [s.commit_kind for s in fresh.snapshots()]
    assert fresh.to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "x": 2, "z": None},
        {"k": 2, "x": 2, "z": None},
        {"k": 5, "x": 5, "z": "kept too"},
    ]


@pytest.mark.parametrize(
    ("kind", "mode"),
    [("append", "overwrite"), ("pk", "overwrite"), ("pk", "upsert")],
)
def test_a_writer_opened_before_a_widening_commits_past_wider_bounds(
    tmp_path: Path, kind: str, mode: str
) -> None:
    """Its commit reads the manifests under its own, narrower type: bounds it cannot hold
    are unknown to it (was: CorruptMetadataError naming a sound manifest)."""
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("p", pa.string()), ("x", pa.int32())]
    )
    pk = {"primary_key": ["k", "p"], "buckets": 1} if kind == "pk" else {}
    options = {"changelog-producer": "lookup"} if kind == "pk" else {}
    stale = raylake.create_table(str(tmp_path), schema, partition_by=["p"], options=options, **pk)
    stale.write(pa.table({"k": [1, 2], "p": ["a", "b"], "x": [1, 2]}, schema=schema))
    fresh = raylake.open_table(str(tmp_path))
    with fresh.update_schema() as u:
        u.update_column("x", pa.int64())
    fresh.write(pa.table({"k": [3], "p": ["a"], "x": [2**40]}))
    where = "p = 'b'" if mode == "overwrite" else None
    stale.write(
        pa.table({"k": [4], "p": ["b"], "x": [4]}, schema=schema),
        mode=mode,
        overwrite_filter=where,
    )
    got = [(r["k"], r["x"]) for r in fresh.to_arrow().sort_by("k").to_pylist()]
    b_rows = [(4, 4)] if mode == "overwrite" else [(2, 2), (4, 4)]
    assert got == sorted([(1, 1), (3, 2**40), *b_rows])


@pytest.mark.parametrize("kind", ["append", "pk"])
def test_a_reader_opened_before_a_widening_is_told_to_refresh(tmp_path: Path, kind: str) -> None:
    """Rows that fit its older type it reads; a wider value fails the read with
    SchemaError naming the column (was: pyarrow's bare ArrowInvalid)."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("x", pa.int32())])
    pk = {"primary_key": ["k"], "buckets": 1} if kind == "pk" else {}
    stale = raylake.create_table(str(tmp_path), schema, **pk)
    stale.write(pa.table({"k": [1], "x": [1]}, schema=schema))
    fresh = raylake.open_table(str(tmp_path))
    with fresh.update_schema() as u:
        u.update_column("x", pa.int64())
    fresh.write(pa.table({"k": [2], "x": [5]}))
    assert stale.to_arrow().sort_by("k").column("x").to_pylist() == [1, 5]
    fresh.write(pa.table({"k": [3], "x": [2**40]}))
    message = r"changed the type of x: int32 -> int64 since.*call refresh\(\)"
    with pytest.raises(SchemaError, match=message):
        stale.to_arrow()
    with pytest.raises(SchemaError, match=message):
        list(stale.to_batches())
    assert stale.refresh().to_arrow().sort_by("k").column("x").to_pylist() == [1, 5, 2**40]


def test_changes_of_a_reader_opened_before_a_widening_tell_it_to_refresh(tmp_path: Path) -> None:
    """A primary-key table's changes() and changelog() merge the buckets under the
    reader's older type: a wider value fails with SchemaError naming the column, as a
    scan's does (was: pyarrow's bare ArrowInvalid)."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("x", pa.int32())])
    options = {"changelog-producer": "lookup"}
    stale = raylake.create_table(str(tmp_path), schema, primary_key=["k"], options=options)
    stale.write(pa.table({"k": [1], "x": [1]}, schema=schema))
    fresh = raylake.open_table(str(tmp_path))
    with fresh.update_schema() as u:
        u.update_column("x", pa.int64())
    fresh.write(pa.table({"k": [1, 2], "x": [2**40, 3]}))
    message = r"changed the type of x: int32 -> int64 since.*call refresh\(\)"
    with pytest.raises(SchemaError, match=message):
        stale.changes(1, include_row_kind=True).to_arrow()
    with pytest.raises(SchemaError, match=message):
        list(stale.changes(0).to_batches())
    with pytest.raises(SchemaError, match=message):
        stale.changelog(2)
    got = stale.refresh().changes(1).to_arrow().sort_by("k").column("x").to_pylist()
    assert got == [2**40, 3]


def test_manifests_merged_after_a_change_keep_statistics(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path), SCHEMA, options={"manifest.merge-min-count": "2"})
    for i in range(3):
        tbl.write(pa.table({"x": [i * 10], "y": ["a"], "label": [0.5]}, schema=SCHEMA))
    with tbl.update_schema() as u:
        u.rename_column("x", "x2")
        u.update_column("x2", pa.int64())
    for i in range(3, 5):  # each commit merges the base manifests under the new schema
        tbl.write(pa.table({"x2": [i * 10], "y": ["a"], "label": [0.5]}))
    assert len(tbl.latest_snapshot().base_manifests) == 1  # type: ignore[union-attr]
    assert files_planned(tbl, filter="x2 = 20") == 1
    assert [r["x2"] for r in rows(tbl, filter="x2 >= 20")] == [20, 30, 40]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"merge-engine": "partial-update"},
        {"merge-engine": "aggregation", "fields.default-aggregate-function": "sum"},
        {"merge-engine": "first-row"},
    ],
    ids=["deduplicate", "partial-update", "aggregation", "first-row"],
)
def test_primary_key_merges_across_schema_versions(tmp_path: Path, options: dict) -> None:
    schema = pa.schema([("k", pa.int64()), ("x", pa.int32()), ("y", pa.float32())])
    tbl = raylake.create_table(str(tmp_path), schema, primary_key=["k"], buckets=2, options=options)
    tbl.write(pa.table({"k": [1, 2, 3], "x": [1, 2, 3], "y": [1.0, 2.0, 3.0]}, schema=schema))
    with tbl.update_schema() as u:
        u.rename_column("x", "x2")
        u.update_column("x2", pa.int64())
        u.add_column("z", pa.float64())
    tbl.write(pa.table({"k": [2, 4], "x2": [20, 40], "y": pa.array([None, 4.0], pa.float32()),
                        "z": [0.5, 1.5]}))  # fmt: skip
    engine = options.get("merge-engine", "deduplicate")
    two = {
        "deduplicate": {"k": 2, "x2": 20, "y": None, "z": 0.5},
        "partial-update": {"k": 2, "x2": 20, "y": 2.0, "z": 0.5},
        "aggregation": {"k": 2, "x2": 22, "y": 2.0, "z": 0.5},
        "first-row": {"k": 2, "x2": 2, "y": 2.0, "z": None},
    }[engine]
    expected = [
        {"k": 1, "x2": 1, "y": 1.0, "z": None},
        two,
        {"k": 3, "x2": 3, "y": 3.0, "z": None},
        {"k": 4, "x2": 40, "y": 4.0, "z": 1.5},
    ]
    assert rows(tbl, key="k") == expected
    assert rows(tbl, key="k", filter="z is null", columns=["k"]) == [
        {"k": r["k"]} for r in expected if r["z"] is None
    ]
    assert tbl.count(filter="x2 >= 3") == sum(r["x2"] >= 3 for r in expected)
    assert [r["x"] for r in rows(tbl, key="k", snapshot_id=1)] == [1, 2, 3]
    tbl.compact(full=True)
    assert rows(tbl, key="k") == expected


@pytest.mark.parametrize(
    ("change", "delete", "left"),
    [
        (lambda u: u.rename_column("x", "x2"), "x2 >= 2", [1]),
        (lambda u: u.rename_column("x", "x2"), {"k": [1]}, [2, 3]),
        (lambda u: u.update_column("x", pa.int64()), {"k": [1]}, [2, 3]),
        (lambda u: u.add_column("z", pa.int32()), "z is null and k = 1", [2, 3]),
        (lambda u: u.delete_column("y"), {"k": [1]}, [2, 3]),
    ],
    ids=["rename-filter", "rename-keys", "widen-keys", "add-filter", "drop-keys"],
)
def test_delete_right_after_a_schema_change(
    tmp_path: Path, change: Any, delete: Any, left: list[int]
) -> None:
    """Deletes read the latest snapshot under the current schema, not the one it was
    committed with: no write came between the change and the delete."""
    schema = pa.schema([("k", pa.int64()), ("x", pa.int32()), ("y", pa.float32())])
    tbl = raylake.create_table(str(tmp_path), schema, primary_key=["k"], buckets=2)
    tbl.write(pa.table({"k": [1, 2, 3], "x": [1, 2, 3], "y": [1.0, 2.0, 3.0]}, schema=schema))
    with tbl.update_schema() as u:
        change(u)
    tbl.delete(delete)
    assert sorted(tbl.to_arrow(columns=["k"])["k"].to_pylist()) == left


def test_changes_and_changelog_across_a_schema_change(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.int32())])
    tbl = raylake.create_table(
        str(tmp_path), schema, primary_key=["k"], options={"changelog-producer": "input"}
    )
    tbl.write(pa.table({"k": [1, 2], "v": [1, 2]}, schema=schema))
    with tbl.update_schema() as u:
        u.rename_column("v", "v2")
        u.update_column("v2", pa.int64())
        u.add_column("w", pa.string())
    tbl.write(pa.table({"k": [2, 3], "v2": [20, 30], "w": ["b", "c"]}))
    assert tbl.changes(1).to_arrow().sort_by("k").to_pylist() == [
        {"k": 2, "v2": 20, "w": "b"},
        {"k": 3, "v2": 30, "w": "c"},
    ]
    assert tbl.changes(0).to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "v2": 1, "w": None},
        {"k": 2, "v2": 20, "w": "b"},
        {"k": 3, "v2": 30, "w": "c"},
    ]
    assert tbl.changelog(1, columns=["k", "v2"]).column("v2").to_pylist() == [1, 2]
    append = raylake.create_table(str(tmp_path / "a"), schema)
    append.write(pa.table({"k": [1], "v": [1]}, schema=schema))
    with append.update_schema() as u:
        u.rename_column("v", "v2")
    append.write(pa.table({"k": [2], "v2": pa.array([2], pa.int32())}))
    assert append.changes(0).to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "v2": 1},
        {"k": 2, "v2": 2},
    ]


def test_nested_columns_are_not_widened_and_gain_no_field(tmp_path: Path) -> None:
    """docs/schema-evolution.md: nested types change as a whole or not at all."""
    schema = pa.schema([("id", pa.int64()), ("s", pa.struct([("a", pa.int32())]))])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    with pytest.raises(IncompatibleTypeChangeError, match="column 's'"), tbl.update_schema() as u:
        u.update_column("s", pa.struct([("a", pa.int64())]))
    wider = pa.struct([("a", pa.int64())])
    tbl.write(pa.table({"id": [1], "s": pa.array([{"a": 1}], wider)}), schema_mode="merge")
    more = pa.table({"id": [2], "s": pa.array([{"a": 2, "b": "x"}])})
    for refused in (
        lambda: tbl.write(more, schema_mode="merge"),
        lambda: tbl.merge(more, on="id", schema_mode="merge").when_not_matched_insert().execute(),
        lambda: tbl.write(pa.table({"id": [3], "s": pa.array([{"a": 2**40}], wider)})),
    ):
        with pytest.raises(SchemaMismatchError, match="column 's'"):
            refused()
    assert tbl.schema == schema and tbl.to_arrow().to_pylist() == [{"id": 1, "s": {"a": 1}}]
