"""Four processes commit at once to a table on an S3 server that faults: 10% of all
requests (503 SlowDown, 500 InternalError, resets, slow answers, requests carried out
whose answer is lost) and 30% of the conditional creates of snapshot files carried out
and then answered 500. Every commit succeeds with the default retry bound, every
acknowledged commit's rows are there exactly once, and every snapshot reads. Then a
read and a loader epoch at 5% faults return every row exactly once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.testing.faults import FaultPlan
from raylake.testing.s3server import LocalS3Server
from raylake.testing.tablecheck import inspect_table

SCHEMA = pa.schema([("id", pa.int64()), ("worker", pa.int32())])
WORKERS, COMMITS, ROWS = 4, 8, 25

_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    import pyarrow as pa
    import raylake

    uri, options, worker, commits, rows, go = sys.argv[1:7]
    worker, commits, rows = int(worker), int(commits), int(rows)
    tbl = raylake.open_table(uri, storage_options=json.loads(options))
    while not os.path.exists(go):  # start together, so that the commits really race
        time.sleep(0.002)
    for c in range(commits):
        start = (worker * commits + c) * rows
        data = pa.table({"id": pa.array(range(start, start + rows), pa.int64()),
                         "worker": pa.array([worker] * rows, pa.int32())})
        try:
            snap = tbl.write(data)
            report = {"start": start, "snapshot": snap.id, "commit_id": snap.commit_id}
        except Exception as exc:
            report = {"start": start, "failed": repr(exc)}
        print(json.dumps(report), flush=True)
    """
)


@pytest.fixture
def faulty(s3_server: LocalS3Server) -> Iterator[LocalS3Server]:
    yield s3_server
    s3_server.set_faults(None)


