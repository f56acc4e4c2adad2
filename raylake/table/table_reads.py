"""The read methods of a Table: scans, Arrow, pandas, batches and other engines.

Each builds a :class:`~raylake.table.scan.TableScan` of the table's current schema and
reads it; the Table holds no read state of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from raylake.expr import Expr
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.interop import register_duckdb, to_polars_frame
from raylake.table.scan import TableScan
from raylake.table.split import Split


class TableReads:
    """Mixed into :class:`~raylake.table.table.Table`."""

    file_io: FileIO
    table_schema: TableSchema

    def scan(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> TableScan:
        scan = TableScan(self.file_io, self.table_schema).at(snapshot_id, as_of)
        if snapshot_id is not None or as_of is not None:
            scan = scan.as_of_its_schema()  # time travel reads the snapshot's own schema
        return scan.select(columns).where(filter)

    def to_arrow(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> pa.Table:
        return self.scan(
            columns=columns, filter=filter, snapshot_id=snapshot_id, as_of=as_of
        ).to_arrow()

    def to_pandas(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> Any:
        return self.to_arrow(
            columns=columns, filter=filter, snapshot_id=snapshot_id, as_of=as_of
        ).to_pandas()

    def to_batches(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream RecordBatches in bounded memory."""
        return self.scan(
            columns=columns, filter=filter, snapshot_id=snapshot_id, as_of=as_of
        ).to_batches()

    def to_arrow_reader(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> pa.RecordBatchReader:
        """A ``pyarrow.RecordBatchReader`` over the rows, streamed in bounded memory.

        A scan (``tbl.scan(...)``) is also an Arrow stream itself (``__arrow_c_stream__``):
        ``duckdb.sql("select ... from scan")``, ``polars.DataFrame(scan)`` and
        ``pa.table(scan)`` read it directly.
        """
        return self.scan(
            columns=columns, filter=filter, snapshot_id=snapshot_id, as_of=as_of
        ).to_arrow_reader()

    def to_duckdb(
        self,
        name: str,
        connection: Any = None,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> Any:
        """Register the table (its current snapshot, or the one chosen) as a DuckDB view.

        Returns the connection (a new in-memory one unless ``connection`` is given). The
        view streams the pinned snapshot's rows on every query; nothing is copied up front.
        """
        scan = self.scan(columns=columns, filter=filter, snapshot_id=snapshot_id, as_of=as_of)
        return register_duckdb(scan, name, connection)

    def to_polars(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> Any:
        """The rows as a ``polars.DataFrame`` (read through the Arrow stream interface)."""
        scan = self.scan(columns=columns, filter=filter, snapshot_id=snapshot_id, as_of=as_of)
        return to_polars_frame(scan)

    def read_split(
        self,
        split: Split,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The rows of one split of a plan (``scan(...).plan()``), e.g. in a worker, under
        the schema the plan was made under (a time-travel plan's: its snapshot's)."""
        scan = self.scan()
        if split.schema_id is not None and split.schema_id != scan.table_schema.schema_id:
            scan = self.scan(snapshot_id=split.snapshot_id)
        return scan.select(columns).where(filter).read_context().read(split)

    def count(self, *, filter: str | Expr | None = None, snapshot_id: int | None = None) -> int:
        return self.scan(filter=filter, snapshot_id=snapshot_id).count()
