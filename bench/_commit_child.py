"""One arm of ``bench/object_store.py --commits``, in a process of its own on the
source tree its ``PYTHONPATH`` names: times ``Table.commit`` of messages adding 1 and
64 data files against the S3 server the parent runs, and prints one JSON line
(``wall-<files>``: seconds per commit; ``requests-<files>``: requests the server
served during it).

The data files are server-side copies of one written file under fresh names, made
before each timed commit: a commit's messages name files that exist, as a writer's do.
``off`` switches reads of the commit off, in this process only (the bench's A/B, never
a library option): ``exists``, the existence checks of the messages' files;
``parent``, the read of the parent snapshot after the create.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pyarrow as pa

import raylake
import raylake.table.commit as commit_module
import raylake.table.table as table_module
from raylake.table.commit import Committer
from raylake.table.writer import CommitMessage

WARM_UP = 1


class _NoCheck:
    def __init__(self, *args: Any) -> None:
        pass

    def wait(self) -> None:
        pass

    def error(self) -> None:
        return None


def switch_off(off: list[str]) -> None:
    if "exists" in off:
        if hasattr(table_module, "check_not_aborted"):  # a tree before FilesCheck
            table_module.check_not_aborted = lambda *args, **kwargs: None
        if hasattr(commit_module, "FilesCheck"):
            commit_module.FilesCheck = _NoCheck
    if "parent" in off:
        Committer._check_parent_kept = lambda *args, **kwargs: None  # type: ignore[method-assign]


def served(endpoint: str) -> int:
    with urllib.request.urlopen(f"{endpoint}/_raylake/faults", timeout=30) as answer:
        return int(json.loads(answer.read())["requests"])


def main(spec: dict[str, Any]) -> None:
    switch_off(spec["off"])
    options = {
        "key": spec["key"],
        "secret": spec["secret"],
        "client_kwargs": {"endpoint_url": spec["endpoint"], "region_name": "us-east-1"},
    }
    uri = f"s3://{spec['bucket']}/commit-{uuid.uuid4().hex[:8]}"
    tbl = raylake.create_table(uri, pa.schema([("id", pa.int64())]), storage_options=options)
    writer = tbl.new_writer()
    writer.write(pa.table({"id": pa.array(range(100), pa.int64())}))
    [template] = [f for m in writer.prepare_commit() for f in m.new_files]
    fs, root = tbl.file_io.fs, tbl.file_io.root
    directory = template.path.rsplit("/", 1)[0]
    out: dict[str, list[float]] = {}
    with ThreadPoolExecutor(16) as pool:
        for files in spec["files"]:
            for i in range(WARM_UP + spec["commits"]):
                paths = [f"{directory}/data-{uuid.uuid4().hex}.parquet" for _ in range(files)]
                list(pool.map(lambda p: fs.copy(f"{root}/{template.path}", f"{root}/{p}"), paths))
                message = CommitMessage(new_files=tuple(replace(template, path=p) for p in paths))
                before = served(spec["endpoint"])
                start = time.perf_counter()
                tbl.commit([message])
                wall = time.perf_counter() - start
                requests = served(spec["endpoint"]) - before
                if i >= WARM_UP:
                    out.setdefault(f"wall-{files}", []).append(wall)
                    out.setdefault(f"requests-{files}", []).append(requests)
    print(json.dumps(out))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
