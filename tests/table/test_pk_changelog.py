"""Changelogs: replayed from empty they rebuild the table; lookup before-images are exact."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("s", pa.string())]
)
ENGINE_OPTIONS: dict[str, dict[str, str]] = {
    "deduplicate": {},
    "first-row": {"merge-engine": "first-row"},
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"},
}

values = st.tuples(
    st.integers(0, 6), st.none() | st.integers(-3, 3), st.none() | st.sampled_from("ab")
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.lists(values, max_size=6)),
        st.tuples(
            st.just("kinds"),
            st.lists(st.tuples(values, st.sampled_from(["+I", "-U", "+U", "-D"])), max_size=6),
        ),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 6), max_size=3)),
        st.tuples(st.just("compact"), st.booleans()),
    ),
    min_size=1,
    max_size=8,
)


def make(root: Path, engine: str, producer: str) -> raylake.Table:
    options = {**ENGINE_OPTIONS[engine], "changelog-producer": producer}
    options["compaction.max-overlapping-files"] = "2"
    return raylake.create_table(
        str(root / uuid.uuid4().hex), SCHEMA, primary_key=["id"], buckets=2, options=options
    )


def state(tbl: raylake.Table) -> list[dict[str, Any]]:
    return sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"])


def run(tbl: raylake.Table, ops: list[tuple[str, Any]]) -> None:
    for name, arg in ops:
        if name == "upsert":
            tbl.write(
                pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in arg], schema=SCHEMA)
            )
        elif name == "kinds":
            data = pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r, _ in arg], schema=SCHEMA)
            tbl.write(data.append_column("_rl_kind", pa.array([k for _, k in arg], pa.string())))
        elif name == "delete":
            tbl.delete({"id": pa.array(arg, pa.int64())})
        else:
            tbl.compact(full=arg)


def replay(tbl: raylake.Table, into: raylake.Table) -> None:
    for snap in tbl.snapshots():
        changes = tbl.changelog(snap.id)
        if snap.commit_kind == "COMPACT":
            assert changes.num_rows == 0
        into.write(changes)


SETTINGS = settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("engine", list(ENGINE_OPTIONS))
@SETTINGS
@given(ops=operations)
def test_input_changelog_replays_into_the_same_engine(
    tmp_path: Path, engine: str, ops: list[tuple[str, Any]]
) -> None:
    tbl = make(tmp_path, engine, "input")
    run(tbl, ops)
    copy = make(tmp_path, engine, "none")
    replay(tbl, copy)
    assert state(copy) == state(tbl)


@pytest.mark.parametrize("engine", list(ENGINE_OPTIONS))
@SETTINGS
@given(ops=operations)
def test_lookup_changelog_replays_as_plain_upserts(
    tmp_path: Path, engine: str, ops: list[tuple[str, Any]]
) -> None:
    tbl = make(tmp_path, engine, "lookup")
    run(tbl, ops)
    copy = make(tmp_path, "deduplicate", "none")  # lookup rows are whole after-images
    replay(tbl, copy)
    assert state(copy) == state(tbl)


def test_lookup_before_images_are_the_previous_rows(tmp_path: Path) -> None:
    tbl = make(tmp_path, "partial-update", "lookup")
    tbl.write(pa.table({"id": [1, 2], "v": [10, 20], "s": ["a", "b"]}))
    second = tbl.write(pa.table({"id": [1, 3], "v": [None, 30], "s": ["z", None]}, schema=SCHEMA))
    same = tbl.write(pa.table({"id": [2], "v": [20], "s": ["b"]}))  # no change, no rows
    deleted = tbl.delete({"id": [3]})
    assert tbl.changelog(second.id).to_pylist() == [
        {"id": 1, "v": 10, "s": "a", "_rl_kind": "-U"},
        {"id": 1, "v": 10, "s": "z", "_rl_kind": "+U"},
        {"id": 3, "v": 30, "s": None, "_rl_kind": "+I"},
    ]
    assert tbl.changelog(same.id).num_rows == 0
    assert tbl.changelog(deleted.id).to_pylist() == [
        {"id": 3, "v": 30, "s": None, "_rl_kind": "-D"}
    ]
    assert tbl.changelog(second.id, columns=["v"]).column_names == ["v", "_rl_kind"]


def test_lookup_is_exact_when_writers_race(tmp_path: Path) -> None:
    """Both writers start from the same snapshot; the second commit's before-image is the first's row."""
    tbl = make(tmp_path, "deduplicate", "lookup")
    tbl.write(pa.table({"id": [1], "v": [1], "s": ["base"]}))
    first, second = tbl.new_writer(), tbl.new_writer()
    first.write(pa.table({"id": [1], "v": [2], "s": ["first"]}))
    second.write(pa.table({"id": [1], "v": [3], "s": ["second"]}))
    tbl.commit(first.prepare_commit(), mode="upsert")
    snap = tbl.commit(second.prepare_commit(), mode="upsert")
    assert tbl.changelog(snap.id).to_pylist() == [
        {"id": 1, "v": 2, "s": "first", "_rl_kind": "-U"},
        {"id": 1, "v": 3, "s": "second", "_rl_kind": "+U"},
    ]


def test_input_changelog_records_rows_as_written(tmp_path: Path) -> None:
    tbl = make(tmp_path, "deduplicate", "input")
    data = pa.table({"id": [1, 1, 1], "v": [1, 1, 2], "s": ["a", "a", "b"]})
    tbl.write(data.append_column("_rl_kind", pa.array(["+I", "-U", "+U"])))
    assert [(r["v"], r["_rl_kind"]) for r in tbl.changelog(1).to_pylist()] == [
        (1, "+I"),
        (1, "-U"),
        (2, "+U"),
    ]


def test_a_failed_lookup_changelog_file_is_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup changelog file whose write fails is aborted like any other writer's
    (``writing``): the failed commit leaves no file behind."""
    from raylake.table.writer import RollingFileWriter

    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, primary_key=["id"], buckets=1,
        options={"changelog-producer": "lookup"},
    )  # fmt: skip
    tbl.write(pa.table({"id": [1, 2], "v": [1, 2], "s": ["a", "b"]}, schema=SCHEMA))
    files_before = {rel for rel, _ in tbl.file_io.list_files("data")}
    original = RollingFileWriter._close_file

    def failing_changelog_close(self: RollingFileWriter) -> None:
        if "changelog" in self.prefix:
            raise RuntimeError("injected: the changelog file could not be finished")
        original(self)

    monkeypatch.setattr(RollingFileWriter, "_close_file", failing_changelog_close)
    with pytest.raises(RuntimeError, match="injected"):
        tbl.write(pa.table({"id": [2, 3], "v": [5, 3], "s": ["x", "c"]}, schema=SCHEMA))
    monkeypatch.undo()
    assert {rel for rel, _ in tbl.file_io.list_files("data")} == files_before
    assert tbl.latest_snapshot().id == 1  # type: ignore[union-attr]


