"""Compaction of append tables: fewer files, the same rows in the same order, and
changes and streams across it that give every row once."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.errors import CommitConflictError
from raylake.table import Table, append_compaction
from raylake.table.maintenance import is_raylake_file

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def rows(ids: range, part: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": [part] * len(ids)})


def table_of(path: Path, writes: int = 5, **options: str) -> Table:
    tbl = raylake.create_table(str(path), SCHEMA, partition_by=["p"], options=options)
    for i in range(writes):
        tbl.write(rows(range(i * 10, i * 10 + 10), "a" if i % 2 == 0 else "b"))
    return tbl


def live_files(tbl: Table) -> list[str]:
    return [f.path for split in tbl.scan().plan() for f in split.files]


def test_compaction_keeps_every_row_in_its_order_with_fewer_files(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t")
    before = tbl.to_arrow()
    snap = tbl.compact()
    assert snap is not None and snap.commit_kind == "COMPACT"
    assert tbl.to_arrow().equals(before)
    assert len(live_files(tbl)) == 2  # one per partition, from 3 and 2
    assert all(
        is_raylake_file(path, [tbl.schema.field(k) for k in tbl.table_schema.partition_keys])
        for path in live_files(tbl)
    )  # orphans if left
    assert tbl.to_arrow(snapshot_id=snap.id - 1).equals(before)  # time travel
    assert tbl.compact() is None
    assert tbl.count() == 50


def test_a_large_file_splits_the_runs_around_it(tmp_path: Path) -> None:
    # A file of 1,000 rows is over the 4 KB target; the small ones around it are not.
    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, partition_by=["p"], options={"write.target-file-size": "4096"}
    )
    for ids in (range(0, 3), range(3, 6), range(6, 1006), range(1006, 1009), range(1009, 1012)):
        tbl.write(rows(ids))
    before = tbl.to_arrow()
    large = [f for f in live_files(tbl)][2]
    assert tbl.compact() is not None
    assert tbl.to_arrow().equals(before)
    files = live_files(tbl)
    assert len(files) == 3 and files[1] == large  # small runs before and after it
    assert tbl.compact(full=True) is not None  # full: the partition packed whole
    assert tbl.to_arrow().equals(before)
    assert large not in live_files(tbl)


def test_files_of_older_schemas_are_rewritten_under_the_latest(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t", writes=2)
    with tbl.update_schema() as update:
        update.add_column("score", pa.float64())
        update.rename_column("id", "key")
    tbl.write(pa.table({"key": [100], "p": ["a"], "score": [0.5]}))
    before = tbl.to_arrow()
    assert tbl.compact(full=True) is not None
    assert tbl.to_arrow().equals(before)
    assert tbl.to_arrow(filter="key >= 100").column("score").to_pylist() == [0.5]


def test_changes_across_a_compaction_give_each_row_once(tmp_path: Path) -> None:
    tbl = table_of(tmp_path / "t", writes=4)  # snapshots 1-4: 40 rows
    tbl.compact()  # 5: compacts files from before and after snapshot 2
    tbl.write(rows(range(40, 45)))  # 6
    changes = tbl.changes(2, include_row_kind=True).to_arrow()
    assert sorted(changes.column("id").to_pylist()) == list(range(20, 45))
    assert set(changes.column("_rl_kind").to_pylist()) == {"+I"}
    assert tbl.changes(4, 5).to_arrow().num_rows == 0  # the compaction alone: nothing
    # Then an overwrite of a compacted partition: its rows from before the range go (-D).
    tbl.write(rows(range(50, 52)), mode="overwrite", overwrite_filter="p = 'a'")  # 7
    changed = tbl.changes(2, include_row_kind=True).to_arrow().to_pylist()
    removed = sorted(r["id"] for r in changed if r["_rl_kind"] == "-D")
    added = sorted(r["id"] for r in changed if r["_rl_kind"] == "+I")
    assert removed == list(range(0, 10))  # partition a before snapshot 2
    assert added == [*range(30, 40), 50, 51]  # b's new rows, and the overwrite's


@pytest.mark.parametrize("catch_up_after", [None, 1])
def test_a_stream_across_a_compaction_delivers_each_row_once(
    tmp_path: Path, catch_up_after: int | None
) -> None:
    tbl = table_of(tmp_path / "t", writes=2)
    reader = tbl.stream(start="latest", catch_up_after=catch_up_after)
    delivered = [r for plan in iter(reader.poll, None) for r in plan.to_arrow().to_pylist()]
    for i in range(2, 4):
        tbl.write(rows(range(i * 10, i * 10 + 10)))
    tbl.compact()
    tbl.write(rows(range(40, 42), "b"))
    delivered += [r for plan in iter(reader.poll, None) for r in plan.to_arrow().to_pylist()]
    assert sorted(r["id"] for r in delivered) == list(range(42))


def test_a_run_that_fails_leaves_no_file_of_the_others(tmp_path: Path) -> None:
    """Runs are rewritten several at once: where one fails (here a file damaged under
    it), the new files of every other run are deleted and nothing is committed."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    for i in range(12):
        tbl.write(rows(range(i * 10, i * 10 + 10), "abcd"[i % 4]))
    lost = next(p for p in live_files(tbl) if "p=c" in p)
    (tmp_path / "t" / lost).unlink()
    on_disk = {p.name for p in (tmp_path / "t" / "data").rglob("*.parquet")}
    with pytest.raises(FileNotFoundError):
        tbl.compact()
    assert {p.name for p in (tmp_path / "t" / "data").rglob("*.parquet")} == on_disk
    assert len(tbl.snapshots()) == 12


def test_files_replaced_and_expired_while_compacting_are_a_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process overwrites the table and expires the old files before the
    # compaction reads them: it raised a bare FileNotFoundError.
    tbl = table_of(tmp_path / "t")
    rewrite = append_compaction._rewrite
    # Runs are rewritten on several threads: the first to start replaces and expires
    # the files; the others wait for it, so that every run reads after it.
    first = threading.Lock()
    fired: list[bool] = []

    def replaced_then_read(*args: Any) -> Any:
        with first:
            if not fired:
                fired.append(True)
                other = raylake.open_table(tbl.uri)
                for i in (1, 2):  # the second overwrite lets expiration delete the first's
                    other.write(rows(range(100, 100 + i), "a"), mode="overwrite")
                assert other.expire_snapshots(retain_last=1).deleted_data_files
        return rewrite(*args)

    monkeypatch.setattr(append_compaction, "_rewrite", replaced_then_read)
    with pytest.raises(CommitConflictError, match="replaced by a concurrent commit"):
        tbl.compact(full=True)
    assert tbl.to_arrow().column("id").to_pylist() == [100, 101]
    assert tbl.remove_orphan_files(older_than=timedelta(0), dry_run=True).paths == ()
