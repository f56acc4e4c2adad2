"""Scans of tables on stores pyarrow reads through Python (memory://, fsspec stores,
S3 through s3fs): pyarrow's own threads never call the Python filesystem, so a scan
stopped early leaves nothing running as the interpreter exits (one entering it then
hung the exit or aborted it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pytest

import raylake
from raylake.testing import localfaults
from raylake.testing.faults import FaultPlan

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int64())])


def _fill(tbl: raylake.Table, files: int) -> None:
    for i in range(files):
        tbl.write(pa.table({"id": pa.array(range(i * 50, i * 50 + 50)), "p": [i % 4] * 50}))


class _Watched:
    """An fsspec file whose calls are counted while they run."""

    def __init__(self, file: Any, calls: dict[str, int]) -> None:
        self._file = file
        self._calls = calls

    def __enter__(self) -> _Watched:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._file, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls["in flight"] += 1
            try:
                return attr(*args, **kwargs)
            finally:
                self._calls["in flight"] -= 1
                self._calls["done"] += 1

        return counted


@pytest.mark.parametrize("store", ["memory", "faulty"])
@pytest.mark.parametrize("kind", ["append", "primary key"])
def test_a_scan_stopped_early_leaves_no_read_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str, kind: str
) -> None:
    if store == "memory":
        uri, options = f"memory://{tmp_path.name}/t", None
    else:
        localfaults.register()
        uri = f"faulty://{tmp_path / 't'}"
        options = {"fault_plan": FaultPlan((), seed=1).to_json()}
    pk: dict[str, Any] = {"primary_key": ["id", "p"], "buckets": 2} if kind != "append" else {}
    tbl = raylake.create_table(uri, SCHEMA, storage_options=options, partition_by=["p"], **pk)
    _fill(tbl, 16)
    calls = {"in flight": 0, "done": 0}

    opened = fsspec.AbstractFileSystem.open

    def watched(self: fsspec.AbstractFileSystem, path: str, mode: str = "rb", **kw: Any) -> Any:
        file = opened(self, path, mode, **kw)
        return _Watched(file, calls) if mode == "rb" else file

    monkeypatch.setattr(fsspec.AbstractFileSystem, "open", watched)
    reader = raylake.open_table(uri, storage_options=options)
    assert sorted(reader.to_arrow().column("id").to_pylist()) == list(range(800))
    for _ in range(3):
        batches = reader.to_batches()
        assert next(batches).num_rows > 0
        batches.close()
        assert calls["in flight"] == 0
    assert calls["done"] > 0


@pytest.mark.parametrize("kind", ["append", "primary key"])
def test_a_process_that_stops_reading_a_memory_table_early_exits(kind: str) -> None:
    """The first batch of a table of many files, then the end of the script."""
    pk = "primary_key=['id'], buckets=4, " if kind != "append" else ""
    script = (
        "import pyarrow as pa, raylake\n"
        "s = pa.schema([('id', pa.int64()), ('v', pa.string())])\n"
        f"t = raylake.create_table('memory://exits/t', s, {pk})\n"
        "for i in range(16):\n"
        "    t.write(pa.table({'id': range(i * 500, i * 500 + 500), 'v': ['x' * 40] * 500}))\n"
        "r = raylake.open_table('memory://exits/t')\n"
        "print(min(next(iter(r.to_batches())).num_rows for _ in range(3)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 0
