"""Local data files stay mapped between reads (raylake/io/mapped.py)."""

from __future__ import annotations

import os
import pickle
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import raylake
from raylake.io import FileIO
from raylake.io.mapped import SWEEP_SECONDS, MappedFiles, MappedLocalFiles, mapped_files
from raylake.table import clear_caches


def _mapped_here(path: str) -> bool:
    """Whether this process maps ``path`` (Linux lists every map in /proc/self/maps, a
    deleted file's with " (deleted)" after its path)."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return any(line.removesuffix(" (deleted)").endswith(path) for line in lines)


needs_proc_maps = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="Linux only")


def _data_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.parquet") if "data" in p.parts)


def test_a_second_read_finds_the_files_mapped(tmp_path: Path) -> None:
    clear_caches()
    t = raylake.create_table(str(tmp_path / "t"), pa.schema([("x", pa.int64())]))
    t.write(pa.table({"x": list(range(100))}))
    t.write(pa.table({"x": list(range(100, 150))}))
    files = _data_files(tmp_path / "t")
    assert t.to_arrow().num_rows == 150
    assert sorted(p for p in mapped_files.paths() if p in files) == files
    first = {p: mapped_files.buffer(p) for p in files}
    assert t.to_arrow().num_rows == 150
    # The same maps serve the next read: nothing was mapped again.
    assert all(mapped_files.buffer(p) is first[p] for p in files)


def test_a_path_that_names_another_file_is_mapped_again(tmp_path: Path) -> None:
    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    fs = pafs.PyFileSystem(MappedLocalFiles())
    assert pq.read_table(path, filesystem=fs).column("x").to_pylist() == [1, 2, 3]
    os.remove(path)
    pq.write_table(pa.table({"x": [7, 8, 9, 10]}), path)
    assert pq.read_table(path, filesystem=fs).column("x").to_pylist() == [7, 8, 9, 10]


@needs_proc_maps
def test_files_deleted_by_maintenance_are_unmapped(tmp_path: Path) -> None:
    """A deleted file keeps its disk space while mapped: raylake unmaps what it deletes."""
    clear_caches()
    t = raylake.create_table(str(tmp_path / "t"), pa.schema([("x", pa.int64())]))
    t.write(pa.table({"x": list(range(100))}))
    old = _data_files(tmp_path / "t")
    assert t.to_arrow().num_rows == 100
    assert all(_mapped_here(p) for p in old)
    t.write(pa.table({"x": list(range(5))}), mode="overwrite")
    t.write(pa.table({"x": list(range(5))}))  # the overwrite's delta expires too
    assert len(t.expire_snapshots(older_than=timedelta(0), retain_last=1).deleted_data_files)
    assert not any(Path(p).exists() for p in old)
    assert not any(_mapped_here(p) for p in old)
    assert t.to_arrow().num_rows == 10


@needs_proc_maps
def test_files_another_process_deletes_are_unmapped_by_the_sweep(tmp_path: Path) -> None:
    """Another process (a maintenance job beside a training job) deletes files this one
    keeps mapped: their disk space waits for the maps, which the sweep lets go."""
    clear_caches()
    t = raylake.create_table(str(tmp_path / "t"), pa.schema([("x", pa.int64())]))
    t.write(pa.table({"x": list(range(100))}))
    t.write(pa.table({"x": list(range(100, 120))}))
    assert t.to_arrow().num_rows == 120
    files = _data_files(tmp_path / "t")
    assert len(files) == 2 and all(_mapped_here(p) for p in files)
    os.remove(files[0])  # not through raylake: nothing here hears of it
    assert _mapped_here(files[0])
    assert mapped_files.sweep() == [files[0]]
    assert not _mapped_here(files[0]) and _mapped_here(files[1])


def test_a_read_sweeps_once_the_interval_has_passed(tmp_path: Path) -> None:
    now = [0.0]
    maps = MappedFiles(budget=1 << 20, clock=lambda: now[0])
    kept, deleted, rewritten = (str(tmp_path / name) for name in ("kept", "deleted", "rewritten"))
    for path in (kept, deleted, rewritten):
        Path(path).write_bytes(bytes(100))
        assert maps.buffer(path) is not None
    os.remove(deleted)
    Path(rewritten).write_bytes(bytes(200))
    now[0] = SWEEP_SECONDS - 0.5
    maps.buffer(kept)
    assert len(maps) == 3  # not yet
    now[0] = SWEEP_SECONDS
    maps.buffer(kept)
    assert maps.paths() == [kept]
    assert maps.buffer(rewritten) is not None and maps.mapped_bytes == 300


def test_reading_a_deleted_file_unmaps_it(tmp_path: Path) -> None:
    maps = MappedFiles(budget=1 << 20)
    path = str(tmp_path / "f")
    Path(path).write_bytes(bytes(100))
    assert maps.buffer(path) is not None
    os.remove(path)
    with pytest.raises(FileNotFoundError):
        maps.buffer(path)
    assert len(maps) == 0


@needs_proc_maps
def test_clear_caches_unmaps_every_file(tmp_path: Path) -> None:
    t = raylake.create_table(str(tmp_path / "t"), pa.schema([("x", pa.int64())]))
    t.write(pa.table({"x": list(range(100))}))
    t.to_arrow()
    files = _data_files(tmp_path / "t")
    assert files and all(_mapped_here(p) for p in files)
    clear_caches()
    assert len(mapped_files) == 0
    assert not any(_mapped_here(p) for p in files)


def test_maps_are_bounded_by_their_bytes(tmp_path: Path) -> None:
    paths = []
    for i in range(4):
        path = tmp_path / f"f{i}"
        path.write_bytes(bytes(1000))
        paths.append(str(path))
    maps = MappedFiles(budget=2500)
    for p in paths:
        assert maps.buffer(p) is not None
    assert maps.paths() == paths[2:] and maps.mapped_bytes == 2000
    maps.forget(paths[3])
    assert maps.paths() == [paths[2]]


def test_an_empty_file_is_read_without_a_map(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert MappedFiles(budget=1 << 20).buffer(str(path)) is None
    with pafs.PyFileSystem(MappedLocalFiles()).open_input_file(str(path)) as f:
        assert f.read() == b""


def test_the_filesystem_pickles_and_writes(tmp_path: Path) -> None:
    fs = pickle.loads(pickle.dumps(FileIO(str(tmp_path / "t")).arrow_filesystem()))
    assert isinstance(fs.handler, MappedLocalFiles)
    fs.create_dir(str(tmp_path / "t" / "d"))
    with fs.open_output_stream(str(tmp_path / "t" / "d" / "f")) as out:
        out.write(b"abc")
    with fs.open_input_file(str(tmp_path / "t" / "d" / "f")) as f:
        assert f.read() == b"abc"
    # Written again (a path raylake never reuses for data, but others may): read anew.
    with fs.open_output_stream(str(tmp_path / "t" / "d" / "f")) as out:
        out.write(b"abcdef")
    with fs.open_input_file(str(tmp_path / "t" / "d" / "f")) as f:
        assert f.read() == b"abcdef"
    fs.delete_file(str(tmp_path / "t" / "d" / "f"))
    assert fs.get_file_info(str(tmp_path / "t" / "d" / "f")).type == pafs.FileType.NotFound


def test_a_scan_of_local_files_never_calls_back_into_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow's scan threads read local files from fragments over their maps: a call
    into the Python filesystem from one of them, while the interpreter exits, hung the
    process or aborted it."""
    clear_caches()
    t = raylake.create_table(
        str(tmp_path / "t"), pa.schema([("x", pa.int64()), ("p", pa.int64())]), partition_by=["p"]
    )
    t.write(pa.table({"x": list(range(64)), "p": [i % 8 for i in range(64)]}))
    calls: list[str] = []
    original = MappedLocalFiles.open_input_file

    def counted(self: MappedLocalFiles, path: str) -> pa.NativeFile:
        calls.append(path)
        return original(self, path)

    monkeypatch.setattr(MappedLocalFiles, "open_input_file", counted)
    assert sorted(t.to_arrow().column("x").to_pylist()) == list(range(64))
    assert sum(b.num_rows for b in t.to_batches()) == 64
    assert calls == []


def test_a_process_that_stops_reading_early_exits(tmp_path: Path) -> None:
    """The first batch of a table of many files, then the end of the script: the scan's
    read-ahead is still running as the interpreter exits."""
    import subprocess
    import sys

    t = raylake.create_table(
        str(tmp_path / "t"), pa.schema([("x", pa.int64()), ("p", pa.int64())]), partition_by=["p"]
    )
    t.write(pa.table({"x": list(range(32 * 500)), "p": [i % 32 for i in range(32 * 500)]}))
    script = (
        "import sys, raylake\n"
        "print(next(iter(raylake.open_table(sys.argv[1]).to_batches())).num_rows)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, t.uri], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 0
