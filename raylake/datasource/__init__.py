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
from raylake.datasource.datasink import LakeDatasink
from raylake.datasource.datasource import LakeDatasource

__all__ = ["LakeDatasink", "LakeDatasource", "read_lake", "write_lake"]
