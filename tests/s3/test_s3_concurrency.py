"""Several processes commit to one table on the S3 server at once (conditional create).

The same checks as on local files: every row exactly once, the snapshot chain
intact; for a primary-key table, the state a replay of the commits in snapshot
order gives.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.io import FileIO, atomic_create

SCHEMA = pa.schema([("id", pa.int64()), ("worker", pa.int32())])

_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    import pyarrow as pa
    import raylake

    uri, options, worker, commits, rows, go, pk = sys.argv[1:8]
    worker, commits, rows = int(worker), int(commits), int(rows)
    tbl = raylake.open_table(uri, storage_options=json.loads(options))
    while not os.path.exists(go):  # start together, so that the commits really race
        time.sleep(0.002)
    for c in range(commits):
        if pk == "pk":  # every worker upserts the shared keys 0..9 and keys of its own
            start = 1000 + (worker * commits + c) * rows
            ids = list(range(10)) + list(range(start, start + rows))
        else:
            start = (worker * commits + c) * rows
            ids = list(range(start, start + rows))
        data = pa.table({"id": pa.array(ids, pa.int64()),
                         "worker": pa.array([worker] * len(ids), pa.int32())})
        tbl.write(data, properties={"worker": str(worker)})
    print("done")
    """
)


def _command(uri: str, options: dict[str, Any], worker: int, commits: int, rows: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        _WRITER,
        uri,
        json.dumps(options),
        *map(str, (worker, commits, rows)),
    ]


def _race(
    uri: str,
    options: dict[str, Any],
    tmp_path: Path,
    workers: int,
    commits: int,
    rows: int,
    pk: str,
) -> None:
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [*_command(uri, options, w, commits, rows), str(go), pk],
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


def _check_chain(tbl: raylake.Table, commits: int) -> None:
    """Ids without gaps, each the child of the one before; ``commits`` data commits
    (automatic compactions may add COMPACT snapshots in between)."""
    snaps = tbl.snapshots()
    assert [s.id for s in snaps] == list(range(1, len(snaps) + 1))
    assert [s.parent_id for s in snaps] == [None, *range(1, len(snaps))]
    assert sum(s.commit_kind == "APPEND" for s in snaps) == commits


def test_processes_append_concurrently_on_s3(
    s3_bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    workers, commits, rows = 4, 4, 20
    uri = f"s3://{s3_bucket}/appends"
    tbl = raylake.create_table(
        uri, SCHEMA, options={"manifest.merge-min-count": 5}, storage_options=storage_options
    )
    _race(uri, storage_options, tmp_path, workers, commits, rows, "append")
    _check_chain(tbl, workers * commits)
    counts = Counter(tbl.to_arrow()["id"].to_pylist())
    assert set(counts) == set(range(workers * commits * rows))
    assert set(counts.values()) == {1}


def test_processes_upsert_concurrently_on_s3(
    s3_bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    workers, commits, rows = 3, 3, 10
    uri = f"s3://{s3_bucket}/upserts"
    tbl = raylake.create_table(
        uri, SCHEMA, primary_key=["id"], buckets=2, storage_options=storage_options
    )
    _race(uri, storage_options, tmp_path, workers, commits, rows, "pk")
    _check_chain(tbl, workers * commits)
    # The model: replay the commits in snapshot order; the last writer of a key wins.
    model: dict[int, int] = {}
    for snap in tbl.snapshots():
        if snap.commit_kind == "COMPACT":
            continue
        worker = int(snap.properties["worker"])
        model.update(dict.fromkeys(range(10), worker))
    own = {1000 + i for i in range(workers * commits * rows)}
    got = {r["id"]: r["worker"] for r in tbl.to_arrow().to_pylist()}
    assert set(got) == set(range(10)) | own
    assert {k: got[k] for k in range(10)} == model


def test_an_s3fs_that_overwrites_on_exclusive_create_is_refused(
    s3_bucket: str, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs before 2025.7.0, or with a botocore whose S3 model lacks IfNoneMatch,
    overwrites an object opened with mode "xb", so commits could be lost: there S3 counts
    as not atomic, and a commit is refused before any file is written, naming what to
    install. Simulated by a check that fails."""
    uri = f"s3://{s3_bucket}/older-s3fs"
    monkeypatch.setitem(
        atomic_create.ATOMIC_CREATE_NEEDS, "S3FileSystem", (lambda: False, "s3fs>=9999")
    )
    assert not FileIO(uri, storage_options=storage_options).atomic_create
    with pytest.raises(raylake.UnsafeCommitError, match=r"Install s3fs>=9999") as info:
        raylake.create_table(uri, SCHEMA, storage_options=storage_options)
    assert info.value.upgrade == "s3fs>=9999"
    assert not FileIO(uri, storage_options=storage_options).exists("schema")


def test_the_installed_s3fs_creates_exclusively(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    """What the release check stands for, on the S3 server: a second exclusive create of
    one key fails instead of overwriting it."""
    file_io = FileIO(f"s3://{s3_bucket}/exclusive", storage_options=storage_options)
    assert file_io.atomic_create and file_io.atomic_create_upgrade is None
    assert file_io.create_if_absent("s/1", b"first")
    other = FileIO(f"s3://{s3_bucket}/exclusive", storage_options=storage_options)
    assert not other.create_if_absent("s/1", b"second")
    assert other.read_bytes("s/1") == b"first"
