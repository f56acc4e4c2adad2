"""Handing a scan to other Arrow engines: DuckDB and polars.

Both read through the Arrow PyCapsule stream interface (``__arrow_c_stream__``), so
rows go from the Parquet reader to the engine batch by batch, never through pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raylake.errors import InvalidArgumentError, MissingDependencyError

if TYPE_CHECKING:
    from raylake.table.scan import TableScan


def register_duckdb(scan: TableScan, name: str, connection: Any = None) -> Any:
    """Register ``scan`` as a DuckDB view called ``name``; returns the connection.

    The scan is pinned to its snapshot first, so every query of the view reads the same
    rows; each query streams them anew (nothing is materialized at registration).
    """
    try:
        import duckdb
    except ImportError as exc:
        raise MissingDependencyError("duckdb", "duckdb") from exc
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("name", name, "a non-empty view name")
    con = duckdb.connect() if connection is None else connection
    con.register(name, scan.pin())
    return con


def to_polars_frame(scan: TableScan) -> Any:
    """The scan's rows as a ``polars.DataFrame``, built from the Arrow stream."""
    try:
        import polars as pl
    except ImportError as exc:
        raise MissingDependencyError("polars", "polars") from exc
    return pl.DataFrame(scan)