def _race(uri: str, options: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                uri,
                json.dumps(options),
                *map(str, (w, COMMITS, ROWS)),
                str(go),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    go.touch()
    reports = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err
        reports += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return reports


@pytest.mark.slow
def test_four_processes_commit_through_faults_and_lost_snapshot_creates(
    faulty: LocalS3Server, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    uri = f"s3://{faulty.create_bucket()}/t"
    raylake.create_table(uri, SCHEMA, storage_options=storage_options)
    faulty.set_faults(FaultPlan.transient(0.10, seed=26, lost_creates=0.30))
    reports = _race(uri, storage_options, tmp_path)
    injected = faulty.fault_stats()["injected"]
    faulty.set_faults(None)
    assert injected.get("lost", 0) >= 3  # the plan really hit the commit points
    failed = [r for r in reports if "failed" in r]
    assert not failed, failed
    assert len(reports) == WORKERS * COMMITS
    # Every acknowledged commit is its own snapshot, and holds its rows exactly once.
    state = inspect_table(uri, storage_options)
    assert not state.missing  # every snapshot reads, and names only files that exist
    assert sorted(r["snapshot"] for r in reports) == state.snapshot_ids
    assert {state.commit_ids[r["snapshot"]] for r in reports} == {r["commit_id"] for r in reports}
    tbl = raylake.open_table(uri, storage_options=storage_options)
    counts = Counter(tbl.to_arrow()["id"].to_pylist())
    assert set(counts) == set(range(WORKERS * COMMITS * ROWS)) and set(counts.values()) == {1}


def test_reads_and_a_loader_epoch_at_five_percent_faults_are_exact(
    faulty: LocalS3Server, storage_options: dict[str, Any]
) -> None:
    torch = pytest.importorskip("torch")
    from raylake.train import LakeIterableDataset

    uri = f"s3://{faulty.create_bucket()}/t"
    options = {"write.target-file-size": "1"}  # a file per commit's row group: many requests
    tbl = raylake.create_table(uri, SCHEMA, options=options, storage_options=storage_options)
    total = 0
    for c in range(6):
        ids = pa.array(range(total, total + 500), pa.int64())
        tbl.write(pa.table({"id": ids, "worker": pa.array([c] * 500, pa.int32())}))
        total += 500
    faulty.set_faults(FaultPlan.transient(0.05, seed=5))
    reader = raylake.open_table(uri, storage_options=storage_options)
    assert sorted(reader.to_arrow()["id"].to_pylist()) == list(range(total))
    dataset = LakeIterableDataset(reader, columns=["id"], batch_size=64, seed=1)
    seen = torch.cat([batch["id"] for batch in dataset]).tolist()
    injected = faulty.fault_stats()["injected"]
    faulty.set_faults(None)
    assert sum(injected.values()) > 0
    assert sorted(seen) == list(range(total))  # every row once: no batch skipped or repeated


_NAMED_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    import pyarrow as pa
    import raylake
    from raylake.errors import CommitStateUnknownError

    uri, options, worker, commits, rows, go = sys.argv[1:7]
    worker, commits, rows = int(worker), int(commits), int(rows)
    tbl = raylake.open_table(uri, storage_options=json.loads(options))
    while not os.path.exists(go):
        time.sleep(0.002)
    for c in range(commits):
        start = (worker * commits + c) * rows
        data = pa.table({"id": pa.array(range(start, start + rows), pa.int64()),
                         "worker": pa.array([worker] * rows, pa.int32())})
        writer = tbl.new_writer()
        writer.write(data)
        messages = writer.prepare_commit()
        report = {"start": start, "failed": "unknown outcome on every try"}
        for _ in range(10):  # an unknown outcome is retried by name (docs/reliability.md)
            try:
                tbl.commit(messages, base_snapshot_id=0, commit_user=f"w{worker}",
                           commit_identifier=c)
                report = {"start": start}
                break
            except CommitStateUnknownError:
                continue
            except Exception as exc:
                report = {"start": start, "failed": repr(exc)}
                break
        print(json.dumps(report), flush=True)
    """
)

_EXPIRER = textwrap.dedent(
    """
    import json, os, sys, time
    import raylake

    uri, options, go = sys.argv[1:4]
    tbl = raylake.open_table(uri, storage_options=json.loads(options))
    while not os.path.exists(go):
        time.sleep(0.002)
    while not os.path.exists(go + ".stop"):
        try:
            tbl.expire_snapshots(retain_last=1)
        except Exception as exc:  # a fault after the retry bound: try again
            print(json.dumps({"expire": repr(exc)}), flush=True)
    """
)


@pytest.mark.slow
def test_named_commits_through_faults_while_expiration_keeps_only_the_latest(
    faulty: LocalS3Server, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    """Three processes commit by name under faults while a fourth expires all but the
    latest snapshot in a loop: slow commits find snapshot ids that others took and
    expiration freed, and creates carried out and answered 500 meet expirations. A
    commit whose outcome is unknown is retried by name; every commit is acknowledged,
    every acknowledged row is there exactly once, and no snapshot names a missing file
    (was: strays acknowledged on snapshots made again, their rows lost)."""
    uri = f"s3://{faulty.create_bucket()}/t"
    raylake.create_table(uri, SCHEMA, storage_options=storage_options)
    faulty.set_faults(FaultPlan.transient(0.08, seed=16, lost_creates=0.30))
    go = tmp_path / "go"
    args = [uri, json.dumps(storage_options)]
    expirer = subprocess.Popen(
        [sys.executable, "-c", _EXPIRER, *args, str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _NAMED_WRITER, *args, *map(str, (w, 10, 5)), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(3)
    ]
    go.touch()
    reports = []
    try:
        for child in writers:
            out, err = child.communicate(timeout=600)
            assert child.returncode == 0, err
            reports += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    finally:
        (tmp_path / "go.stop").touch()
        _, err = expirer.communicate(timeout=600)
    faulty.set_faults(None)
    assert expirer.returncode == 0, err
    assert not [r for r in reports if "failed" in r] and len(reports) == 30
    assert not inspect_table(uri, storage_options).missing
    tbl = raylake.open_table(uri, storage_options=storage_options)
    counts = Counter(tbl.to_arrow()["id"].to_pylist())
    assert set(counts) == set(range(30 * 5)) and set(counts.values()) == {1}
