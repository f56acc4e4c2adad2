"""``Table.delete`` on append tables: copy-on-write deletes by filter.

The model test of append tables (tests/table/test_append_model.py) deletes with random
filters against its oracle; these pin what the model cannot see: which files are
rewritten or dropped, schema changes, changes across a compaction, and processes
deleting while others append and compact."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake import col
from raylake.errors import (
    FilterError,
    InvalidArgumentError,
    SchemaEvolutionError,
    UnknownColumnError,
)
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.float64())])


def rows(ids: list[int], dt: str = "d1") -> pa.Table:
    return pa.table({"id": ids, "dt": [dt] * len(ids), "v": [float(i) for i in ids]}, schema=SCHEMA)


def live_paths(tbl: Table) -> set[str]:
    return {p for split in tbl.scan().plan() for p in split.paths}


def data_files_on_disk(tbl: Table) -> set[str]:
    return {rel for rel, _ in tbl.file_io.list_files("data") if rel.endswith(".parquet")}


@pytest.fixture
def tbl(tmp_path: Path) -> Table:
    t = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"])
    t.write(rows([1, 2, 3]))
    t.write(rows([4, 5], "d2"))
    t.write(rows([6, 7]))
    return t


def test_only_the_files_holding_matching_rows_are_rewritten(tbl: Table) -> None:
    before = live_paths(tbl)
    snap = tbl.delete("v >= 2 and v < 4")  # rows of the first file only
    assert snap is not None and snap.commit_kind == "OVERWRITE" and snap.delta_record_count == -2
    assert tbl.to_arrow().column("id").to_pylist() == [1, 6, 7, 4, 5]  # the order kept
    after = live_paths(tbl)
    assert len(before - after) == 1 and len(after - before) == 1
    assert data_files_on_disk(tbl) >= after


def test_a_filter_on_partition_columns_drops_whole_files_unread(tbl: Table) -> None:
    snap = tbl.delete("dt = 'd1'")
    assert snap is not None and tbl.to_arrow().column("id").to_pylist() == [4, 5]
    assert len(live_paths(tbl)) == 1 and len(data_files_on_disk(tbl)) == 3  # none written


def read_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The data files each delete from now on reads (to rewrite them)."""
    from raylake.table import append_delete

    read: list[str] = []
    real = append_delete._read_files

    def recorded(file_io: object, ts: object, snap: object, files: list[Any]) -> Any:
        read.extend(f.path for f in files)
        return real(file_io, ts, snap, files)  # type: ignore[arg-type]

    monkeypatch.setattr(append_delete, "_read_files", recorded)
    return read


def test_files_whose_statistics_prove_every_row_matches_are_dropped_unread(
    tbl: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = read_files(monkeypatch)
    snap = tbl.delete("id <= 5 and v >= 1")  # the first two files whole (ids 1-3, 4-5)
    assert snap is not None and snap.delta_record_count == -5
    assert read == [] and tbl.to_arrow().column("id").to_pylist() == [6, 7]
    assert len(data_files_on_disk(tbl)) == 3  # none written
    tbl.delete("id = 6 or id = 7")  # each row, but no one bound covers the file: read
    assert len(read) == 1 and tbl.count() == 0


@pytest.mark.parametrize(
    ("values", "text"), [([1.0, None], "v < 10"), ([1.0, float("nan")], "v < 10")]
)
def test_a_file_with_a_null_or_a_nan_is_read_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, values: list[Any], text: str
) -> None:
    # Neither a null nor NaN is selected by a comparison: the file holds a row to keep.
    t = raylake.create_table(str(tmp_path / "n"), SCHEMA)
    t.write(pa.table({"id": [1, 2], "dt": ["a", "b"], "v": values}, schema=SCHEMA))
    read = read_files(monkeypatch)
    t.delete(text)
    assert len(read) == 1 and t.to_arrow().column("id").to_pylist() == [2]


def test_nothing_matching_commits_nothing(tbl: Table) -> None:
    latest = tbl.latest_snapshot()
    assert tbl.delete("id > 100") == latest and tbl.delete("v is null") == latest
    assert len(tbl.snapshots()) == 3


def test_a_null_value_is_not_selected_by_a_comparison(tmp_path: Path) -> None:
    t = raylake.create_table(str(tmp_path / "n"), SCHEMA)
    t.write(pa.table({"id": [1, 2], "dt": ["a", "b"], "v": [None, 5.0]}, schema=SCHEMA))
    t.delete("v > 1")
    assert t.to_arrow().column("id").to_pylist() == [1]
    t.delete("v is null")
    assert t.count() == 0


