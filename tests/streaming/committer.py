"""A separate process that keeps committing to a table: ``python committer.py URI N ROWS PAUSE``.

Commit ``c`` appends ids ``c*ROWS .. (c+1)*ROWS - 1`` (column ``id``, ``v`` = commit),
then pauses; it prints ``done`` at the end. Streaming tests read while it runs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def batch(commit: int, rows: int) -> pa.Table:
    ids = pa.array(range(commit * rows, (commit + 1) * rows), pa.int64())
    return pa.table({"id": ids, "v": pa.array([commit] * rows, pa.int64())}, schema=SCHEMA)


def start(uri: str, commits: int, rows: int, pause: float) -> subprocess.Popen[str]:
    args = [sys.executable, str(Path(__file__)), uri, str(commits), str(rows), str(pause)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main() -> None:
    import raylake

    uri, commits, rows, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    tbl = raylake.open_table(uri)
    for c in range(commits):
        tbl.write(batch(c, rows))
        time.sleep(pause)
    print("done")


if __name__ == "__main__":
    main()
