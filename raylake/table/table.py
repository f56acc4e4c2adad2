"""The Table: one object over a table directory, with writes, reads and snapshots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

import pyarrow as pa

from raylake.arguments import check_flag, refuse_unknown_keywords
from raylake.errors import InvalidArgumentError
from raylake.expr import Expr
from raylake.format.consumer import ConsumerManager, ConsumerProgress
from raylake.format.schema import TableSchema
from raylake.format.schema_files import load_schema
from raylake.format.schema_files import schema_ids as schema_ids  # their home before issue 18
from raylake.format.schema_files import schema_path as schema_path
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.table.args import file_prefix_arg, properties_arg, snapshot_id_arg
from raylake.table.changes_scan import ChangesScan, changes_scan
from raylake.table.commit import commit_or_abort
from raylake.table.commit_args import (
    check_commit_args,
    check_messages_inside,
    commit_request,
    messages_arg,
    overwrite_arg,
)
from raylake.table.consumer_reset import reset_consumer
from raylake.table.evolve import UpdateSchema
from raylake.table.kind import TableKind, kind_of
from raylake.table.maintenance import (
    DEFAULT_ORPHAN_AGE,
    ExpireResult,
    OlderThan,
    OrphanResult,
    expire_snapshots,
    remove_orphan_files,
)
from raylake.table.source import RaylakeSource, TableSource, writes
from raylake.table.stale_schema import stale_schema_errors
from raylake.table.table_reads import TableReads
from raylake.table.write_once import write_once
from raylake.table.writer import CommitMessage, TableWriter
from raylake.table.written_partitions import PartitionOverwriteMode

if TYPE_CHECKING:
    from raylake.streaming.reader import StreamOptions, StreamReader
    from raylake.table.merge import TableMerger

WriteMode = Literal["append", "overwrite", "upsert"]


def create_writer(file_io: FileIO, ts: TableSchema, *, file_prefix: str = "data") -> TableWriter:
    """The writer for a table's kind; ``file_prefix`` starts every data file name."""
    return kind_of(ts).new_writer(file_io, file_prefix=file_prefix)


