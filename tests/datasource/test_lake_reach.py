"""Tables the processes of a cluster reach (docs/ray-data.md, "Tables a cluster reaches"):
a memory:// table is refused on the driver by every entry point whose work runs in Ray
processes, and a read or write task that does not find the table the driver planned for
(a local path on a disk its machine does not mount) raises TableNotVisibleError naming
it, not the FileNotFoundError of the first file it opens."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")

import raylake  # noqa: E402
from raylake import LakeDatasink, LakeDatasource, StreamingJob  # noqa: E402
from raylake.errors import InvalidArgumentError, TableNotVisibleError  # noqa: E402
from raylake.streaming import read_lake_stream  # noqa: E402

pytestmark = pytest.mark.ray

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "x": [1.0, 2.0, 3.0]})
MEMORY = "memory://raylake-reach/t"


def _identity(rows: pa.Table) -> pa.Table:
    return rows


MEMORY_ENTRY_POINTS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "read_lake": ("uri", lambda mem, _: raylake.read_lake(mem)),
    "LakeDatasource": ("uri", lambda mem, _: LakeDatasource(mem)),
    "write_lake": ("uri", lambda mem, _: raylake.write_lake(ray.data.from_arrow(ROWS), mem)),
    "LakeDatasink": ("uri", lambda mem, _: LakeDatasink(mem)),
    "merge_lake": ("uri", lambda mem, _: raylake.merge_lake(ray.data.from_arrow(ROWS), mem, "id")),
    "read_lake_stream": ("uri", lambda mem, _: read_lake_stream(mem, consumer_id="c")),
    "StreamingJob": ("uri", lambda mem, _: StreamingJob(mem, _identity, consumer_id="c")),
    "StreamingJob-sink": (
        "sink_uri",
        lambda mem, local: StreamingJob(local, _identity, consumer_id="c", sink_uri=mem),
    ),
}


@pytest.mark.parametrize("entry", sorted(MEMORY_ENTRY_POINTS))
def test_a_memory_table_is_refused_where_ray_processes_do_the_work(
    tmp_path: Path, entry: str
) -> None:
    raylake.from_pandas(ROWS.to_pandas(), MEMORY)
    local = str(tmp_path / "local")
    raylake.from_pandas(ROWS.to_pandas(), local)
    name, call = MEMORY_ENTRY_POINTS[entry]
    try:
        with pytest.raises(InvalidArgumentError, match="memory:// table lives only") as info:
            call(MEMORY, local)
        assert info.value.name == name
        assert len(raylake.open_table(MEMORY).snapshots()) == 1  # nothing written
    finally:
        raylake.open_table(MEMORY).file_io.fs.rm("/raylake-reach", recursive=True)


def test_a_read_task_that_does_not_find_the_table_names_it(
    ray_cluster: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    raylake.from_pandas(ROWS.to_pandas(), uri)
    ds = raylake.read_lake(uri)  # planned on the driver, with the table there
    shutil.move(uri, tmp_path / "elsewhere")  # as a worker's machine sees the path
    with pytest.raises(TableNotVisibleError, match="not there for process") as info:
        ds.take_all()
    assert info.value.uri == uri


def test_a_write_task_that_does_not_find_the_table_writes_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    raylake.from_pandas(ROWS.to_pandas(), uri)
    sink = LakeDatasink(uri)
    sink.on_write_start(ROWS.schema)  # on the driver, with the table there
    shutil.move(uri, tmp_path / "elsewhere")
    with pytest.raises(TableNotVisibleError, match="its path is on a disk"):
        sink.write([ROWS], SimpleNamespace(task_idx=0))  # type: ignore[arg-type]
    assert not Path(uri).exists()  # no file of the task's own, where the driver won't look


def test_a_merge_task_that_does_not_find_the_table_names_it(
    ray_cluster: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    raylake.create_table(uri, ROWS.schema, primary_key=["id"]).write(ROWS)
    seen = tmp_path / "schema-known"

    def move_table(rows: pa.Table) -> pa.Table:
        # First run: merge_lake's ds.schema(). The second, in execute(), comes after the
        # driver planned the merge and before the bucket tasks: the table leaves as a
        # worker's machine sees it.
        if seen.exists():
            shutil.move(uri, tmp_path / "elsewhere")
        seen.touch()
        return rows

    source = ray.data.from_arrow(ROWS).map_batches(move_table, batch_format="pyarrow")
    merge = raylake.merge_lake(source, uri, "id").when_matched_update().when_not_matched_insert()
    with pytest.raises(TableNotVisibleError, match="not there for process"):
        merge.execute()
    assert not Path(uri).exists()  # no file of a task's own, where the driver won't look
