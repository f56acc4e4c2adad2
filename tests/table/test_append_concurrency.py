"""Concurrent writers: several processes (and threads) commit to one table at the same time.

Afterwards every row is present exactly once and the snapshot chain is intact:
ids 1..N without gaps, each the child of the one before, row counts adding up.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("worker", pa.int32())])

_WRITER = textwrap.dedent(
    """
    import os, sys, time
    import pyarrow as pa
    import raylake

    uri, worker, commits, rows, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    tbl = raylake.open_table(uri)
    while not os.path.exists(go):  # start together, so the commits really race
        time.sleep(0.002)
    for c in range(commits):
        start = (worker * commits + c) * rows
        data = pa.table({
            "id": pa.array(range(start, start + rows), pa.int64()),
            "dt": ["p%d" % worker] * rows,
            "worker": pa.array([worker] * rows, pa.int32()),
        })
        if worker == 0:  # worker 0 keeps replacing its own partition; the others append
            tbl.write(data, mode="overwrite", overwrite_filter="dt = 'p0'")
        else:
            tbl.write(data)
    print("done")
    """
)


def check_chain(tbl: Table, commits: int) -> None:
    snaps = tbl.snapshots()
    assert [s.id for s in snaps] == list(range(1, commits + 1))
    assert [s.parent_id for s in snaps] == [None, *range(1, commits)]
    total = 0
    for snap in snaps:
        total += snap.delta_record_count
        assert snap.total_record_count == total
        assert tbl.count(snapshot_id=snap.id) == total
    assert [s.time_millis for s in snaps] == sorted(s.time_millis for s in snaps)


def test_processes_append_concurrently(tmp_path: Path) -> None:
    workers, commits, rows = 4, 5, 25
    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, partition_by=["dt"], options={"manifest.merge-min-count": 6}
    )
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, tbl.uri, str(w), str(commits), str(rows), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    go.touch()
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        assert out.strip() == "done"

    check_chain(tbl, workers * commits)
    result = tbl.to_arrow()
    counts = Counter(result.column("id").to_pylist())
    appended = {
        i for w in range(1, workers) for i in range(w * commits * rows, (w + 1) * commits * rows)
    }
    # Worker 0 overwrote its partition on every commit: only its last batch is left.
    last_overwrite = set(range((commits - 1) * rows, commits * rows))
    assert set(counts) == appended | last_overwrite
    assert set(counts.values()) == {1}
    kinds = Counter(s.commit_kind for s in tbl.snapshots())
    assert kinds == {"APPEND": (workers - 1) * commits, "OVERWRITE": commits}
    assert len({s.commit_user for s in tbl.snapshots()}) == workers * commits


@pytest.mark.parametrize("storage", ["local", "memory"])
def test_threads_append_concurrently(tmp_path: Path, storage: str) -> None:
    uri = str(tmp_path / "t") if storage == "local" else f"memory://{uuid.uuid4().hex}/t"
    tbl = raylake.create_table(uri, SCHEMA)
    threads, commits, rows = 4, 6, 5
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        own = raylake.open_table(uri)
        barrier.wait()
        try:
            for c in range(commits):
                start = (worker * commits + c) * rows
                own.write(
                    pa.table(
                        {
                            "id": range(start, start + rows),
                            "dt": ["x"] * rows,
                            "worker": [worker] * rows,
                        },
                        schema=SCHEMA,
                    )
                )
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=write, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    check_chain(tbl, threads * commits)
    ids = tbl.to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(threads * commits * rows))
