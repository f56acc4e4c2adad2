"""Table kinds: what differs between append and primary-key tables, in one place.

A :class:`TableKind` is chosen once per schema by :func:`kind_of` and owns
everything that depends on the kind: the writer, the write modes, which part of
a filter may prune files, split planning, split reading, exact row counts, and
the hooks around a commit (a lookup changelog, auto-compaction). Generic code
(scans, the committer, Ray Data) asks the kind and never which kind it holds.

A schema's kind is named by its format's source (``TableSource.kind``,
raylake/table/source.py): raylake's imports the concrete kinds when first asked for,
since the primary-key kind builds on the committer that itself consults kinds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from raylake.errors import InvalidArgumentError, UnsupportedOperationError
from raylake.expr import Expr
from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.split import Split
from raylake.table.writer import CommitMessage, TableWriter

if TYPE_CHECKING:
    from raylake.format.snapshot import Snapshot
    from raylake.table.changes import ChangeRange, ChangeReadContext, ChangeSplit
    from raylake.table.scan import ReadContext
    from raylake.table.table import Table


# Every kind's write modes: any other is an argument mistake, whatever the kind.
WRITE_MODES = ("append", "overwrite", "upsert")


class TableKind(ABC):
    """The strategy of one table kind, bound to one (immutable) table schema."""

    name: ClassVar[str]  # "append", "primary-key"
    described: ClassVar[str]  # "an append table", for messages
    # The write modes the kind accepts; the first is the default.
    write_modes: ClassVar[tuple[str, ...]]

    def __init__(self, ts: TableSchema) -> None:
        self.ts = ts

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ts.column_names})"

    def validate_schema(self) -> None:
        """Reject a new table of this kind that could not be written or read correctly."""
        return None

    # -- writing -----------------------------------------------------------------------

    @property
    def default_write_mode(self) -> str:
        return self.write_modes[0]

    @classmethod
    def check_write_mode(cls, mode: str, where: str = "") -> None:
        # A classmethod: a write checks its mode against the table it would create too.
        if mode not in WRITE_MODES:  # a typo ("apend"), not a mode this kind lacks
            raise InvalidArgumentError("mode", mode, f"one of {list(cls.write_modes)}")
        if mode not in cls.write_modes:
            at = f" at {where!r}" if where else ""
            raise UnsupportedOperationError(
                f"mode {mode!r} is not supported for {cls.described}{at}; "
                f"use one of {list(cls.write_modes)}"
            )

    def new_writer(self, file_io: FileIO, *, file_prefix: str = "data") -> TableWriter:
        """A writer of this kind's data files (none for a format raylake only reads,
        whose source refuses every write first: raylake/table/source.py)."""
        raise UnsupportedOperationError(f"{self.described} has no writer")

    def input_schema(self, schema: pa.Schema) -> pa.Schema:
        """The table columns of an input schema (without system columns it may carry)."""
        return schema

    @property
    def write_buckets(self) -> int:
        """How many buckets a distributed write routes rows into, one writer per bucket
        (see :meth:`bucket_ids`); 0 when any writer may write any row."""
        return 0

    def bucket_ids(self, rows: pa.Table) -> pa.Array:
        """The bucket of each row (int32), for kinds whose buckets each need one writer."""
        raise UnsupportedOperationError(f"{self.described} does not route rows to buckets")

    def commit_changelog(
        self, file_io: FileIO, latest: Snapshot | None, added: Sequence[DataFile]
    ) -> list[DataFile]:
        """Changelog files the committer must make for an APPEND commit (written here)."""
        return []

    def after_commit(self, file_io: FileIO, messages: Sequence[CommitMessage]) -> None:
        """Work after a successful commit (it must never make that commit look failed)."""
        return None

    # -- reading -----------------------------------------------------------------------

    @abstractmethod
    def pruning_filter(self, filter: Expr) -> Expr:
        """The part of a scan's filter that may prune files by their statistics."""

    @abstractmethod
    def plan_splits(
        self,
        snapshot_id: int,
        files: list[DataFile],
        column_indices: Sequence[int] | None,
        target_size: int,
    ) -> list[Split]:
        """Pack the live (pruned) files of a snapshot into splits."""

    @abstractmethod
    def read_batches(self, ctx: ReadContext, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        """The rows of the splits: filtered, projected, merged where the kind merges."""

    def read_table(self, ctx: ReadContext, splits: Sequence[Split]) -> pa.Table:
        """All rows of the splits: the batches of ``read_batches``, collected.

        ``pa.Table.from_batches`` (not ``concat_tables``) keeps the row count of batches
        without columns, which ``count()`` reads.
        """
        return pa.Table.from_batches(list(self.read_batches(ctx, splits)), schema=ctx.output_schema)

    @abstractmethod
    def exact_row_count(self, split: Split) -> int | None:
        """Rows a split yields without a filter, from metadata alone; None if unknown."""

    def read_changelog(
        self, file_io: FileIO, snap: Snapshot, columns: Sequence[str] | None
    ) -> pa.Table:
        """The rows one snapshot changed, with their row kind (tables that keep a changelog)."""
        raise UnsupportedOperationError(
            f"{file_io.uri} records no changelog: {self.described} has none; primary-key "
            "tables keep one with options={'changelog-producer': 'input'} or 'lookup'"
        )

    # -- changes (raylake/table/changes.py) -------------------------------------------

    @abstractmethod
    def plan_changes(self, rng: ChangeRange) -> list[ChangeSplit]:
        """The splits of what changed in ``rng``, each bucket's files planned once."""

    def check_changes(self, what: str) -> None:
        """Refuse, naming ``what``, if this kind cannot read changes (a stream's, a
        range's, a snapshot's changelog): checked before any is planned."""
        return None

    def read_changes(self, ctx: ChangeReadContext, split: ChangeSplit) -> Iterator[pa.RecordBatch]:
        """The change rows of a split other than whole-file inserts and removals."""
        raise UnsupportedOperationError(f"{self.described} has no {type(split).__name__}")

    def step_needs_parent(self) -> bool:
        """Whether one snapshot's changes are planned against its parent's files."""
        return False

    @property
    def changes_are_state_differences(self) -> bool:
        """Whether a range's changes are the difference of the table's merged states at
        its ends (a primary-key table's), so that they bring a reader to the end state
        only from the start state; else they are the rows added and removed."""
        return False

    @property
    def changelog_at_compaction(self) -> bool:
        """Whether a COMPACT snapshot may hold changes (changelog files written at
        compaction); otherwise a stream delivers nothing for it."""
        return False

    @property
    def shards_by_file(self) -> bool:
        """Whether stream shards split the table by data file rather than by bucket."""
        return False

    @property
    def bucket_count(self) -> int | None:
        """How many buckets the table's files lie in (0 to n - 1): what a stream's
        ``buckets`` may name. None where no count bounds them (Paimon's dynamic buckets)."""
        return self.ts.buckets

    # -- maintenance -------------------------------------------------------------------

    def compact(self, file_io: FileIO, *, full: bool) -> Snapshot | None:
        raise UnsupportedOperationError(
            f"compact() applies to primary-key tables; {file_io.uri} is {self.described}"
        )

    def delete(self, tbl: Table, keys_or_filter: Any) -> Snapshot | None:
        raise UnsupportedOperationError(
            f"delete() applies to raylake tables; {tbl.uri} is {self.described}"
        )


def kind_of(ts: TableSchema) -> TableKind:
    """The kind of a table schema, made once per schema object."""
    return ts.derived("kind", lambda: _make_kind(ts))


def _make_kind(ts: TableSchema) -> TableKind:
    from raylake.table.source import source_class

    return source_class(ts).kind(ts)
