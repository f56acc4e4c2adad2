"""Merges racing other merges and appends, in separate processes.

Each merging process adds 1 to the counter of every key, several times; a merge
that loses a race retries on the new state (or, past its retries, raises
CommitConflictError and commits nothing). Afterwards every counter equals the
number of merges that reported success (no update lost or applied twice), every
appended row is there, and the snapshot chain is intact.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import raylake

KEYS = 20
SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("n", pa.int64())])

_WORKER = textwrap.dedent(
    """
    import os, sys, time
    import pyarrow as pa
    import raylake
    from raylake.errors import CommitConflictError

    uri, role, worker, rounds, keys, go = sys.argv[1:7]
    worker, rounds, keys = int(worker), int(rounds), int(keys)
    tbl = raylake.open_table(uri)
    while not os.path.exists(go):  # start together, so the commits really race
        time.sleep(0.002)
    done = 0
    for r in range(rounds):
        if role == "append":
            start = 1000 + (worker * rounds + r) * 5
            tbl.write(pa.table({"k": pa.array(range(start, start + 5), pa.int64()),
                                "n": pa.array([0] * 5, pa.int64())}))
            done += 1
            continue
        source = pa.table({"k": pa.array(range(keys), pa.int64()),
                           "one": pa.array([1] * keys, pa.int64())})
        try:
            tbl.merge(source, on="k").when_matched_update({"n": "t.n + s.one"}).execute()
            done += 1
        except CommitConflictError:
            pass
    print(done)
    """
)


@pytest.mark.parametrize("kind", ["append", "pk"])
def test_processes_merge_and_append_concurrently(tmp_path: Path, kind: str) -> None:
    pk = {"primary_key": ["k"], "buckets": 2} if kind == "pk" else {}
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, **pk)
    tbl.write(pa.table({"k": range(KEYS), "n": [0] * KEYS}, schema=SCHEMA))
    go = tmp_path / "go"
    roles = ["merge", "merge", "merge", "append"]
    rounds = 4
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, tbl.uri, role, str(w), str(rounds), str(KEYS), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w, role in enumerate(roles)
    ]
    go.touch()
    done = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        done.append(int(out.strip()))
    merges = sum(d for d, role in zip(done, roles) if role == "merge")
    assert merges >= 1 and done[roles.index("append")] == rounds

    rows = dict(zip(*tbl.to_arrow().to_pydict().values()))
    assert {k: rows[k] for k in range(KEYS)} == dict.fromkeys(range(KEYS), merges)
    appended = {1000 + i for i in range(rounds * 5 * len(roles))} & set(rows)
    assert len(appended) == rounds * 5 and len(rows) == KEYS + rounds * 5
    snaps = tbl.snapshots()
    assert [s.parent_id for s in snaps] == [None, *range(1, len(snaps))]
    # Each successful merge is one commit; auto-compaction may add its own.
    commits = [s for s in snaps if s.commit_kind != "COMPACT"]
    assert len(commits) == 1 + merges + rounds