def test_literals_are_typed_as_the_columns_are(tmp_path: Path) -> None:
    # A date or timestamp given as a string and a decimal given as an int, as scans take
    # them: the files' statistics were compared with the literal as written.
    ts_type, dec_type = pa.timestamp("us", tz="UTC"), pa.decimal128(10, 2)
    schema = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("ts", ts_type), ("dec", dec_type)])
    t = raylake.create_table(str(tmp_path / "typed"), schema, partition_by=["d"])
    t.write(
        pa.table(
            {
                "id": [1, 2, 3, 4],
                "d": [date(2024, 1, 1), date(2024, 1, 5), None, date(2024, 1, 6)],
                "ts": [datetime(2024, 1, 1, h, tzinfo=timezone.utc) for h in range(4)],
                "dec": [Decimal("1.00"), Decimal("2.50"), Decimal("1"), None],
            },
            schema=schema,
        )
    )
    for filter, left in [
        ("dec = 1", [2, 4]),
        ("ts > '2024-01-01T02:00:00Z'", [2]),
        ("d >= '2024-01-04'", []),
    ]:
        assert sorted(set(t.to_arrow().column("id").to_pylist()) - {*left}) == sorted(
            t.to_arrow(filter=filter).column("id").to_pylist()
        )
        t.delete(filter)
        assert sorted(t.to_arrow().column("id").to_pylist()) == left


def test_nan_in_a_list_deletes_what_a_read_selects(tmp_path: Path) -> None:
    nan = float("nan")
    t = raylake.create_table(str(tmp_path / "nan"), SCHEMA)
    t.write(pa.table({"id": [1, 2, 3], "dt": ["a"] * 3, "v": [1.0, nan, 5.0]}, schema=SCHEMA))
    t.write(pa.table({"id": [4, 5], "dt": ["a"] * 2, "v": [nan, 1.0]}, schema=SCHEMA))
    for expr in (col("v").isin([nan]), col("v").isin([nan, 1.0])):
        selected = t.to_arrow(filter=expr).column("id").to_pylist()
        left = set(t.to_arrow().column("id").to_pylist()) - set(selected)
        t.delete(expr)
        assert set(t.to_arrow().column("id").to_pylist()) == left
    assert sorted(t.to_arrow().column("id").to_pylist()) == [2, 3, 4]  # NaN equals nothing


@pytest.mark.parametrize(
    ("typ", "values", "where"),
    [
        (pa.date32(), [date(2024, 1, 1), date(2024, 1, 2)], "v >= '2024-01-02'"),
        (
            pa.timestamp("us", "UTC"),
            [datetime(2024, 1, 1), datetime(2024, 1, 2)],
            "v >= '2024-01-02'",
        ),
        (pa.time64("us"), [time(1), time(2)], "v >= '02:00'"),
        (pa.decimal128(10, 2), [Decimal("1.10"), Decimal("2.20")], "v > 2"),
        (pa.float32(), [0.5, 0.1], "v = 0.1"),
        (pa.uint64(), [1, 2**63 + 5], f"v = {2**63 + 5}"),
    ],
)
def test_files_are_pruned_with_the_literal_of_the_columns_type(
    tmp_path: Path, typ: pa.DataType, values: list[object], where: str
) -> None:
    # The statistics compared unconverted literals: pyarrow's bare errors came out, and a
    # float32 0.1 compared with the double 0.1 pruned the file holding it (nothing deleted).
    t = raylake.create_table(str(tmp_path / "p"), pa.schema([("id", pa.int64()), ("v", typ)]))
    t.write(pa.table({"id": [1, 2], "v": pa.array(values, typ)}))
    assert t.to_arrow(filter=where).column("id").to_pylist() == [2]
    t.delete(where)
    assert t.to_arrow().column("id").to_pylist() == [1]


def test_everything_goes_with_true(tbl: Table) -> None:
    tbl.delete("true")
    assert tbl.count() == 0 and tbl.to_arrow(snapshot_id=3).num_rows == 7


@pytest.mark.parametrize(
    ("arg", "error", "match"),
    [
        (None, FilterError, "needs a filter"),
        ({"id": [1]}, InvalidArgumentError, "no primary key"),
        ("nope = 1", UnknownColumnError, "nope"),
    ],
)
def test_wrong_arguments_change_nothing(
    tbl: Table, arg: object, error: type[Exception], match: str
) -> None:
    files = data_files_on_disk(tbl)
    with pytest.raises(error, match=match):
        tbl.delete(arg)
    assert data_files_on_disk(tbl) == files and len(tbl.snapshots()) == 3


def test_files_of_an_older_schema_are_rewritten_under_the_latest(tbl: Table) -> None:
    stale = raylake.open_table(tbl.uri)  # opened before the schema change
    with tbl.update_schema() as update:
        update.add_column("score", pa.float64())
    tbl = tbl.refresh()
    tbl.write(pa.table({"id": [8], "dt": ["d1"], "v": [8.0], "score": [0.5]}))
    stale.delete("id in (1, 8)")  # rewrites the newer file under its own schema
    got = tbl.refresh().to_arrow()
    assert got.column("id").to_pylist() == [2, 3, 6, 7, 4, 5]
    assert got.schema.names == ["id", "dt", "v", "score"]
    tbl.write(pa.table({"id": [9], "dt": ["d1"], "v": [9.0], "score": [1.5]}))
    stale.delete("id = 9")
    assert tbl.refresh().count() == 6


