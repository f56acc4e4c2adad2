"""Consumer registration racing expiration, in two processes: a consumer that
registered successfully keeps its snapshot, however the two interleave."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import SnapshotNotFoundError, StreamPositionExpiredError

SCHEMA = pa.schema([("id", pa.int64())])

_EXPIRER = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    import raylake
    tbl = raylake.open_table(sys.argv[1])
    for i in range(int(sys.argv[2])):
        tbl.write(pa.table({"id": [i]}, schema=pa.schema([("id", pa.int64())])))
        tbl.expire_snapshots(retain_last=1)
    print("done")
    """
)


@pytest.mark.slow
def test_registration_and_expiration_in_two_processes(tmp_path: Path) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(pa.table({"id": [-1]}, schema=SCHEMA))
    child = subprocess.Popen(
        [sys.executable, "-c", _EXPIRER, tbl.uri, "150"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    registered = refused = 0
    while child.poll() is None:
        ids = tbl.source.snapshot_ids()
        if not ids:
            continue
        consumer = f"c{registered + refused}"
        try:
            tbl.reset_consumer(consumer, ids[0])  # the oldest: the one being expired
        except (SnapshotNotFoundError, StreamPositionExpiredError):
            refused += 1
            assert tbl.consumer(consumer) is None  # a refused consumer is not left behind
            continue
        registered += 1
        time.sleep(0.01)  # let the expiration run while the consumer holds its snapshot
        assert tbl.count(snapshot_id=ids[0]) >= 1, f"{consumer}'s snapshot {ids[0]} expired"
        tbl.delete_consumer(consumer)  # move on: its snapshots may go now
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert registered > 10
