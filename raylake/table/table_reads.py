"""The read methods of a Table: scans, Arrow, pandas, batches and other engines.

Each builds a :class:`~raylake.table.scan.TableScan` of the table's current schema and
reads it; the Table holds no read state of its own. :meth:`TableReads.scan` takes the
keywords that choose the rows (:class:`ScanArgs`); every other read method passes them on.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

import pyarrow as pa

from raylake.arguments import check_keywords, refuse_unknown_keywords
from raylake.errors import InvalidArgumentError
from raylake.expr import Expr
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.interop import register_duckdb, to_polars_frame
from raylake.table.pandas_types import arrow_to_pandas, types_mapper_arg
from raylake.table.scan import TableScan
from raylake.table.source import TableSource
from raylake.table.split import Split

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

F = TypeVar("F", bound=Callable[..., Any])


class ScanArgs(TypedDict, total=False):
    """The keywords of :meth:`TableReads.scan`, which every read method takes."""

    columns: Sequence[str] | None
    filter: str | Expr | None
    snapshot_id: int | None
    as_of: datetime | int | None


def _keywords_of(scan: Callable[..., Any]) -> Callable[[F], F]:
    """Show ``scan``'s keywords in place of the method's ``**scan`` in its run-time
    signature (``help()``, ``inspect.signature``); the type checker reads ``Unpack``. A
    keyword neither takes is refused by name, with the closest one (UnknownKeywordError)."""
    keywords = [p for p in inspect.signature(scan).parameters.values() if p.kind is p.KEYWORD_ONLY]

    def show(method: F) -> F:
        sig = inspect.signature(method)
        params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        valid = frozenset(p.name for p in [*params, *keywords] if p.name != "self")

        @functools.wraps(method)
        def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
            check_keywords(method.__name__, kwargs, valid)
            return method(self, *args, **kwargs)

        cast(Any, checked).__signature__ = sig.replace(parameters=[*params, *keywords])
        return cast(F, checked)

    return show


class TableReads:
    """Mixed into :class:`~raylake.table.table.Table`."""

    file_io: FileIO
    table_schema: TableSchema
    source: TableSource

    @refuse_unknown_keywords
    def scan(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> TableScan:
        """A scan of the latest snapshot, or the one chosen, in that snapshot's schema.

        ``columns``: the columns to read, in this order (None: all). ``filter``: a
        string or expression the rows must match (docs/filters.md). ``snapshot_id``:
        the snapshot to read; ``as_of``: the snapshot current at a datetime or at epoch
        milliseconds (time travel reads the snapshot's own schema). Every other read
        method (``to_arrow``, ``to_pandas``, ...) takes these keywords too.
        """
        scan = self._new_scan()
        if snapshot_id is not None or as_of is not None:
            scan = scan.at(snapshot_id, as_of).as_of_its_schema()
        return scan.select(columns).where(filter)

    def _new_scan(self) -> TableScan:
        """A scan of the latest snapshot in the current schema (a format's own scan)."""
        return TableScan(self.file_io, self.table_schema, table_source=self.source)

    @_keywords_of(scan)
    def to_arrow(self, **scan: Unpack[ScanArgs]) -> pa.Table:
        """The rows as a ``pyarrow.Table``; the keywords are :meth:`scan`'s."""
        return self.scan(**scan).to_arrow()

    @_keywords_of(scan)
    def to_pandas(
        self, *, types_mapper: Callable[[pa.DataType], Any] | None = None, **scan: Unpack[ScanArgs]
    ) -> Any:
        """The rows as a ``pandas.DataFrame`` in the installed pandas' defaults, an integer
        column holding nulls as ``Int64`` (docs/pandas.md); ``types_mapper`` is pyarrow's
        (``pd.ArrowDtype``, ...); the other keywords are :meth:`scan`'s."""
        types_mapper = types_mapper_arg(types_mapper)
        return arrow_to_pandas(self.to_arrow(**scan), types_mapper)

    @_keywords_of(scan)
    def to_batches(self, **scan: Unpack[ScanArgs]) -> Iterator[pa.RecordBatch]:
        """Stream RecordBatches in bounded memory; the keywords are :meth:`scan`'s."""
        return self.scan(**scan).to_batches()

    @_keywords_of(scan)
    def to_arrow_reader(self, **scan: Unpack[ScanArgs]) -> pa.RecordBatchReader:
        """A ``pyarrow.RecordBatchReader`` over the rows, streamed in bounded memory; the
        keywords are :meth:`scan`'s.

        A scan (``tbl.scan(...)``) is also an Arrow stream itself (``__arrow_c_stream__``):
        ``duckdb.sql("select ... from scan")``, ``polars.DataFrame(scan)`` and
        ``pa.table(scan)`` read it directly.
        """
        return self.scan(**scan).to_arrow_reader()

    @_keywords_of(scan)
    def to_duckdb(self, name: str, connection: Any = None, **scan: Unpack[ScanArgs]) -> Any:
        """Register the table (its current snapshot, or the one chosen) as a DuckDB view;
        the keywords are :meth:`scan`'s.

        Returns the connection (a new in-memory one unless ``connection`` is given). The
        view streams the pinned snapshot's rows on every query; nothing is copied up front.
        """
        return register_duckdb(self.scan(**scan), name, connection)

    @_keywords_of(scan)
    def to_polars(self, **scan: Unpack[ScanArgs]) -> Any:
        """The rows as a ``polars.DataFrame`` (read through the Arrow stream interface);
        the keywords are :meth:`scan`'s."""
        return to_polars_frame(self.scan(**scan))

    @refuse_unknown_keywords
    def read_split(
        self,
        split: Split,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The rows of one split of a plan (``scan(...).plan()``), e.g. in a worker, under
        the schema the plan was made under (a time-travel plan's: its snapshot's)."""
        if not isinstance(split, Split):
            raise InvalidArgumentError("split", split, "a Split of a plan (scan(...).plan())")
        scan = self.scan()
        if split.schema_id is not None and split.schema_id != scan.table_schema.schema_id:
            scan = self.scan(snapshot_id=split.snapshot_id)
        return scan.select(columns).where(filter).read_context().read(split)

    @refuse_unknown_keywords
    def count(
        self,
        *,
        filter: str | Expr | None = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
    ) -> int:
        """The number of rows a read returns (after ``filter`` and, for a primary-key
        table, the merge), of the latest snapshot or the one ``snapshot_id`` or ``as_of``
        chooses, as in :meth:`scan`; without a filter, from the manifests where they tell."""
        return self.scan(filter=filter, snapshot_id=snapshot_id, as_of=as_of).count()
