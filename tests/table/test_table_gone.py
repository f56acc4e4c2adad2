"""A Table whose directory was deleted, or deleted and created again as another table, by
someone else after it was opened: reads and writes say so, and nothing is written where
the table was (a directory without a schema is no table, and a snapshot of the old
columns in the new table would read as nulls)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitFailedError, SchemaError, TableNotFoundError

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.string())])
ROWS = pa.table({"id": [1, 2], "x": ["a", "b"]})


def _deleted(warehouse: Path) -> tuple[raylake.Table, Path]:
    root = warehouse / "t"
    tbl = raylake.create_table(str(root), SCHEMA)
    tbl.write(ROWS)
    shutil.rmtree(root)
    return tbl, root


def test_a_write_to_a_deleted_table_is_refused_and_leaves_nothing(warehouse: Path) -> None:
    tbl, root = _deleted(warehouse)
    with pytest.raises(TableNotFoundError):
        tbl.write(ROWS)
    with pytest.raises(TableNotFoundError):
        tbl.commit(tbl.new_writer().prepare_commit(), allow_empty=True)
    assert not root.exists()


def test_reads_of_a_deleted_table_raise_rather_than_return_no_rows(warehouse: Path) -> None:
    tbl, _ = _deleted(warehouse)
    for read in (tbl.to_arrow, tbl.count, tbl.snapshots, tbl.latest_snapshot):
        with pytest.raises(TableNotFoundError):
            read()
    with pytest.raises(TableNotFoundError):  # a stream from the start waited for ever
        list(tbl.stream(start="earliest").plans(timeout=0))


def test_an_empty_table_still_reads_as_empty(warehouse: Path) -> None:
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    assert tbl.to_arrow().num_rows == 0
    assert tbl.snapshots() == [] and tbl.latest_snapshot() is None
    assert list(tbl.stream(start="earliest").plans(timeout=0)) == []


def test_a_write_to_a_table_replaced_by_another_is_refused(warehouse: Path) -> None:
    root = warehouse / "t"
    old = raylake.create_table(str(root), SCHEMA)
    old.write(ROWS)
    shutil.rmtree(root)
    new = raylake.create_table(str(root), pa.schema([("q", pa.float64())]))
    new.write(pa.table({"q": [1.0]}))
    with pytest.raises(CommitFailedError, match="replaced after it was opened"):
        old.write(ROWS)
    assert raylake.open_table(str(root)).to_arrow() == pa.table({"q": [1.0]})
    assert len(list((root / "data" / "bucket-0").iterdir())) == 1


def test_reads_of_a_table_replaced_by_another_are_refused(warehouse: Path) -> None:
    """Opened before the table was dropped and created again with other columns, a Table
    read the new files under its old columns: rows of nulls. It says so instead."""
    root = warehouse / "t"
    old = raylake.create_table(str(root), SCHEMA)
    old.write(ROWS)
    assert old.to_arrow() == ROWS
    old.write(ROWS)
    assert old.count() == 4
    shutil.rmtree(root)
    new = raylake.create_table(str(root), pa.schema([("q", pa.float64())]))
    new.write(pa.table({"q": [1.0]}))
    reads = [
        old.to_arrow,
        old.count,
        lambda: old.changes(0, 1).to_arrow(),
        lambda: list(old.stream(start="earliest").plans(timeout=0)),
    ]
    for read in reads:
        with pytest.raises(SchemaError, match="dropped and created again"):
            read()
    with pytest.raises(SchemaError, match="dropped and created again"):
        old.stream(consumer_id="c", start="earliest")  # refused before it registers
    assert new.consumers() == []
    assert old.refresh().to_arrow() == pa.table({"q": [1.0]})


def test_a_table_that_grows_reads_its_schema_file_once(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each snapshot made on one already read is of the same table: no schema read."""
    from raylake.table import same_table

    looks: list[int] = []
    stored = same_table.stored_schema
    monkeypatch.setattr(same_table, "stored_schema", lambda *a: looks.append(1) or stored(*a))
    tbl = raylake.create_table(str(warehouse / "t"), SCHEMA)
    for _ in range(3):
        tbl.write(ROWS)
        tbl.to_arrow()
    assert len(looks) == 1