def test_a_writer_opened_before_a_schema_change_looks_up_whole_before_images(
    tmp_path: Path,
) -> None:
    """The lookup reads the rows it replaces under the schema they were committed with
    (was: under the writer's older one, so the -U row lost the newer column)."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("x", pa.int64())])
    stale = raylake.create_table(
        str(tmp_path / "t"), schema, primary_key=["k"], buckets=1,
        options={"changelog-producer": "lookup"},
    )  # fmt: skip
    stale.write(pa.table({"k": [1], "x": [1]}, schema=schema))
    fresh = raylake.open_table(stale.uri)
    with fresh.update_schema() as u:
        u.add_column("z", pa.string())
    fresh.write(pa.table({"k": [1], "x": [2], "z": ["before"]}, fresh.schema))
    snap = stale.write(pa.table({"k": [1], "x": [3]}, schema=schema))
    assert snap is not None
    assert fresh.changelog(snap.id).to_pylist() == [
        {"k": 1, "x": 2, "z": "before", "_rl_kind": "-U"},
        {"k": 1, "x": 3, "z": None, "_rl_kind": "+U"},
    ]


def test_a_delete_by_a_table_opened_before_a_schema_change_keeps_whole_before_images(
    tmp_path: Path,
) -> None:
    """Its -D rows are the rows as committed (was: read and written under the Table's
    older schema, so the input changelog's -D lost the newer column)."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("x", pa.int64())])
    stale = raylake.create_table(
        str(tmp_path / "t"), schema, primary_key=["k"], buckets=1,
        options={"changelog-producer": "input"},
    )  # fmt: skip
    stale.write(pa.table({"k": [1, 2], "x": [1, 1]}, schema=schema))
    fresh = raylake.open_table(stale.uri)
    with fresh.update_schema() as u:
        u.add_column("z", pa.string())
    fresh.write(pa.table({"k": [1], "x": [2], "z": ["before"]}, fresh.schema))
    snap = stale.delete({"k": [1]})
    assert snap is not None
    assert fresh.changelog(snap.id).to_pylist() == [
        {"k": 1, "x": 2, "z": "before", "_rl_kind": "-D"}
    ]
    assert fresh.to_arrow().to_pylist() == [{"k": 2, "x": 1, "z": None}]


def test_a_delete_by_a_table_opened_before_columns_swapped_names_follows_them_by_id(
    tmp_path: Path,
) -> None:
    """Columns a and b swapped names since the Table was opened: its filter a = 100 is
    the rows its own read gives, not those of the column now named a (was: deleted k 2,
    where the append tables and every read follow the columns by id)."""
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("a", pa.int64()), ("b", pa.int64())]
    )
    fresh = raylake.create_table(str(tmp_path / "t"), schema, primary_key=["k"], buckets=1)
    fresh.write(pa.table({"k": [1, 2], "a": [100, 0], "b": [0, 100]}, schema=schema))
    stale = raylake.open_table(fresh.uri)
    with fresh.update_schema() as u:
        u.rename_column("a", "tmp")
        u.rename_column("b", "a")
        u.rename_column("tmp", "b")
    fresh.write(pa.table({"k": [3], "a": [7], "b": [7]}, fresh.schema))
    assert stale.to_arrow(filter="a = 100").column("k").to_pylist() == [1]
    stale.delete("a = 100")
    assert sorted(fresh.to_arrow().column("k").to_pylist()) == [2, 3]