def test_a_column_renamed_since_the_table_was_opened_is_followed_by_id(tbl: Table) -> None:
    stale = raylake.open_table(tbl.uri)  # opened before the rename
    with tbl.update_schema() as update:
        update.rename_column("v", "w")
    with tbl.refresh().update_schema() as update:
        update.add_column("v", pa.float64())  # a new column takes the old name
    tbl = tbl.refresh()
    tbl.write(pa.table({"id": [8], "dt": ["d1"], "w": [8.0], "v": [2.0]}))
    assert stale.to_arrow(filter="v = 2").column("id").to_pylist() == [2]
    stale.delete("v = 2")  # the rows a read of the same filter gives: not the new column's
    assert sorted(tbl.to_arrow().column("id").to_pylist()) == [1, 3, 4, 5, 6, 7, 8]
    with tbl.update_schema() as update:
        update.delete_column("w")
    tbl = tbl.refresh()
    tbl.write(pa.table({"id": [9], "dt": ["d1"], "v": [1.0]}))
    with pytest.raises(SchemaEvolutionError, match="deleted"):
        stale.delete("v = 3")
    assert tbl.count() == 8


def test_changes_give_each_deleted_row_once(tbl: Table) -> None:
    tbl.delete("id = 2")
    changed = tbl.changes(3, include_row_kind=True).to_arrow().to_pylist()
    kinds = sorted((r["_rl_kind"], r["id"]) for r in changed)
    # The deleted row goes; the kept rows of its file come out and in again, unchanged.
    assert kinds == [("+I", 1), ("+I", 3), ("-D", 1), ("-D", 2), ("-D", 3)]
    assert tbl.changes(3).to_arrow().num_rows == 2  # upserts only: the kept rows


@pytest.mark.parametrize("rewrite", ["delete", "merge"])
def test_changes_across_a_compaction_whose_file_was_then_rewritten(
    tmp_path: Path, rewrite: str
) -> None:
    """A compaction that wrote two files, one of them rewritten since (by a delete or a
    merge): a range that holds both still gives the deleted row, once."""
    t = raylake.create_table(
        str(tmp_path / "c"), SCHEMA, options={"write.row-group-rows": 3,
                                              "write.target-file-size": 1})  # fmt: skip
    t.write(rows([0, 1, 2]))
    t.write(rows([3]))
    t.write(rows([4]))
    assert t.compact(full=True) is not None and len(live_paths(t)) == 2
    if rewrite == "delete":
        t.delete("id = 0")
    else:
        t.merge(rows([0]), on="id").when_matched_delete().execute()
    assert sum("compact-" in p for p in live_paths(t)) == 1
    changed = t.changes(1, include_row_kind=True).to_arrow().to_pylist()
    kinds = sorted((r["_rl_kind"], r["id"]) for r in changed)
    # Rows 1 and 2 were in the file rewritten: out and in again, unchanged.
    assert kinds == [("+I", 1), ("+I", 2), ("+I", 3), ("+I", 4), ("-D", 0), ("-D", 1), ("-D", 2)]


_WORKER = textwrap.dedent(
    """
    import os, sys, time
    import pyarrow as pa
    import raylake
    from raylake.errors import CommitConflictError

    uri, role, worker, rounds, go = sys.argv[1:6]
    worker, rounds = int(worker), int(rounds)
    tbl = raylake.open_table(uri)
    while not os.path.exists(go):  # start together, so the commits really race
        time.sleep(0.002)
    for r in range(rounds):
        if role == "compact":
            try:
                tbl.compact(full=True)
            except CommitConflictError:
                pass
            continue
        first = (worker * rounds + r) * 10
        ids = list(range(first, first + 10))
        tbl.write(pa.table({"id": ids, "dt": ["d%d" % (r % 2)] * 10,
                            "v": [float(i) for i in ids]}))
        while True:  # its own odd rows: a lost race runs the delete again
            try:
                odd = ", ".join(str(i) for i in ids if i % 2)
                tbl.delete(f"id in ({odd})")
                break
            except CommitConflictError:
                continue
    """
)


def test_processes_delete_while_others_append_and_compact(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["dt"])
    go = tmp_path / "go"
    roles = [("write", 0), ("write", 1), ("compact", 2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, tbl.uri, role, str(w), "4", str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for role, w in roles
    ]
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    ids = sorted(tbl.refresh().to_arrow().column("id").to_pylist())
    assert ids == [i for i in range(80) if i % 2 == 0]
    assert data_files_on_disk(tbl) >= live_paths(tbl)
