"""The test object store's conditional create is atomic, as S3's is.

moto checks ``If-None-Match: *`` and then stores the object as two steps, without a
lock: two creates of one key served by two threads can both pass the check, both be
answered 200, and the later overwrite the earlier. Two raylake commits then both took
snapshot N, both were acknowledged, and the rows of the overwritten one were gone (the
lost rows of the one-minute soak, docs/reliability.md). S3 lets exactly one of them
succeed; the server in raylake.testing serves conditional creates one at a time.

The interleaving is forced, not left to timing: moto's store of the first snapshot
file waits until the second create has reached the server, and then until it reaches
the store as well. Without the server's lock it does (both creates passed the
existence check before either stored): both are answered 200. With the lock, the
second create is held before the check while the first is inside, the short wait for
it runs out, the first stores, and the second is told "exists".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest
from botocore.exceptions import ClientError
from moto.s3.models import S3Backend

import raylake
from raylake.testing.s3server import LocalS3Server
from raylake.testing.tablecheck import inspect_table, rows_of

SNAPSHOT = re.compile(r"snapshot/snapshot-\d+\.json$")
# How long the first store waits for the second request to reach the server (a process
# starting), then for that request to reach the store: only how long the run with the
# server's lock takes depends on these, never its outcome.
ARRIVAL_S = 120.0
STORE_S = 2.0


class _StoresMeet:
    """moto's store of snapshot files in ``bucket``: the first waits for a second."""

    def __init__(self, server: LocalS3Server, bucket: str) -> None:
        self.server = server
        self.bucket = bucket
        self.stores = 0
        self.met = threading.Event()
        self.lock = threading.Lock()

    def arrive(self, bucket_name: str, key_name: str) -> None:
        if bucket_name != self.bucket or not SNAPSHOT.search(key_name):
            return
        with self.lock:
            self.stores += 1
            first = self.stores == 1
        if not first:
            self.met.set()
            return
        deadline = time.monotonic() + ARRIVAL_S
        while not self.met.is_set() and time.monotonic() < deadline:
            if self._creates_received() >= 2:  # the second is past the check, or held
                self.met.wait(STORE_S)
                return
            time.sleep(0.01)

    def _creates_received(self) -> int:
        return sum(
            method == "PUT" and path.startswith(f"/{self.bucket}/") and bool(SNAPSHOT.search(path))
            for method, path, _ in self.server.request_log
        )


@pytest.fixture
def meeting(
    s3_server: LocalS3Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, _StoresMeet]]:
    bucket = s3_server.create_bucket()
    hook = _StoresMeet(s3_server, bucket)
    real = S3Backend.put_object

    def put_object(backend: S3Backend, bucket_name: str, key_name: str, *a: Any, **kw: Any) -> Any:
        hook.arrive(bucket_name, key_name)
        return real(backend, bucket_name, key_name, *a, **kw)

    monkeypatch.setattr(S3Backend, "put_object", put_object)
    yield bucket, hook


def test_two_creates_of_one_key_at_once_exactly_one_succeeds(
    meeting: tuple[str, _StoresMeet], s3_server: LocalS3Server
) -> None:
    bucket, _ = meeting
    client = s3_server.client()
    key = "t/snapshot/snapshot-1.json"

    def create(body: bytes) -> str:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
            return "created"
        except ClientError as exc:
            return str(exc.response["Error"]["Code"])

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(create, [b"a", b"b"]))
    assert sorted(answers) == ["PreconditionFailed", "created"]
    winner = [b"a", b"b"][answers.index("created")]
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == winner


# A writer of its own process, as in the soak: raylake serializes creates within one
# process (raylake/io/fileio.py), so only two processes can race at the store.
WRITER = """
import sys, json, pyarrow as pa, raylake
uri, options, first = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
tbl = raylake.open_table(uri, storage_options=options)
snap = tbl.write(pa.table({"id": pa.array(range(first, first + 10), pa.int64())}))
print(snap.id)
"""


def test_two_commits_racing_for_one_snapshot_both_land(
    meeting: tuple[str, _StoresMeet], storage_options: dict[str, Any]
) -> None:
    bucket, hook = meeting
    uri = f"s3://{bucket}/t"
    raylake.create_table(uri, pa.schema([("id", pa.int64())]), storage_options=storage_options)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, uri, json.dumps(storage_options), str(first)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for first in (0, 10)
    ]
    acknowledged = [int(w.communicate(timeout=300)[0]) for w in writers]
    assert [w.returncode for w in writers] == [0, 0]
    assert hook.stores >= 2  # both commits reached the store of a snapshot file
    # Both acknowledged, as two snapshots, and both commits' rows are there.
    assert sorted(acknowledged) == [1, 2]
    state = inspect_table(uri, storage_options)
    assert state.snapshot_ids == [1, 2] and not state.missing and not state.unreferenced
    assert rows_of(raylake.open_table(uri, storage_options=storage_options), "id") == list(
        range(20)
    )
