"""Failures an object store can inject: nothing lost, nothing half-committed, no wrong data.

- The server dies in the middle of a read: the read raises, and what it yielded
  before was correct.
- A writer process is killed in the middle of its uploads: the table is unchanged
  and readable, and the next writer commits as usual.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import raylake
from raylake.testing.s3server import LocalS3Server, S3ServerProcess

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64())])
FILES, ROWS = 40, 500
# A server that is gone refuses every try: two quick tries show the same failure as the
# default bound and its backoff, in a second instead of most of a minute.
FEW_TRIES = {"raylake_retry": {"max_attempts": 2, "backoff_s": 0.01, "max_backoff_s": 0.01}}


def _rows(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "v": pa.array([float(i) for i in range(start, start + n)])})


@pytest.fixture
def own_server() -> Iterator[S3ServerProcess]:
    with S3ServerProcess() as server:
        yield server


def test_server_dropped_mid_read_raises_and_never_returns_wrong_rows(
    own_server: S3ServerProcess,
) -> None:
    uri = f"s3://{own_server.create_bucket()}/t"
    options = {**own_server.storage_options, **FEW_TRIES}
    tbl = raylake.create_table(
        uri,
        SCHEMA,
        options={"write.row-group-rows": str(ROWS), "write.target-file-size": "1"},
        storage_options=options,
    )
    tbl.write(_rows(0, FILES * ROWS))  # one file per row group: FILES files
    scan = raylake.open_table(uri, storage_options=options).scan()
    scan.read_context()
    batches = scan.to_batches()
    seen = [next(batches)]
    # Reads are a window of files ahead, never the whole table: most files are unread.
    own_server.kill()
    with pytest.raises(OSError):
        for batch in batches:
            seen.append(batch)
    got = pa.Table.from_batches(seen)
    assert 0 < got.num_rows < FILES * ROWS
    ids = got["id"].to_numpy()
    assert (got["v"].to_numpy() == ids).all()  # every row yielded is a whole, true row
    assert len(set(ids.tolist())) == len(ids)


def test_planned_read_after_the_server_is_gone_raises(own_server: S3ServerProcess) -> None:
    uri = f"s3://{own_server.create_bucket()}/t"
    options = {**own_server.storage_options, **FEW_TRIES}
    tbl = raylake.create_table(uri, SCHEMA, storage_options=options)
    tbl.write(_rows(0, 100))
    scan = tbl.scan()
    splits, context = scan.plan(), scan.read_context()
    own_server.kill()
    with pytest.raises(OSError):
        context.read_table(splits)


_WRITER = textwrap.dedent(
    """
    import json, sys, time
    import pyarrow as pa
    import raylake

    uri, options = sys.argv[1], json.loads(sys.argv[2])
    tbl = raylake.open_table(uri, storage_options=options)

    def batches():
        for i in range(100):
            if i == 3:  # files 0-2 are written or uploading, the next one is open
                print("uploading", flush=True)
                time.sleep(600)
            ids = pa.array(range(10_000 + i * 1000, 10_000 + (i + 1) * 1000), pa.int64())
            yield pa.table({"id": ids, "v": pa.array([1.0] * 1000)})

    tbl.write(batches())
    print("committed", flush=True)
    """
)


def test_writer_killed_mid_upload_leaves_the_table_unchanged(
    s3_server: LocalS3Server, s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    import json

    uri = f"s3://{s3_bucket}/killed"
    tbl = raylake.create_table(
        uri, SCHEMA, options={"write.row-group-rows": "1000"}, storage_options=storage_options
    )
    tbl.write(_rows(0, 100))
    before = tbl.latest_snapshot()
    assert before is not None
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, uri, json.dumps(storage_options)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "uploading"
    finally:
        child.kill()
        child.wait(timeout=60)
    reopened = raylake.open_table(uri, storage_options=storage_options)
    after = reopened.latest_snapshot()
    assert after is not None and after.id == before.id
    assert sorted(reopened.to_arrow()["id"].to_pylist()) == list(range(100))
    reopened.write(_rows(100, 50))
    assert reopened.count() == 150
