"""The lake table: schema, snapshots, manifests, commits, scan planning, reading, writing."""

from raylake.format.consumer import ConsumerManager, ConsumerProgress
from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.table.catalog import create_table, from_pandas, open_table, table_exists
from raylake.table.maintenance import ExpireResult, OrphanResult
from raylake.table.scan import ReadContext, TableScan
from raylake.table.split import FileSlice, Split
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
    "CommitMessage",
    "ConsumerManager",
    "ConsumerProgress",
    "DataFile",
    "ExpireResult",
    "FileSlice",
    "OrphanResult",
    "ReadContext",
    "Snapshot",
    "Split",
    "Table",
    "TableScan",
    "TableSchema",
    "clear_caches",
    "create_table",
    "from_pandas",
    "open_table",
    "table_exists",
]
