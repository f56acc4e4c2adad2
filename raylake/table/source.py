"""Table sources: where a table's snapshots, files and consumers come from.

A :class:`TableSource` is everything that differs between table formats below the
table kind: which snapshots exist (by id, the latest, the earliest, as of a time, the
``LATEST`` hint), which data files a snapshot holds (live, added, changelog; pruned by
the statistics the format keeps), where consumers record their progress, and whether
the table may be written. Scans, change reads and streams ask the source and never
which format they read.

:func:`source_for` is the one place a location's format is told: raylake's own schema
files make a :class:`RaylakeSource`; Paimon's (``schema/schema-<n>``) a Paimon source
(raylake/paimon/source.py). This module is the only one in ``raylake.table`` that
imports ``raylake.paimon``, and only when the location holds no raylake table.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import TableNotFoundError, UnsupportedOperationError
from raylake.expr import AlwaysTrue, Expr, might_match, referenced_columns
from raylake.format.consumer import ConsumerManager, ConsumerProgress
from raylake.format.manifest import (
    ADD,
    DataFile,
    data_files_from_table,
    live_data_files,
    live_files_of,
    read_entries,
)
from raylake.format.schema import TableSchema
from raylake.format.schema_files import schema_by_id, schema_ids
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.format.types import has_min_max
from raylake.io import FileIO
from raylake.table.location import at_table_location
from raylake.table.same_table import SameTableCheck

if TYPE_CHECKING:
    from raylake.table.kind import TableKind
    from raylake.table.table import Table

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def writes(what: str) -> Callable[[F], F]:
    """Mark a method that writes the table: a source that raylake does not write (a
    Paimon table) refuses it here, before anything else, naming ``what``."""

    def mark(method: F) -> F:
        @functools.wraps(method)
        def checked(self: Table, *args: Any, **kwargs: Any) -> Any:
            check_writable(self, what)
            return method(self, *args, **kwargs)

        return cast(F, checked)

    return mark


def check_writable(tbl: Table, what: str) -> None:
    """Refuse ``what`` on a table whose format raylake does not write (read-only is the
    source's one capability, checked here before any write begins: the Table's writing
    methods, the Ray and Spark sinks and merges)."""
    if not tbl.source.writable:
        raise tbl.source.refuse_writes(what)


class TableSource(ABC):
    """The snapshots, files and consumers of one table, in its format."""

    # The table format ("raylake", "paimon"): what ``Table.format`` answers.
    format: ClassVar[str]
    # The format in messages: "an Apache Paimon table".
    described: ClassVar[str]
    # Whether data files hold the table's columns as stored, with no rows deleted beside
    # them (deletion vectors) and no system columns to map: another engine's Parquet
    # reader (Spark's) may then read them itself.
    plain_files: ClassVar[bool] = True
    # What a stream started at a snapshot id reads of that snapshot: its whole state
    # (raylake), or its changes (Paimon's streaming ``scan.snapshot-id``).
    start_id_reads_whole: ClassVar[bool] = True
    # Whether a consumer file keeps properties beside the position (raylake's), or only
    # the next snapshot (Paimon's: neither a whole-state start nor a job's sink snapshot).
    consumer_properties: ClassVar[bool] = True
    # Whether a change range reads its start snapshot (raylake compares the files live
    # at both ends), or only the snapshots after it (Paimon's delta and changelog files).
    changes_read_start: ClassVar[bool] = True
    # Whether expiration keeps the snapshot before a consumer's next one, which a step
    # that compares a snapshot with its parent reads (raylake's); Paimon's keeps the next
    # one on only, so there such a step reads the snapshot's own files instead.
    keeps_step_parent: ClassVar[bool] = True
    # Whether raylake writes tables of this format (commits, schema changes, consumers
    # moved by hand, maintenance); checked once, by ``Table``, before any such work.
    writable: ClassVar[bool]

    def __init__(self, file_io: FileIO, snapshots: SnapshotManager) -> None:
        self.file_io = file_io
        # The format's snapshot files, behind raylake's lookups (format/snapshot.py).
        self.snapshots = snapshots

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.file_io.uri!r})"

    # -- the table ---------------------------------------------------------------------

    @abstractmethod
    def exists(self) -> bool:
        """Whether a table of this format is at the location."""

    @abstractmethod
    def open(self) -> Table:
        """The table at the location (TableNotFoundError if there is none)."""

    @classmethod
    @abstractmethod
    def kind(cls, ts: TableSchema) -> TableKind:
        """The table kind of ``ts``, a schema of this format (``kind_of`` asks, once
        per schema object)."""

    def refuse_writes(self, what: str) -> UnsupportedOperationError:
        """The error of an operation that would write a table of a read-only format."""
        return UnsupportedOperationError(f"{what} is not supported for {self.file_io.uri}")

    # -- snapshots ---------------------------------------------------------------------

    def snapshot_ids(self) -> list[int]:
        """The ids of the snapshots that exist, oldest first (a listing)."""
        return self.snapshots.snapshot_ids()

    def read_if_present(self, snapshot_id: int) -> Snapshot | None:
        """Snapshot ``snapshot_id``, or None if it does not exist (yet, or any more)."""
        return self.snapshots.read_if_present(snapshot_id)

    def get(self, snapshot_id: int) -> Snapshot:
        """Snapshot ``snapshot_id``; SnapshotNotFoundError names the snapshots that exist."""
        return self.snapshots.get(snapshot_id)

    def latest(self) -> Snapshot | None:
        """The newest snapshot (None: the table has none)."""
        return self.snapshots.latest()

    def as_of(self, time_millis: int) -> Snapshot:
        """The newest snapshot committed at or before ``time_millis``."""
        return self.snapshots.as_of(time_millis)

    def read_hint(self) -> int | None:
        """The id the ``LATEST`` hint names (it may lag behind), or None."""
        return self.snapshots.read_hint()

    def latest_id(self) -> int | None:
        return self.snapshots.latest_id()

    def earliest_id(self) -> int | None:
        return self.snapshots.earliest_id()

    def all(self) -> list[Snapshot]:
        return self.snapshots.all()

    # -- a snapshot's files ------------------------------------------------------------

    @abstractmethod
    def live_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[Any]:
        """The files live at ``snap`` that may hold rows matching ``pruning``."""

    def stream_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[Any]:
        """The live files of ``snap`` whose rows a stream (or a change's comparison of
        two snapshots) has delivered by ``snap``: :meth:`live_files`, unless the
        format's batch reads leave out rows that no later snapshot's changes give."""
        return self.live_files(ts, snap, pruning)

    @abstractmethod
    def added_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[Any]:
        """The files ``snap`` added (its delta), pruned like :meth:`live_files`."""

    @abstractmethod
    def changelog_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[Any]:
        """The changelog files ``snap`` wrote, in commit order, pruned."""

    @abstractmethod
    def schema(self, schema_id: int) -> TableSchema:
        """The table schema of ``schema_id`` (a snapshot's, for time travel and streams)."""

    def check_opened_schema(self, ts: TableSchema, snap: Snapshot | None) -> None:
        """Refuse to read ``snap`` under ``ts`` where the table was created again since
        ``ts`` was read (raylake/table/same_table.py); a format without that check reads."""
        return None

    def warm(self, ts: TableSchema, snap: Snapshot) -> None:
        """Read ahead what a stream's next step reads of ``snap`` (only a cache fill)."""
        return None

    # -- consumers ---------------------------------------------------------------------

    @abstractmethod
    def consumer_ids(self) -> list[str]:
        """The ids of the registered consumers."""

    @abstractmethod
    def consumer(self, consumer_id: str) -> ConsumerProgress | None:
        """Where consumer ``consumer_id`` stands (None: not registered)."""

    def consumers(self) -> list[ConsumerProgress]:
        found = (self.consumer(consumer_id) for consumer_id in self.consumer_ids())
        return sorted((p for p in found if p is not None), key=lambda p: p.consumer_id)

    @abstractmethod
    def register_consumer(
        self, consumer_id: str, next_snapshot_id: int, properties: Mapping[str, str] | None = None
    ) -> ConsumerProgress:
        """Register (or move) a consumer so that expiration keeps ``next_snapshot_id``."""

    @abstractmethod
    def commit_consumer(
        self, consumer_id: str, next_snapshot_id: int, properties: Mapping[str, str] | None = None
    ) -> ConsumerProgress:
        """Record a consumer's progress (forward only)."""


class RaylakeSource(TableSource):
    """A raylake table: snapshot files with a hint, manifests with typed statistics,
    consumer files with properties (raylake/format/)."""

    format = "raylake"
    described = "a raylake table"
    writable = True

    def __init__(self, file_io: FileIO) -> None:
        super().__init__(file_io, SnapshotManager(file_io))
        self.consumer_files = ConsumerManager(file_io)
        self._listed: list[int] | None = None
        self._same_table = SameTableCheck()

    def check_opened_schema(self, ts: TableSchema, snap: Snapshot | None) -> None:
        self._same_table.check(self.file_io, ts, snap)

    def exists(self) -> bool:
        self._listed = _schema_ids(self.file_io)
        return bool(self._listed)

    def open(self) -> Table:
        from raylake.format.schema_files import load_schema
        from raylake.table.table import Table

        # The listing exists() just made, not a second one: FileIO lists afresh each
        # time (other processes change the table), so the schema is as new as that look.
        ids, self._listed = self._listed, None
        return Table(self.file_io, load_schema(self.file_io, ids), source=self)

    @classmethod
    def kind(cls, ts: TableSchema) -> TableKind:
        return raylake_kind_class(ts.primary_key)(ts)

    # -- snapshots of a table that may have been deleted under its Table -----------------

    def latest(self) -> Snapshot | None:
        return self._unless_gone(self.snapshots.latest())

    def latest_id(self) -> int | None:
        latest = self.latest()
        return None if latest is None else latest.id

    def earliest_id(self) -> int | None:
        return self._unless_gone(self.snapshots.earliest_id())

    def all(self) -> list[Snapshot]:
        return self._unless_gone(self.snapshots.all())

    def _unless_gone(self, found: T) -> T:
        """``found``, unless it is nothing because the table was deleted: a table without
        snapshots is empty only while its schema is there (one listing, for an empty
        table alone); a read of a deleted table returning no rows would hide it."""
        if not found and not _schema_ids(self.file_io):
            raise TableNotFoundError(self.file_io.uri)
        return found

    # -- files -------------------------------------------------------------------------

    def live_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[DataFile]:
        return pruned_live_files(self.file_io, ts, snap, pruning)

    def added_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[DataFile]:
        with self.snapshots.reading(snap.id):
            return self._entries(ts, snap.delta_manifests, pruning, added_only=True)

    def changelog_files(self, ts: TableSchema, snap: Snapshot, pruning: Expr) -> list[DataFile]:
        with self.snapshots.reading(snap.id):
            return self._entries(ts, snap.changelog_manifests, pruning, added_only=False)

    def schema(self, schema_id: int) -> TableSchema:
        return schema_by_id(self.file_io, schema_id)

    def warm(self, ts: TableSchema, snap: Snapshot) -> None:
        read_entries(self.file_io, snap.delta_manifests, ts, ())
        read_entries(self.file_io, snap.changelog_manifests, ts, ())

    def _entries(
        self, ts: TableSchema, metas: Sequence[Any], pruning: Expr, added_only: bool
    ) -> list[DataFile]:
        entries = read_entries(self.file_io, metas, ts, referenced_columns(pruning))
        if added_only:
            entries = entries.filter(pc.equal(entries.column("kind"), ADD))
        return data_files_from_table(prune_entries(entries, ts, pruning), ts)

    # -- consumers ---------------------------------------------------------------------

    def consumer_ids(self) -> list[str]:
        return self.consumer_files.ids()

    def consumer(self, consumer_id: str) -> ConsumerProgress | None:
        return self.consumer_files.get(consumer_id)

    def consumers(self) -> list[ConsumerProgress]:
        return self.consumer_files.list()

    def register_consumer(
        self, consumer_id: str, next_snapshot_id: int, properties: Mapping[str, str] | None = None
    ) -> ConsumerProgress:
        return self.consumer_files.register(consumer_id, next_snapshot_id, properties)

    def commit_consumer(
        self, consumer_id: str, next_snapshot_id: int, properties: Mapping[str, str] | None = None
    ) -> ConsumerProgress:
        return self.consumer_files.commit(consumer_id, next_snapshot_id, properties)


def source_for(file_io: FileIO) -> TableSource:
    """The source of the table at ``file_io``'s root: raylake's where its schema files
    are, Paimon's where only Paimon's are, else raylake's (a table not created yet)."""
    raylake = RaylakeSource(file_io)
    if raylake.exists():
        return raylake
    from raylake.paimon.source import PaimonSource

    paimon = PaimonSource(file_io)
    return paimon if paimon.exists() else raylake


def source_class(ts: TableSchema) -> type[TableSource]:
    """The source of a table schema's format, which names the schema's kind."""
    if ts.table_format == RaylakeSource.format:
        return RaylakeSource
    from raylake.paimon.source import PaimonSource

    return PaimonSource


def raylake_kind_class(primary_key: Sequence[str]) -> type[TableKind]:
    """The kind of a raylake table with this primary key (none: an append table); known
    from the layout alone, so a write can check its mode before the table exists."""
    # Imported when first asked for: the primary-key kind builds on the committer,
    # which itself consults kinds.
    if primary_key:
        from raylake.table.pk.kind import PrimaryKeyKind

        return PrimaryKeyKind
    from raylake.table.append import AppendKind

    return AppendKind


def _schema_ids(file_io: FileIO) -> list[int]:
    """The table's schema ids; a path that is a file is a TableLocationError naming it."""
    return at_table_location(file_io, lambda: schema_ids(file_io))


# -- pruning a raylake snapshot's files by their manifest statistics ------------------


class ManifestStats:
    """Adapts manifest columns to the expr module's StatsSource protocol."""

    def __init__(self, ts: TableSchema) -> None:
        self._ts = ts
        self._schema = ts.arrow_schema

    def has_stats(self, column: str) -> bool:
        return column in self._schema.names and has_min_max(self._schema.field(column).type)

    def min(self, column: str) -> pc.Expression:
        return pc.field("stats", self._ts.stats_key(column), "min")

    def max(self, column: str) -> pc.Expression:
        return pc.field("stats", self._ts.stats_key(column), "max")

    def null_count(self, column: str) -> pc.Expression:
        return pc.field("stats", self._ts.stats_key(column), "null_count")

    def row_count(self) -> pc.Expression:
        return pc.field("row_count")


def pruned_live_files(
    file_io: FileIO, ts: TableSchema, snap: Snapshot, pruning: Expr
) -> list[DataFile]:
    """The live files of a snapshot that may hold rows matching ``pruning``."""
    if isinstance(pruning, AlwaysTrue):
        with SnapshotManager(file_io).reading(snap.id):
            return live_data_files(file_io, snap.base_manifests, ts)
    # Decode only the rows that survive pruning.
    return data_files_from_table(pruned_live_entries(file_io, ts, snap, pruning), ts)


def pruned_live_entries(
    file_io: FileIO, ts: TableSchema, snap: Snapshot, pruning: Expr
) -> pa.Table:
    """The manifest rows of a snapshot's live files that may hold rows matching
    ``pruning``, with the statistics of its columns only (cold planning of wide tables)."""
    with SnapshotManager(file_io).reading(snap.id):
        live = live_files_of(file_io, snap.base_manifests, ts, referenced_columns(pruning))
    return prune_entries(live, ts, pruning)


def prune_entries(entries: pa.Table, ts: TableSchema, pruning: Expr) -> pa.Table:
    """Manifest rows (read with ``pruning``'s statistics) that may hold matching rows."""
    if isinstance(pruning, AlwaysTrue) or not entries.num_rows:
        return entries
    return entries.filter(might_match(pruning, ManifestStats(ts)))
