"""Crashes and failures between writing data, writing manifests and creating the snapshot.

A child process dies (``os._exit``) at a chosen step, injected by patching a library
function (pyarrow's ParquetWriter) or FileIO's raw file operations; the parent then
checks that the table is unchanged and readable and that a later write succeeds. The
same steps raising in-process must propagate the error and delete the data files.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raylake
from raylake.format.snapshot import SnapshotManager
from raylake.io import FileIO
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string())])
CRASH_EXIT = 17

_CHILD = textwrap.dedent(
    """
    import os, sys
    import pyarrow as pa
    import pyarrow.parquet as pq
    import raylake
    from raylake.io import FileIO
    from raylake.format.snapshot import SnapshotManager

    uri, point, mode = sys.argv[1:4]
    calls = {"n": 0}

    def die(*args, **kwargs):
        os._exit(%(exit)d)

    def after(original):
        def wrapper(*args, **kwargs):
            result = original(*args, **kwargs)
            os._exit(%(exit)d)
        return wrapper

    if point == "inside-data-file":  # the first row group is written, the footer is not
        pq.ParquetWriter.write_table = after(pq.ParquetWriter.write_table)
    elif point == "after-data-files":  # every data file closed; the manifest not written
        FileIO.write_bytes = die
    elif point == "after-manifest":  # the delta manifest is complete on disk
        FileIO.write_bytes = after(FileIO.write_bytes)
    elif point == "before-snapshot":  # everything but the snapshot file
        original = FileIO.create_if_absent
        def create(self, rel, data, **kwargs):
            if rel.startswith("snapshot/"):
                os._exit(%(exit)d)
            return original(self, rel, data, **kwargs)
        FileIO.create_if_absent = create
    elif point == "after-snapshot":  # committed; the LATEST hint not yet updated
        SnapshotManager._write_hint = die
    else:
        raise SystemExit("unknown point " + point)

    tbl = raylake.open_table(uri)
    ids = pa.array(range(1000, 1100), pa.int64())
    data = pa.table({"id": ids, "dt": ["2024-01-01"] * 50 + ["2024-01-02"] * 50})
    if mode == "overwrite":
        tbl.write(data.slice(0, 50), mode="overwrite", overwrite_filter="dt = '2024-01-01'")
    else:
        tbl.write(data)
    sys.exit("the crash point was never reached")
    """
) % {"exit": CRASH_EXIT}

POINTS = ["inside-data-file", "after-data-files", "after-manifest", "before-snapshot"]


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "dt": [f"2024-01-0{1 + i % 2}" for i in ids]}, schema=SCHEMA)


@pytest.fixture
def tbl(tmp_path: Path) -> Table:
    # Small row groups, so a crash inside a data file leaves a truncated Parquet file.
    t = raylake.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        partition_by=["dt"],
        options={"write.row-group-rows": 10, "manifest.merge-min-count": 3},
    )
    t.write(rows(0, 20))
    t.write(rows(20, 20))
    return t


def crash_child(tbl: Table, point: str, mode: str = "append") -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, tbl.uri, point, mode],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == CRASH_EXIT, child.stderr


def state(tbl: Table) -> tuple[list[int], list[int]]:
    """Snapshot ids and sorted row ids, read by a fresh table object (no caches)."""
    fresh = raylake.open_table(tbl.uri)
    return [s.id for s in fresh.snapshots()], sorted(fresh.to_arrow().column("id").to_pylist())


def data_files_on_disk(tbl: Table) -> set[str]:
    return {rel for rel, _ in tbl.file_io.list_files("data") if rel.endswith(".parquet")}


def live_data_files(tbl: Table) -> set[str]:
    return {p for split in tbl.scan().plan() for p in split.paths}


@pytest.mark.parametrize("mode", ["append", "overwrite"])
@pytest.mark.parametrize("point", POINTS)
def test_crash_leaves_the_table_unchanged(tbl: Table, point: str, mode: str) -> None:
    before = state(tbl)
    manifests = set(tbl.file_io.list_names("manifest"))
    crash_child(tbl, point, mode)
    assert state(tbl) == before
    # The leftovers are orphans: on disk, but in no snapshot.
    assert data_files_on_disk(tbl) > live_data_files(tbl)
    new_manifests = set(tbl.file_io.list_names("manifest")) - manifests
    assert bool(new_manifests) == (point in ("after-manifest", "before-snapshot"))
    # A later writer commits on top, as the next snapshot.
    snap = tbl.write(rows(500, 4))
    assert snap.id == 3 and snap.parent_id == 2
    ids, rows_after = state(tbl)
    assert ids == [1, 2, 3]
    assert rows_after == sorted(before[1] + list(range(500, 504)))


def test_crash_inside_a_data_file_leaves_an_unreadable_orphan(tbl: Table) -> None:
    crash_child(tbl, "inside-data-file")
    orphans = data_files_on_disk(tbl) - live_data_files(tbl)
    assert len(orphans) == 1
    with pytest.raises(pa.ArrowInvalid):  # truncated: no Parquet footer
        pq.read_metadata(str(Path(tbl.uri) / orphans.pop()))
    assert tbl.count() == 40


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_crash_after_the_snapshot_file_is_a_commit(tbl: Table, mode: str) -> None:
    """The snapshot file is the commit point: the stale LATEST hint does not hide it."""
    crash_child(tbl, "after-snapshot", mode)
    assert SnapshotManager(tbl.file_io).read_hint() == 2
    ids, row_ids = state(tbl)
    assert ids == [1, 2, 3]
    expected = set(range(40)) | set(range(1000, 1100))
    if mode == "overwrite":
        expected = {i for i in range(40) if i % 2 == 1} | set(range(1000, 1050))
    assert row_ids == sorted(expected)
    assert tbl.write(rows(500, 1)).id == 4


# -- in-process failures -------------------------------------------------------------------


class InjectedFault(RuntimeError):
    pass


def _raise(*args: Any, **kwargs: Any) -> None:
    raise InjectedFault("injected")


def _nth_call_fails(original: Callable[..., Any], n: int) -> Callable[..., Any]:
    calls = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == n:
            raise InjectedFault(f"injected at call {n}")
        return original(*args, **kwargs)

    return wrapper


def _fail_snapshot_create(original: Callable[..., Any]) -> Callable[..., Any]:
    def create(self: FileIO, rel: str, data: bytes, **kwargs: Any) -> bool:
        if rel.startswith("snapshot/"):
            raise InjectedFault("injected at the snapshot file")
        return original(self, rel, data, **kwargs)

    return create


FAULTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "inside-data-file": lambda mp: mp.setattr(
        pq.ParquetWriter, "write_table", _nth_call_fails(pq.ParquetWriter.write_table, 2)
    ),
    "closing-data-file": lambda mp: mp.setattr(
        pq.ParquetWriter, "close", _nth_call_fails(pq.ParquetWriter.close, 2)
    ),
    "delta-manifest": lambda mp: mp.setattr(FileIO, "write_bytes", _raise),
    "merged-manifest": lambda mp: mp.setattr(
        FileIO, "write_bytes", _nth_call_fails(FileIO.write_bytes, 2)
    ),
    "snapshot-file": lambda mp: mp.setattr(
        FileIO, "create_if_absent", _fail_snapshot_create(FileIO.create_if_absent)
    ),
}


@pytest.mark.parametrize("mode", ["append", "overwrite"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_failure_propagates_and_cleans_up(
    tbl: Table, monkeypatch: pytest.MonkeyPatch, fault: str, mode: str
) -> None:
    assert len(tbl.latest_snapshot().base_manifests) == 2  # type: ignore[union-attr]
    before = state(tbl)  # the next commit makes three manifests, and merges them
    manifests = set(tbl.file_io.list_names("manifest"))
    FAULTS[fault](monkeypatch)
    data = rows(1000, 60)
    with pytest.raises(InjectedFault):
        if mode == "overwrite":
            tbl.write(data, mode="overwrite")
        else:
            tbl.write(data)
    monkeypatch.undo()
    assert state(tbl) == before
    assert data_files_on_disk(tbl) == live_data_files(tbl)
    assert set(tbl.file_io.list_names("manifest")) == manifests
    assert tbl.write(rows(500, 3)).id == 3
    assert len(tbl.latest_snapshot().base_manifests) == 1  # type: ignore[union-attr]
    assert state(tbl)[1] == sorted([*before[1], 500, 501, 502])


def test_a_failing_hint_does_not_fail_the_commit(
    tbl: Table, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Once the snapshot file exists the commit happened: its files must not be deleted."""
    monkeypatch.setattr(SnapshotManager, "_write_hint", _hint_fails(SnapshotManager._write_hint))
    snap = tbl.write(rows(500, 3))
    monkeypatch.undo()
    assert snap.id == 3
    assert "could not update snapshot/LATEST" in caplog.text
    assert tbl.count() == 43 and tbl.latest_snapshot() == snap
    assert data_files_on_disk(tbl) == live_data_files(tbl)


def _hint_fails(original: Callable[..., Any]) -> Callable[..., Any]:
    def write_hint(self: SnapshotManager, snapshot_id: int) -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(self.file_io, "write_bytes", _raise)
            original(self, snapshot_id)

    return write_hint


@pytest.mark.parametrize("primary_key", [(), ("id",)])
def test_writing_aborts_on_any_exception_and_keeps_files_otherwise(
    tmp_path: Path, primary_key: tuple[str, ...]
) -> None:
    """``writing(writer)``: the one write/abort sequence of every writer in raylake."""
    from raylake.table.writer import writing

    tbl = raylake.create_table(
        str(tmp_path / "t"), pa.schema([("id", pa.int64())]), primary_key=primary_key
    )
    data = pa.table({"id": list(range(100))})
    with pytest.raises(KeyboardInterrupt), writing(tbl.new_writer()) as writer:
        writer.write(data)
        writer.prepare_commit()  # files are on disk now
        raise KeyboardInterrupt
    assert not list((tmp_path / "t").rglob("*.parquet"))
    with writing(tbl.new_writer()) as writer:
        writer.write(data)
        messages = writer.prepare_commit()
    assert tbl.commit(messages) is not None and tbl.count() == 100