def test_nested_columns_beside_the_keys_in_lookups_and_deletes_by_key(tmp_path: Path) -> None:
    """A lookup changelog of a composite key and a delete by keys narrow the rows read to
    the keys without joining the nested columns (was: Arrow's ArrowInvalid 'not
    supported in join non-key field')."""
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("j", pa.string(), nullable=False),
            ("tags", pa.list_(pa.string())),
            ("st", pa.struct([("x", pa.int64())])),
        ]
    )
    tbl = raylake.create_table(
        str(tmp_path / "t"), schema, primary_key=["k", "j"], buckets=1,
        options={"changelog-producer": "lookup"},
    )  # fmt: skip
    tbl.write(pa.table({"k": [1, 2], "j": ["a", "b"], "tags": [["x"], None],
                        "st": [{"x": 1}, None]}, schema=schema))  # fmt: skip
    snap = tbl.write(
        pa.table({"k": [1], "j": ["a"], "tags": [["y"]], "st": [{"x": 2}]}, schema=schema)
    )
    assert snap is not None
    assert tbl.changelog(snap.id).to_pylist() == [
        {"k": 1, "j": "a", "tags": ["x"], "st": {"x": 1}, "_rl_kind": "-U"},
        {"k": 1, "j": "a", "tags": ["y"], "st": {"x": 2}, "_rl_kind": "+U"},
    ]
    snap = tbl.delete({"k": [2], "j": ["b"]})
    assert snap is not None
    assert tbl.changelog(snap.id).to_pylist() == [
        {"k": 2, "j": "b", "tags": None, "st": None, "_rl_kind": "-D"}
    ]
    assert tbl.to_arrow().to_pylist() == [{"k": 1, "j": "a", "tags": ["y"], "st": {"x": 2}}]