class Table(TableReads):
    """A raylake table. Cheap to create; holds no open files.

    Its snapshots, files and consumers come from its :class:`TableSource`
    (raylake/table/source.py): raylake's own, or another format's that raylake reads.
    """

    def __init__(
        self, file_io: FileIO, table_schema: TableSchema, source: TableSource | None = None
    ) -> None:
        self.file_io = file_io
        self.table_schema = table_schema
        self.source = RaylakeSource(file_io) if source is None else source

    @property
    def format(self) -> str:
        """The table format: "raylake", or "paimon" for a Paimon table raylake reads."""
        return self.source.format

    def __repr__(self) -> str:
        kind = self.kind.name
        return f"Table({self.uri!r}, {kind}, columns={self.table_schema.column_names})"

    @property
    def uri(self) -> str:
        return self.file_io.uri

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the table's rows."""
        return self.table_schema.arrow_schema

    @property
    def is_primary_key_table(self) -> bool:
        return self.table_schema.is_primary_key_table

    @property
    def kind(self) -> TableKind:
        """The table's kind (append or primary key): how it writes, plans and reads."""
        return kind_of(self.table_schema)

    # -- schema (docs/schema-evolution.md) ---------------------------------------------

    @writes("update_schema()")
    def update_schema(self) -> UpdateSchema:
        """Change the schema as one atomic commit::

            with tbl.update_schema() as u:
                u.add_column("z", pa.float32())
                u.rename_column("x", "x2")
                u.update_column("label", pa.int64())  # widening only
                u.delete_column("y")

        Each change is checked as it is made; an error commits nothing. Old data files
        are never rewritten: reads map them onto the new schema by field id.
        """
        return UpdateSchema(self)

    def refresh(self) -> Table:
        """Load the table's latest schema (after another process changed it); returns self."""
        self.table_schema = load_schema(self.file_io)
        return self

    @refuse_unknown_keywords
    def schema_at(self, snapshot_id: int) -> pa.Schema:
        """The Arrow schema of the table as of a snapshot (time travel reads it)."""
        return self.scan(snapshot_id=snapshot_id).table_schema.arrow_schema

    # -- snapshots -----------------------------------------------------------------------

    def snapshots(self) -> list[Snapshot]:
        return self.source.all()

    def latest_snapshot(self) -> Snapshot | None:
        return self.source.latest()

    @refuse_unknown_keywords
    def snapshot(self, snapshot_id: int) -> Snapshot:
        snapshot_id = snapshot_id_arg(snapshot_id)  # type: ignore[assignment]
        if snapshot_id is None:
            raise InvalidArgumentError("snapshot_id", None, "a snapshot id (an int >= 1)")
        return self.source.get(snapshot_id)

    # -- writes --------------------------------------------------------------------------

    @writes("writing")
    @refuse_unknown_keywords
    def new_writer(self, *, file_prefix: str = "data") -> TableWriter:
        """A writer for distributed writes: ``write`` many times, then ``prepare_commit``."""
        return create_writer(
            self.file_io, self.table_schema, file_prefix=file_prefix_arg(file_prefix)
        )

    @writes("commit()")
    @refuse_unknown_keywords
    def commit(
        self,
        messages: list[CommitMessage],
        *,
        mode: WriteMode = "append",
        overwrite_filter: str | Expr | None = None,
        partition_overwrite_mode: PartitionOverwriteMode = "static",
        base_snapshot_id: int | None = None,
        commit_user: str = "",
        commit_identifier: int | None = None,
        properties: Mapping[str, str] | None = None,
        allow_empty: bool = False,
    ) -> Snapshot | None:
        """Commit the messages of one or many writers as one snapshot.

        If the commit fails, the files named by the messages are deleted: nothing is
        left half-written, and committing the same messages again is refused. A call
        refused for its arguments (a wrong ``mode``, ``properties``, ...) touches
        nothing: correct it and commit the same messages. Messages that add and remove
        nothing make no snapshot (the latest one is returned, None for a table without
        snapshots) unless ``allow_empty=True``; an overwrite always commits (it empties
        what it replaces). See docs/decisions.md.
        """
        messages = messages_arg(messages)
        base_snapshot_id, commit_identifier = check_commit_args(
            mode, base_snapshot_id, commit_user, commit_identifier
        )
        properties = properties_arg(properties)
        allow_empty = check_flag("allow_empty", allow_empty)
        overwrite = overwrite_arg(
            mode, overwrite_filter, self.table_schema, partition_overwrite_mode
        )
        check_messages_inside(messages, self.table_schema, overwrite)
        request = commit_request(
            messages,
            overwrite,
            allow_empty=allow_empty,
            base_snapshot_id=base_snapshot_id,
            commit_user=commit_user,
            commit_identifier=commit_identifier,
            properties=properties,
        )
        if request is None:
            return self.latest_snapshot()
        return commit_or_abort(self.file_io, self.table_schema, request, check_files=True)

    @writes("write()")
    @refuse_unknown_keywords
    def write(
        self,
        data: Any,
        *,
        mode: WriteMode | None = None,
        overwrite_filter: str | Expr | None = None,
        partition_overwrite_mode: PartitionOverwriteMode = "static",
        properties: Mapping[str, str] | None = None,
        allow_empty: bool = False,
        schema_mode: str = "strict",
    ) -> Snapshot | None:
        """Write data as one commit and return the new snapshot.

        ``schema_mode="merge"`` first adds the columns of the data that the table lacks
        (nullable, at the end, one schema change) and writes nulls for table columns the
        data lacks; ``"strict"`` (the default) requires the table's columns.

        Data without rows commits nothing and returns the latest snapshot (None for a
        table without snapshots), unless ``allow_empty=True`` asks for an empty
        snapshot; ``mode="overwrite"`` with no rows commits, and empties the table or
        the partitions of ``overwrite_filter``.

        ``mode="append"`` adds rows; ``mode="overwrite"`` replaces the whole table, or,
        with ``overwrite_filter`` (a filter on partition columns only), just those
        partitions, and then every written row must lie inside them; or, with
        ``partition_overwrite_mode="dynamic"`` (Spark's), just the partitions the data
        has rows in (none for no rows). Primary-key tables default to ``"upsert"``.
        """
        if mode is None:
            mode = cast(WriteMode, self.kind.default_write_mode)
        return write_once(
            self,
            data,
            mode=mode,
            overwrite_filter=overwrite_filter,
            partition_overwrite_mode=partition_overwrite_mode,
            properties=properties,
            allow_empty=allow_empty,
            schema_mode=schema_mode,
        )

    @writes("merge()")
    @refuse_unknown_keywords
    def merge(
        self, source: Any, on: str | Sequence[str], *, schema_mode: str = "strict"
    ) -> TableMerger:
        """MERGE INTO this table from ``source`` (a pyarrow Table, RecordBatchReader,
        anything with ``__arrow_c_stream__``, or a pandas DataFrame), joined ``on`` a
        column, a list of columns or a condition ``"t.a = s.a and t.b = s.b"``::

            tbl.merge(source, on="id")
               .when_matched_update({"score": "s.score"}, predicate="s.ts > t.ts")
               .when_matched_delete(predicate="s.deleted")
               .when_not_matched_insert()
               .execute()   # MergeResult(inserted, updated, deleted, snapshot_id, ...)

        Clauses apply in SQL's order and meaning (first match wins); the result is one
        commit. ``schema_mode="merge"`` first adds the source's new columns. See
        docs/merge.md.
        """
        from raylake.table.merge import TableMerger

        return TableMerger(self, source, on, schema_mode=schema_mode)

    # -- primary-key tables (docs/primary-keys.md) --------------------------------------

    @writes("delete()")
    @refuse_unknown_keywords
    def delete(self, keys_or_filter: Any) -> Snapshot | None:
        """Delete rows as one commit.

        ``keys_or_filter`` is a filter (a string or expression, on any columns) or, for
        a primary-key table, the keys to delete (a pyarrow Table, pandas DataFrame, dict
        of columns or list of dicts holding the key columns). Keys that do not exist are
        ignored; if nothing matches, nothing is committed and the latest snapshot is
        returned. An append table rewrites the files holding matching rows without
        them (copy-on-write); a filter on partition columns only drops whole files.
        """
        return self.kind.delete(self, keys_or_filter)

    @writes("compact()")
    @refuse_unknown_keywords
    def compact(self, *, full: bool = False) -> Snapshot | None:
        """Rewrite files without changing what reads return (a COMPACT snapshot); None
        when there was nothing to compact. Primary-key tables merge each bucket's
        overlapping files (``full``: every bucket into one sorted run); append tables
        rewrite runs of small files (``full``: every partition whole; docs/maintenance.md).
        """
        # Compaction rewrites files under the latest schema, never an older one that
        # would leave out newer columns.
        full = check_flag("full", full)
        return self.refresh().kind.compact(self.file_io, full=full)

    @refuse_unknown_keywords
    def changelog(self, snapshot_id: int, *, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows one snapshot changed, with ``_rl_kind`` = ``+I``/``-U``/``+U``/``-D``.

        Needs the option ``changelog-producer`` = ``input`` or ``lookup``.
        """
        self.kind.check_changes("changelog()")
        if columns is not None:
            columns = list(self.scan(columns=columns).columns or ())
        snap = self.snapshot(snapshot_id)
        with stale_schema_errors(self.file_io, self.table_schema):  # a widened value
            return self.kind.read_changelog(self.file_io, snap, columns)

    @refuse_unknown_keywords
    def changes(
        self,
        start: int | datetime,
        end: int | datetime | None = None,
        *,
        columns: Sequence[str] | None = None,
        filter: str | Expr | None = None,
        include_row_kind: bool = False,
    ) -> ChangesScan:
        """What changed after snapshot ``start`` up to and including ``end`` (the latest
        when None), as a scan: ``to_arrow()``, ``to_batches()``, ``plan()``/``read_split``.

        ``start``/``end`` are snapshot ids or datetimes (the snapshot current at that
        time); ``start=0`` means before the first commit. An append table yields the
        rows committed in the range; a primary-key table the net change of every key
        changed in it. ``include_row_kind`` adds ``_rl_kind`` (``+I``/``-U``/``+U``/
        ``-D``); without it the rows are upserts only (``+I`` and ``+U``), as in a
        stream. See docs/changes.md.

        A Paimon table reads the range's changelog files where it has a changelog
        producer, otherwise its merged delta files; the buckets an OVERWRITE in the range
        touched give their net change, both ends compared, and ``filter`` prunes
        partitions and files before any is read (docs/paimon.md).
        """
        return changes_scan(
            self.source,
            self.table_schema,
            start,
            end,
            columns=columns,
            filter=filter,
            include_row_kind=include_row_kind,
        )

    # -- streaming (docs/streaming.md) --------------------------------------------------

    def stream(
        self,
        *,
        consumer_id: str | None = None,
        options: StreamOptions | None = None,
        **keywords: Any,
    ) -> StreamReader:
        """A reader of the table's new snapshots: ``for plan in reader`` or ``async for``.

        ``options`` is a :class:`raylake.streaming.StreamOptions`; its fields may be
        given as keywords instead (they replace those of ``options``): ``start``
        (``"latest"``, ``"earliest"``, ``"latest-new"``, a snapshot id or a datetime),
        ``poll_interval``, ``shard=(i, n)`` / ``buckets`` / ``bucket_filter``,
        ``include_row_kind``, ``on_overwrite`` (``"refresh"``, ``"skip"``, ``"fail"``),
        ``columns``, ``filter``, ``catch_up_after`` and ``prefetch``. The defaults are
        the same for every format. With ``consumer_id`` the reader resumes where
        ``checkpoint()`` left off, and expiration keeps what it still needs.
        """
        from raylake.streaming.reader import StreamReader

        return StreamReader(self, consumer_id=consumer_id, options=options, **keywords)

    # -- maintenance and consumers (docs/maintenance.md) --------------------------------

    @writes("expire_snapshots()")
    @refuse_unknown_keywords
    def expire_snapshots(
        self,
        *,
        retain_last: int | None = None,
        older_than: OlderThan | None = None,
        consumers_older_than: OlderThan | None = None,
        dry_run: bool = False,
    ) -> ExpireResult:
        """Expire snapshots older than ``older_than`` beyond the newest ``retain_last``.

        ``retain_last`` defaults to the option ``snapshot.num-retained.min``;
        ``older_than`` (a datetime, an age as timedelta, or epoch millis) defaults to
        no age condition. Snapshots a registered consumer still needs, and the latest
        snapshot, are never expired. Files only expired snapshots use are deleted. Consumers
        idle since ``consumers_older_than`` (option ``consumer.expiration-time``) go first.
        """
        options = self.table_schema.table_options
        if retain_last is None:
            retain_last = options.snapshot_retain_min
        if consumers_older_than is None and options.consumer_expiration_millis is not None:
            consumers_older_than = timedelta(milliseconds=options.consumer_expiration_millis)
        return expire_snapshots(
            self.file_io,
            retain_last=retain_last,
            older_than=older_than,
            consumers_older_than=consumers_older_than,
            dry_run=check_flag("dry_run", dry_run),
        )

    @writes("remove_orphan_files()")
    @refuse_unknown_keywords
    def remove_orphan_files(
        self, *, older_than: OlderThan = DEFAULT_ORPHAN_AGE, dry_run: bool = False
    ) -> OrphanResult:
        """Delete files no snapshot references, last modified before ``older_than`` (1 day)."""
        dry_run = check_flag("dry_run", dry_run)
        return remove_orphan_files(self.file_io, older_than=older_than, dry_run=dry_run)

    def consumers(self) -> list[ConsumerProgress]:
        """The registered consumers and the snapshot each reads next."""
        return self.source.consumers()

    @refuse_unknown_keywords
    def consumer(self, consumer_id: str) -> ConsumerProgress | None:
        return self.source.consumer(consumer_id)

    @writes("reset_consumer()")
    @refuse_unknown_keywords
    def reset_consumer(self, consumer_id: str, snapshot_id: int) -> ConsumerProgress:
        """Register a consumer, or move it, so that it reads ``snapshot_id`` next.

        The snapshot must exist, or be the one after the latest (read only new commits).
        Safe against an expiration running at the same time: once this returns, the
        snapshot is kept (docs/maintenance.md).
        """
        return reset_consumer(self.source, self.file_io, consumer_id, snapshot_id)

    @writes("delete_consumer()")
    @refuse_unknown_keywords
    def delete_consumer(self, consumer_id: str) -> bool:
        """Unregister a consumer (True if it existed); its snapshots may then expire."""
        return ConsumerManager(self.file_io).delete(consumer_id)
