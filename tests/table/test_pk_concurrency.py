"""Concurrent writers: processes racing to commit, and Ray tasks writing and reading buckets."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import raylake

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("w", pa.int64())]
)
WRITERS, ROUNDS, KEYS = 3, 4, 40

WRITER_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np, pyarrow as pa, raylake
    uri, writer, rounds, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    tbl = raylake.open_table(uri)
    for r in range(rounds):
        rng = np.random.default_rng(1000 * writer + r)
        ids = rng.integers(0, keys, 25)  # duplicates: the last occurrence wins
        batch = pa.table({"id": ids, "v": rng.integers(0, 100, 25), "w": np.full(25, writer)})
        tbl.write(batch, properties={"writer": str(writer), "round": str(r)})
    # pyarrow sometimes aborts at interpreter exit ("terminate called without an active
    # exception", apache/arrow#34314); collecting while Arrow is alive made it go away here.
    import gc; gc.collect()
    """
)


def batch_of(writer: int, r: int) -> pa.Table:
    rng = np.random.default_rng(1000 * writer + r)
    ids = rng.integers(0, KEYS, 25)
    return pa.table({"id": ids, "v": rng.integers(0, 100, 25), "w": np.full(25, writer)})


@pytest.mark.parametrize("engine", ["deduplicate", "aggregation"])
def test_racing_processes_end_in_the_commit_order_state(tmp_path: Path, engine: str) -> None:
    options = {"merge-engine": engine, "compaction.max-overlapping-files": 2}
    if engine == "aggregation":
        options["fields.v.aggregate-function"] = "sum"
    uri = str(tmp_path / "t")
    tbl = raylake.create_table(uri, SCHEMA, primary_key=["id"], buckets=3, options=options)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER_SCRIPT, uri, str(w), str(ROUNDS), str(KEYS)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WRITERS)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err

    model: dict[int, dict[str, Any]] = {}
    appends = [s for s in tbl.snapshots() if s.commit_kind == "APPEND"]
    assert len(appends) == WRITERS * ROUNDS
    for snap in appends:  # the commit order decides, whichever process wrote
        batch = batch_of(int(snap.properties["writer"]), int(snap.properties["round"]))
        for row in batch.to_pylist():
            old = model.get(row["id"])
            if engine == "aggregation" and old is not None:
                row = {**row, "v": old["v"] + row["v"]}
            model[row["id"]] = row
    actual = sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert actual == [model[k] for k in sorted(model)]


@pytest.mark.ray
def test_ray_tasks_write_and_merge_their_own_buckets(tmp_path: Path, ray_cluster: Any) -> None:
    ray = ray_cluster

    # Nested, so that Ray pickles them by value (workers cannot import test modules).
    def write_task(uri: str, rows: dict[str, list[int]]) -> list[Any]:
        writer = raylake.open_table(uri).new_writer()
        writer.write(pa.table(rows, schema=SCHEMA))
        return writer.prepare_commit()

    def read_task(uri: str, split: Any) -> pa.Table:
        tbl = raylake.open_table(uri)
        return pa.Table.from_batches(list(tbl.read_split(split)), schema=tbl.schema)

    uri = str(tmp_path / "t")
    tbl = raylake.create_table(uri, SCHEMA, primary_key=["id"], buckets=4)
    write = ray.remote(write_task)
    early = {"id": list(range(100)), "v": [1] * 100, "w": [0] * 100}
    late = {"id": list(range(50, 150)), "v": [2] * 100, "w": [1] * 100}
    messages = ray.get([write.remote(uri, early), write.remote(uri, late)])
    # One commit for both tasks: within a commit, a later message wins.
    tbl.commit([m for ms in messages for m in ms], mode="upsert")
    splits = tbl.scan().plan()
    assert len({(s.partition, s.bucket) for s in splits}) == len(splits) == 4
    read = ray.remote(read_task)
    parts = ray.get([read.remote(uri, s) for s in splits])
    rows = sorted((r for p in parts for r in p.to_pylist()), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(150))
    assert all(r["v"] == (2 if r["id"] >= 50 else 1) for r in rows)
    assert rows == sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("what", ["keys", "filter"])
def test_a_delete_whose_snapshot_is_expired_while_it_reads_reads_again(
    tmp_path: Path, what: str, monkeypatch: Any
) -> None:
    """Another process overwrites the table twice and expires the snapshot the delete
    started from before it reads it (was: SnapshotNotFoundError, nothing deleted)."""
    from raylake.table.pk import delete

    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=["id"], buckets=1)
    tbl.write(pa.table({"id": [1, 2, 3], "v": [0, 0, 0], "w": [0, 0, 0]}))
    read = delete._current_rows
    meanwhile: list[int] = []

    def replaced_then_read(*args: Any) -> Any:
        if not meanwhile:
            other = raylake.open_table(tbl.uri)
            for v in (8, 9):
                other.write(pa.table({"id": [1, v], "v": [v, v], "w": [1, 1]}), mode="overwrite")
            meanwhile.append(len(other.expire_snapshots(retain_last=1).expired_snapshot_ids))
        return read(*args)

    monkeypatch.setattr(delete, "_current_rows", replaced_then_read)
    tbl.delete({"id": [1]} if what == "keys" else "v >= 0")
    assert meanwhile[0] > 0
    expected = [{"id": 9, "v": 9, "w": 1}] if what == "keys" else []
    assert tbl.to_arrow().sort_by("id").to_pylist() == expected
