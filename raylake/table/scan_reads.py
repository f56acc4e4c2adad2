"""The read methods every scan shares: batches, Arrow, pandas and the Arrow stream.

A scan (a snapshot's :class:`~raylake.table.scan.TableScan`, or the changes of
:class:`~raylake.table.changes_scan.ChangesScan`) plans splits and has a read context
that reads them; everything a user reads is built on those two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import pyarrow as pa

from raylake.arguments import refuse_unknown_keywords


class SplitReader(Protocol):
    @property
    def output_schema(self) -> pa.Schema: ...

    def read_all(self, splits: Sequence[Any]) -> Iterator[pa.RecordBatch]: ...

    def read_table(self, splits: Sequence[Any]) -> pa.Table: ...


class ScanReads:
    """Mixed into a scan that has ``plan()`` and ``read_context()``."""

    def plan(self) -> Sequence[Any]:
        raise NotImplementedError

    def read_context(self) -> SplitReader:
        raise NotImplementedError

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Stream the rows as RecordBatches in bounded memory (planned on the first one)."""
        yield from self.read_context().read_all(self.plan())

    def to_arrow(self) -> pa.Table:
        return self.read_context().read_table(self.plan())

    @refuse_unknown_keywords
    def to_pandas(self, *, types_mapper: Callable[[pa.DataType], Any] | None = None) -> Any:
        """The rows as a DataFrame in the installed pandas' defaults, an integer column
        holding nulls as ``Int64`` (docs/pandas.md); ``types_mapper`` is pyarrow's."""
        from raylake.table.pandas_types import arrow_to_pandas, types_mapper_arg

        types_mapper = types_mapper_arg(types_mapper)
        return arrow_to_pandas(self.to_arrow(), types_mapper)

    def to_arrow_reader(self) -> pa.RecordBatchReader:
        """The rows as a ``pyarrow.RecordBatchReader``, streamed in bounded memory.

        Planning waits for the first batch, so asking a reader for its schema (DuckDB
        and others do, several times per query) costs nothing.
        """
        return pa.RecordBatchReader.from_batches(
            self.read_context().output_schema, self.to_batches()
        )

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream interface: DuckDB, polars, DataFusion, pyarrow
        (``pa.table(scan)``) and others read the scan without a copy into pandas.

        Each call starts a new stream over a new plan, so a consumer may read it twice.
        """
        return self.to_arrow_reader().__arrow_c_stream__(requested_schema)
