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
    """Forget the per-process caches of immutable metadata (manifests, live file sets,
    Parquet footers). Only cold-read benchmarks need this: the cached files never change.
    """
    from raylake.format.manifest import clear_manifest_caches
    from raylake.table.fragments import clear_fragment_cache

    clear_manifest_caches()
    clear_fragment_cache()


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
