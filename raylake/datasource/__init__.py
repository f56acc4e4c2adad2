"""Ray Data integration: LakeDatasource, LakeDatasink, read_lake and write_lake.

Importing this package imports ray; ``import raylake`` alone does not (the names are
resolved lazily by ``raylake.__getattr__``).
"""

from __future__ import annotations

from raylake.errors import MissingDependencyError

try:
    import ray.data  # noqa: F401
except ImportError as exc:
    raise MissingDependencyError("ray", "ray") from exc

from raylake.datasource.api import read_lake, write_lake
from raylake.datasource.datasink import LakeDatasink, TaskCommit
from raylake.datasource.datasource import LakeDatasource, pack_splits, read_splits
from raylake.datasource.ray_expr import PredicateSplit, from_ray_expr, split_ray_predicate

__all__ = [
    "LakeDatasink",
    "LakeDatasource",
    "PredicateSplit",
    "TaskCommit",
    "from_ray_expr",
    "pack_splits",
    "read_lake",
    "read_splits",
    "split_ray_predicate",
    "write_lake",
]
