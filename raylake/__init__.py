"""raylake: a lakehouse table layer and a Ray-based distributed data loader.

``import raylake`` needs only pyarrow, fsspec, pandas and numpy; Ray, Spark,
Torch and TensorFlow integrations import their dependencies when first used.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# First: Ctrl-C while the raylake command imports the rest (guarded as this is imported).
from raylake import cli_start as cli_start

# Before pyarrow chooses the pool of its C++ internals, at its import: a forked DataLoader
# worker hung in mimalloc's thread setup inside a dataset scan (raylake/memory_pool.py).
if sys.platform == "linux" and "pyarrow" not in sys.modules:
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")

from raylake.errors import (
    ColumnExistsError,
    CommitConflictError,
    CommitFailedError,
    CommitLineageUnknownError,
    CommitStateUnknownError,
    ConsumerError,
    CorruptMetadataError,
    EnvironmentSetupError,
    FilterError,
    FilterParseError,
    IncompatibleTypeChangeError,
    InvalidArgumentError,
    InvalidOptionError,
    LoaderProcessError,
    MergeCardinalityError,
    MergeError,
    MissingCredentialsError,
    MissingDependencyError,
    NullConstraintError,
    ProtectedColumnError,
    RaylakeError,
    ResumeStateError,
    SchemaError,
    SchemaEvolutionError,
    SchemaMismatchError,
    SnapshotExpiredError,
    SnapshotNotFoundError,
    StorageAccessDeniedError,
    StorageFullError,
    StorageRetriesExhaustedError,
    StreamError,
    StreamPositionExpiredError,
    TableAlreadyExistsError,
    TableLocationError,
    TableNotFoundError,
    TableNotVisibleError,
    UnknownColumnError,
    UnknownKeywordError,
    UnsafeCommitError,
    UnsupportedOperationError,
    UnsupportedTypeError,
)
from raylake.expr import col, parse_filter
from raylake.io.credentials import StorageOptions
from raylake.memory_pool import use_fork_safe_pool
from raylake.table import (
    CommitMessage,
    Snapshot,
    Split,
    Table,
    create_table,
    from_pandas,
    open_table,
)

use_fork_safe_pool()  # before a DataLoader forks its workers (raylake/memory_pool.py)

__version__ = "0.1.0"

# Ray integrations, resolved lazily so that `import raylake` does not import ray.
_LAZY = {
    "LakeDatasource": "raylake.datasource",
    "LakeDatasink": "raylake.datasource",
    "merge_lake": "raylake.datasource.merge",
    "read_lake": "raylake.datasource",
    "write_lake": "raylake.datasource",
    "read_lake_stream": "raylake.streaming",
    "StreamingJob": "raylake.streaming",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'raylake' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "ColumnExistsError",
    "CommitConflictError",
    "CommitFailedError",
    "CommitLineageUnknownError",
    "CommitMessage",
    "CommitStateUnknownError",
    "ConsumerError",
    "CorruptMetadataError",
    "EnvironmentSetupError",
    "FilterError",
    "FilterParseError",
    "IncompatibleTypeChangeError",
    "InvalidArgumentError",
    "InvalidOptionError",
    "LakeDatasink",
    "LakeDatasource",
    "LoaderProcessError",
    "MergeCardinalityError",
    "MergeError",
    "MissingCredentialsError",
    "MissingDependencyError",
    "NullConstraintError",
    "ProtectedColumnError",
    "RaylakeError",
    "ResumeStateError",
    "SchemaError",
    "SchemaEvolutionError",
    "SchemaMismatchError",
    "Snapshot",
    "SnapshotExpiredError",
    "SnapshotNotFoundError",
    "Split",
    "StorageAccessDeniedError",
    "StorageFullError",
    "StorageOptions",
    "StorageRetriesExhaustedError",
    "StreamError",
    "StreamPositionExpiredError",
    "StreamingJob",
    "Table",
    "TableAlreadyExistsError",
    "TableLocationError",
    "TableNotFoundError",
    "TableNotVisibleError",
    "UnknownColumnError",
    "UnknownKeywordError",
    "UnsafeCommitError",
    "UnsupportedOperationError",
    "UnsupportedTypeError",
    "col",
    "create_table",
    "from_pandas",
    "merge_lake",
    "open_table",
    "parse_filter",
    "read_lake",
    "read_lake_stream",
    "write_lake",
]
