"""The read API on Paimon tables: projection, filters and pruning, time travel, splits."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from paimon_util import FIXTURES, case, expected, rows_by_key

import raylake
from raylake.errors import SnapshotNotFoundError, UnknownColumnError, UnsupportedOperationError


def _open(name: str) -> raylake.Table:
    return raylake.open_table(str(FIXTURES / name / "table"))


def test_columns_and_filter_on_an_append_table() -> None:
    tbl = _open("append_unaware")
    got = tbl.to_arrow(columns=["name", "id"], filter="id >= 25")
    want = [r for r in rows_by_key(expected("append_unaware", 3), ["id"]) if r["id"] >= 25]
    assert got.schema.names == ["name", "id"]
    assert rows_by_key(got, ["id"]) == [{"name": r["name"], "id": r["id"]} for r in want]
    assert tbl.count(filter="id >= 25") == len(want)


def test_partition_filter_prunes_files() -> None:
    tbl = _open("append_partitioned")
    all_files = {p for s in tbl.scan().plan() for p in s.paths}
    pruned = tbl.scan(filter="dt = '2024-01-01'").plan()
    paths = {p for s in pruned for p in s.paths}
    assert paths and paths < all_files
    assert all(p.startswith("dt=2024-01-01/") for p in paths)
    assert {s.partition for s in pruned} == {("2024-01-01",)}
    assert tbl.to_arrow(filter="dt = '2024-01-01'").column("dt").to_pylist() == ["2024-01-01"] * 5


def test_null_partition_lives_in_the_default_partition_directory() -> None:
    tbl = _open("append_partitioned")
    splits = tbl.scan(filter="dt is null").plan()
    assert {p.split("/")[0] for s in splits for p in s.paths} == {"dt=__DEFAULT_PARTITION__"}
    assert tbl.to_arrow(filter="dt is null").num_rows == 5


def test_key_filter_prunes_files_of_a_primary_key_table() -> None:
    tbl = _open("pk_deduplicate")
    everything = sum(len(s.files) for s in tbl.scan().plan())
    narrow = tbl.scan(filter="id = 39").plan()
    assert 0 < sum(len(s.files) for s in narrow) < everything
    assert tbl.to_arrow(filter="id = 39").to_pylist() == [
        r for r in expected("pk_deduplicate", 5).to_pylist() if r["id"] == 39
    ]


def test_value_filter_applies_after_the_merge() -> None:
    """Key 16's first version has x = 8.0; its latest has x = 11.0. A filter on the old
    value must not bring the old version back."""
    tbl = _open("pk_deduplicate")
    old = [r for r in expected("pk_deduplicate", 1).to_pylist() if r["id"] == 16]
    assert old and old[0]["x"] == 8.0
    assert tbl.to_arrow(filter="x = 8.0 and id = 16").num_rows == 0
    assert tbl.to_arrow(filter="x = 8.0", snapshot_id=1).column("id").to_pylist() == [16]
    latest = {r["id"]: r for r in expected("pk_deduplicate", 5).to_pylist()}
    got = tbl.to_arrow(filter="x >= 11.0")
    assert sorted(got.column("id").to_pylist()) == sorted(
        k for k, r in latest.items() if r["x"] >= 11.0
    )


def test_deleted_keys_stay_deleted_under_any_filter() -> None:
    tbl = _open("pk_deduplicate")
    assert tbl.to_arrow(filter="id < 3").num_rows == 0
    assert tbl.to_arrow(filter="id < 3", snapshot_id=4).num_rows == 3


def test_time_travel_by_id_and_time() -> None:
    tbl = _open("pk_deduplicate")
    snaps = tbl.snapshots()
    assert [s.id for s in snaps] == [1, 2, 3, 4, 5]
    second = snaps[1]
    by_time = tbl.to_arrow(as_of=second.time_millis)
    assert rows_by_key(by_time, ["id"]) == rows_by_key(expected("pk_deduplicate", 2), ["id"])
    with pytest.raises(SnapshotNotFoundError, match="snapshot 9"):
        tbl.to_arrow(snapshot_id=9)


def test_a_snapshot_is_read_in_its_own_schema() -> None:
    tbl = _open("schema_evolution")
    assert tbl.schema.names == ["id", "a2", "b"]
    assert tbl.to_arrow(snapshot_id=1).schema.names == ["id", "a"]
    with pytest.raises(UnknownColumnError):
        tbl.to_arrow(columns=["b"], snapshot_id=1)
    # A renamed column keeps its field id: old files fill it under the new name.
    got = {r["id"]: r for r in tbl.to_arrow().to_pylist()}
    assert got[1] == {"id": 1, "a2": 1, "b": None}
    assert got[5] == {"id": 5, "a2": 50, "b": "x"}
    # A split of snapshot 1's plan, read on its own, keeps snapshot 1's schema.
    old = [b for s in tbl.scan(snapshot_id=1).plan() for b in tbl.read_split(s)]
    assert pa.Table.from_batches(old).schema.names == ["id", "a"]


def test_plan_and_read_split_pickle() -> None:
    tbl = _open("pk_partitioned")
    scan = tbl.scan(columns=["id", "x"], filter="x > 2")
    splits = pickle.loads(pickle.dumps(scan.plan()))
    ctx = pickle.loads(pickle.dumps(scan.read_context()))
    rows = [r for s in splits for b in ctx.read(s) for r in b.to_pylist()]
    want = [
        {"id": r["id"], "x": r["x"]}
        for r in expected("pk_partitioned", 6).to_pylist()
        if r["x"] > 2
    ]
    key = lambda r: (r["id"], r["x"])  # noqa: E731
    assert sorted(rows, key=key) == sorted(want, key=key)
    # Primary-key splits never cut a bucket.
    assert len({(s.partition, s.bucket) for s in splits}) == len(splits)


def test_to_pandas_and_batches() -> None:
    tbl = _open("append_bucketed")
    frame = tbl.to_pandas(columns=["id"])
    assert sorted(frame["id"].tolist()) == list(range(16))
    assert sum(b.num_rows for b in tbl.to_batches(filter="id < 4")) == 4


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (lambda t: t.write({"id": [1]}), "write()"),
        (lambda t: t.delete("id = 1"), "delete()"),
        (lambda t: t.merge({"id": [1]}, on="id"), "merge()"),
        (lambda t: t.compact(), "compact()"),
        (lambda t: t.new_writer(), "writing"),
        (lambda t: t.expire_snapshots(retain_last=1), "expire_snapshots()"),
        (lambda t: t.update_schema(), "update_schema()"),
    ],
)
def test_writes_name_the_format(call: Any, what: str) -> None:
    tbl = _open("pk_deduplicate")
    with pytest.raises(UnsupportedOperationError, match="Apache Paimon table") as info:
        call(tbl)
    assert what in str(info.value) and "read-only" in str(info.value)


def test_a_sink_refuses_a_paimon_table(paimon_copy: Any) -> None:
    from raylake.table.catalog import open_or_create_table
    from raylake.table.source import check_writable

    path = paimon_copy("append_unaware")
    tbl, created = open_or_create_table(str(path), None)
    assert not created and tbl.format == "paimon"
    with pytest.raises(UnsupportedOperationError, match="paimon"):
        check_writable(tbl, "writing")
    assert not any(n.endswith(".json") for n in (p.name for p in (path / "schema").iterdir()))


def test_create_table_does_not_write_into_a_paimon_table(paimon_copy: Any) -> None:
    import pyarrow as pa

    from raylake.errors import TableAlreadyExistsError

    path = paimon_copy("append_unaware")
    with pytest.raises(TableAlreadyExistsError, match="Apache Paimon table"):
        raylake.create_table(str(path), pa.schema([("id", pa.int64())]))
    assert not any(p.name.endswith(".json") for p in (path / "schema").iterdir())
    assert raylake.open_table(str(path)).format == "paimon"


def test_refresh_loads_the_latest_paimon_schema(paimon_copy: Any) -> None:
    path = paimon_copy("schema_evolution")
    newest = max(int(p.name.split("-")[1]) for p in (path / "schema").iterdir())
    tbl = raylake.open_table(str(path))
    assert tbl.refresh() is tbl
    assert tbl.table_schema.schema_id == newest
    assert tbl.schema.names == ["id", "a2", "b"]


def test_raylake_tables_say_their_format(warehouse: Path) -> None:
    import pyarrow as pa

    tbl = raylake.create_table(str(warehouse / "t"), pa.schema([("id", pa.int64())]))
    assert tbl.format == "raylake"
    assert case("append_unaware")["kind"] == "append"


def test_a_stale_latest_hint_is_not_trusted(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    (table / "snapshot" / "LATEST").write_text("3")  # a writer crashed before updating it
    tbl = raylake.open_table(str(table))
    assert tbl.latest_snapshot().id == 5
    assert tbl.count() == 37
    (table / "snapshot" / "LATEST").write_text("not a number")
    assert raylake.open_table(str(table)).latest_snapshot().id == 5


def test_reads_and_changes_take_the_table_keywords() -> None:
    tbl = _open("pk_deduplicate")
    for name in ("scan", "to_arrow", "changes"):
        params = inspect.signature(getattr(tbl, name)).parameters
        assert {"columns", "filter"} <= set(params)
        with pytest.raises(TypeError, match="'colums'"):
            getattr(tbl, name)(*((1,) if name == "changes" else ()), colums=["id"])
    assert type(tbl.changes(1)).__name__ == "ChangesScan"
    assert type(tbl.scan()).__name__ == "PaimonScan"
