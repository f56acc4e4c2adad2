"""The lake table: create and open tables, write, commit, plan scans and read splits.

These names are the public surface; the modules below them (the committer, the
writers, the kinds, ``ReadContext`` in ``raylake.table.scan``, ``FileSlice`` in
``raylake.table.split``) may change between releases.
"""

from raylake.format.consumer import ConsumerProgress
from raylake.format.snapshot import Snapshot
from raylake.table.catalog import create_table, from_pandas, open_table, table_exists
from raylake.table.changes_scan import ChangesScan
from raylake.table.maintenance import ExpireResult, OrphanResult
from raylake.table.scan import TableScan
from raylake.table.split import Split
from raylake.table.table import Table
from raylake.table.writer import CommitMessage


def clear_caches() -> None:
    """Forget every per-process cache of immutable things (manifests, live file sets,
    schemas, Parquet footers, key layouts, merge decisions). Only cold-read benchmarks
    need this: the cached files never change. (The record of aborted commit messages is
    not a cache: it is kept.)
    """
    from raylake.caching import clear_process_caches

    clear_process_caches()


__all__ = [
    "ChangesScan",
    "CommitMessage",
    "ConsumerProgress",
    "ExpireResult",
    "OrphanResult",
    "Snapshot",
    "Split",
    "Table",
    "TableScan",
    "clear_caches",
    "create_table",
    "from_pandas",
    "open_table",
    "table_exists",
]
