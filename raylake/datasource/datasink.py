"""LakeDatasink: write a Ray Dataset into a raylake table as one atomic snapshot.

``on_write_start`` (driver) opens or creates the table, checks the dataset's schema
and pins the base snapshot; each write task writes data files and returns small
commit messages; ``on_write_complete`` (driver) commits them all at once. Every
data file of a job is named ``ray-<job id>-<uuid>.parquet``, so that a failed job can
find and delete the files of tasks that had already finished — Ray hands
``on_write_failed`` only the error, not their results.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

import pyarrow as pa
from ray.data.block import Block, BlockAccessor
from ray.data.datasource import Datasink
from ray.data.datasource.datasink import WriteResult

from raylake.arguments import (
    check_flag,
    check_instance,
    check_mapping,
    refuse_unknown_keywords,
)
from raylake.datasource.block_schema import arrow_schema, dataset_types, typed_by_rows
from raylake.errors import (
    InvalidOptionError,
    SchemaArgumentError,
    SchemaMismatchError,
    TableNotFoundError,
)
from raylake.format.schema import TableSchema
from raylake.format.snapshot import SnapshotManager
from raylake.format.table_spec import TableSpec
from raylake.io import FileIO
from raylake.table import CommitMessage, Snapshot, Table, open_table
from raylake.table.aborted import outcome_unknown
from raylake.table.catalog import (
    check_layout,
    new_table_schema,
    open_or_join_table,
    table_columns,
    table_exists,
)
from raylake.table.conform import check_schema as check_table_schema
from raylake.table.evolve import (
    commit_planned_schema,
    fill_missing_columns,
    merged_columns,
    schema_mode_arg,
    with_new_columns,
)
from raylake.table.new_tables import check_new_location, drop_new_table
from raylake.table.source import check_writable, raylake_kind_class
from raylake.table.table import create_writer
from raylake.table.visible import check_visible, refuse_process_local
from raylake.table.writer import DATA_DIR, writing
from raylake.table.written_partitions import (
    PartitionOverwriteMode,
    check_dynamic_mode,
    is_dynamic,
    partition_overwrite_mode_arg,
)

if TYPE_CHECKING:
    from raylake.datasource._ray_compat import TaskContext

logger = logging.getLogger(__name__)

SinkMode = Literal["append", "overwrite", "upsert"]
_JOB_PREFIX = "ray"


@dataclass(frozen=True)
class TaskCommit:
    """What one write task returns: its index (commit order) and its commit messages."""

    task_index: int
    messages: tuple[CommitMessage, ...]


class LakeDatasink(Datasink[TaskCommit]):
    """Write with ``ds.write_datasink(LakeDatasink(uri, mode=...))``.

    ``mode`` defaults to ``"append"`` for append tables and ``"upsert"`` for
    primary-key tables; ``"overwrite"`` replaces the whole table, or with
    ``partition_overwrite_mode="dynamic"`` (Spark's) only the partitions the dataset
    has rows in. A missing table is
    created (``create_if_missing``) from ``schema`` or else from the dataset's schema,
    with ``partition_by``/``primary_key``/``buckets``/``options``. After the write,
    :attr:`snapshot` holds the committed snapshot (None if nothing was committed).
    ``schema_mode="merge"`` adds the dataset's columns that the table lacks when the
    write starts, and writes nulls for the table columns the dataset lacks.
    """

    # What one job pins (reset by _end_job).
    _table_schema: TableSchema | None
    _base_snapshot_id: int | None
    _job_id: str
    _new_table: Table | None  # the table this job created, if it did
    _writing_marker: str = ""  # open_or_join_table's: keeps a new table while the job runs
    _known_schema: pa.Schema | None  # the dataset's, from check_schema

    @refuse_unknown_keywords
    def __init__(
        self,
        uri: str,
        *,
        mode: SinkMode | None = None,
        schema: pa.Schema | None = None,
        create_if_missing: bool = True,
        partition_by: Sequence[str] | None = (),
        primary_key: Sequence[str] | None = (),
        buckets: int | None = None,
        options: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        commit_properties: Mapping[str, str] | None = None,
        schema_mode: str = "strict",
        partition_overwrite_mode: PartitionOverwriteMode = "static",
    ) -> None:
        self.merge = schema_mode_arg(schema_mode) == "merge"
        if mode is not None and mode not in get_args(SinkMode):
            # An InvalidOptionError, as it always was: an InvalidArgumentError now.
            raise InvalidOptionError("mode", mode, f"expected one of {list(get_args(SinkMode))}")
        self.partition_overwrite_mode = partition_overwrite_mode_arg(partition_overwrite_mode)
        check_dynamic_mode(self.partition_overwrite_mode, mode)
        if schema is not None:
            check_instance(
                "schema", schema, pa.Schema, "a pyarrow.Schema or None", SchemaArgumentError
            )
        refuse_process_local(uri, "write_lake")
        self.file_io = FileIO(uri, storage_options)
        self.mode = mode
        self._create = _Create(
            schema,
            check_flag("create_if_missing", create_if_missing),
            TableSpec.of(
                partition_by=partition_by, primary_key=primary_key, buckets=buckets, options=options
            ),
        )
        self._properties = dict(check_mapping("commit_properties", commit_properties, "str") or {})
        self._end_job()
        self.snapshot: Snapshot | None = None
        if table_exists(uri, storage_options=storage_options):
            tbl = open_table(uri, storage_options=storage_options)
            # A layout asked for that the table lacks: refused here, not once Ray has run
            # the dataset up to its first block.
            check_layout(tbl, self._create.layout, given_only=True)
            self._resolve_mode(tbl)
            if schema is not None:
                # The data's schema, as Table.from_pandas takes it: checked as the data's
                # is (SchemaMismatchError naming the column), not ignored for the table's.
                self._check(tbl, schema)
        elif create_if_missing:
            self._check_new_mode()
            check_new_location(uri, storage_options)
            self._check_new_table(None)  # schema= without a layout column: refused here

    def __repr__(self) -> str:
        done = "" if self.snapshot is None else f", committed snapshot {self.snapshot.id}"
        return f"LakeDatasink({self.file_io.uri!r}, mode={self.mode!r}{done})"

    @property
    def min_bytes_per_write(self) -> int:
        """Set so that Ray never fuses the write with the map before it: a fused
        ``map_batches(f)->Write`` hands ``on_write_start`` the schema of ``f``'s *input*
        (Ray 2.60), and the table would be checked against, or created from, the wrong
        columns. One byte: every non-empty block is a write input of its own, as unfused."""
        return 1

    # -- driver: start ---------------------------------------------------------------

    def check_schema(self, schema: Any) -> None:
        """Check a dataset's schema against the table (or the ``schema=`` a new table gets)
        on the driver, before any task runs: :func:`write_lake` calls it with
        ``ds.schema(fetch_if_missing=False)``. Takes a ``pyarrow.Schema``, a
        ``ray.data.Schema`` or None (not known yet: ``on_write_start`` checks it).
        Raises :class:`SchemaMismatchError` naming the column, :class:`SchemaError` when
        a ``partition_by`` or ``primary_key`` column of a table it would create is not in
        that schema, or :class:`TableNotFoundError` when the table is missing and may not
        be created.
        """
        data_schema = arrow_schema(schema)
        self._known_schema = data_schema
        uri, storage_options = self.file_io.uri, self.file_io.storage_options
        if table_exists(uri, storage_options=storage_options):
            tbl = open_table(uri, storage_options=storage_options)
            self._resolve_mode(tbl)
            if data_schema is not None:
                self._check(tbl, data_schema)
        elif not self._create.create_if_missing:
            raise TableNotFoundError(uri)
        else:
            self._check_new_table(data_schema, typed_by_rows(schema))

    def _check_new_mode(self) -> None:
        """Refuse a mode the table this sink would create cannot take (``"upsert"``
        without a primary key, ``"append"`` with one), known from the layout alone:
        ``on_write_start`` would refuse it only once Ray runs the dataset."""
        if self.mode is not None:
            spec = self._create.layout
            raylake_kind_class(spec.primary_key).check_write_mode(self.mode, where=self.file_io.uri)

    def _check_new_table(
        self, data_schema: pa.Schema | None, typed_later: frozenset[str] = frozenset()
    ) -> None:
        """The checks ``on_write_start`` makes when it creates the table, made from the
        schema known before execution (``schema=``, else the dataset's): the layout's
        columns exist, and the data fits ``schema=``. ``typed_later``: the dataset's
        columns whose type its rows tell (a pandas object column; null here), which
        ``on_write_start`` checks: a string key of a DataFrame was refused as "type null"."""
        columns = self._create.schema or data_schema
        if columns is None:
            return
        if self._create.schema is None and typed_later:
            columns = pa.schema(
                [f.with_type(pa.string()) if f.name in typed_later else f for f in columns]
            )
        new_table_schema(table_columns(columns), self._create.layout)
        if data_schema is not None and self._create.schema is not None:
            check_table_schema(table_columns(data_schema), table_columns(self._create.schema))

    def _end_job(self) -> None:
        """Forget what one job pinned, so that a sink used for another job starts afresh:
        Ray calls ``on_write_start`` only when a first bundle arrives, and a job without
        any (``ds.limit(0)``) went on from the last job's base snapshot, so that its
        overwrite conflicted with that job's own commit."""
        self._table_schema = None
        self._base_snapshot_id = None
        self._job_id = ""
        self._new_table = None
        self._known_schema = None
        if self._writing_marker:  # the job's files are committed or deleted: it may go
            self.file_io.delete_quietly([self._writing_marker])
        self._writing_marker = ""

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        """Open or create the table, check the data's schema, pin the base snapshot."""
        self._job_id = uuid.uuid4().hex[:16]
        self.snapshot = None
        self._new_table = None
        data_schema = dataset_types(arrow_schema(schema), self._known_schema)
        tbl = self._open_or_create(data_schema)
        if data_schema is not None and self.merge:
            tbl = self._with_new_columns(tbl, data_schema)
        self._pin(tbl)
        if data_schema is not None:
            # Fails on the driver, naming the column, before any task writes a file.
            try:
                self._check(tbl, data_schema)
            except Exception as exc:
                self.on_write_failed(exc)  # drops the table if this call created it
                raise

    def _with_new_columns(self, tbl: Table, data_schema: pa.Schema) -> Table:
        """``tbl`` under its latest schema plus the new columns of the first bundle and
        of the whole dataset (its blocks may bring different ones), planned but not
        committed: ``on_write_complete`` commits them with the data, so that a failed
        write adds no column."""
        given = (data_schema, self._known_schema, self._create.schema)  # schema=: the data's
        schemas = [s for s in given if s is not None]
        _, planned = with_new_columns(tbl, *(tbl.kind.input_schema(s) for s in schemas))
        return Table(tbl.file_io, planned, tbl.source)

    def _check(self, tbl: Table, data_schema: pa.Schema) -> None:
        data = tbl.kind.input_schema(data_schema)
        if self.merge:  # columns the table lacks are added; those it has must fit
            known = pa.schema([f for f in data if f.name in tbl.schema.names])
            check_table_schema(known, merged_columns(tbl.schema, data))
        else:
            check_table_schema(data, tbl.schema)

    def _pin(self, tbl: Table) -> None:
        self._resolve_mode(tbl)
        self._table_schema = tbl.table_schema
        latest = tbl.latest_snapshot()
        self._base_snapshot_id = None if latest is None else latest.id

    def _open_or_create(self, data_schema: pa.Schema | None) -> Table:
        spec = self._create
        tbl, created, self._writing_marker = open_or_join_table(
            self.file_io.uri,
            spec.schema or data_schema,
            job_prefix=self._file_prefix,
            create_if_missing=spec.create_if_missing,
            spec=spec.layout,
            storage_options=self.file_io.storage_options,
            schema_hint="The dataset is empty: pass schema= to LakeDatasink/write_lake.",
        )
        self._new_table = tbl if created else None
        return tbl

    def _resolve_mode(self, tbl: Table) -> None:
        check_writable(tbl, "writing")  # a Paimon table: refused, naming its format
        if self.mode is None:
            self.mode = cast(SinkMode, tbl.kind.default_write_mode)
        tbl.kind.check_write_mode(self.mode, where=self.file_io.uri)

    # -- workers: write --------------------------------------------------------------

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> TaskCommit:
        """Write this task's blocks into data files; on any error delete them and re-raise."""
        if self._table_schema is None:
            raise RuntimeError("LakeDatasink.write called before on_write_start")
        # Files written where the driver does not see them: its commit would not find them.
        check_visible(self.file_io)
        new_writer = create_writer(self.file_io, self._table_schema, file_prefix=self._file_prefix)
        with writing(new_writer) as writer:
            for block in blocks:
                rows = BlockAccessor.for_block(block).to_arrow()
                if not rows.num_rows:
                    # A block a filter emptied may have no columns at all: it holds
                    # nothing to write, and its schema is not the dataset's.
                    continue
                if self.merge:
                    rows = fill_missing_columns(rows, self._table_schema)
                try:
                    writer.write(rows)
                except SchemaMismatchError as exc:
                    raise self._named_first_block(exc) from None
            messages = writer.prepare_commit()
        return TaskCommit(ctx.task_idx, tuple(messages))

    @property
    def _first_block_only(self) -> bool:
        """Whether the table's columns came from the dataset's first block alone: Ray
        knows a mapped dataset's schema only by running it, and without ``schema=`` the
        columns of a table this job created, or added by ``schema_mode="merge"``, are
        that block's."""
        unknown = self._known_schema is None and self._create.schema is None
        return unknown and (self._new_table is not None or self.merge)

    def _named_first_block(self, exc: SchemaMismatchError) -> SchemaMismatchError:
        """``exc``, saying where the table's columns came from when that explains it: a
        first block holding no value of a column (its type null), or without a column
        later blocks bring, which the table then refuses."""
        if not self._first_block_only:
            return exc
        return SchemaMismatchError(
            f"{exc}. Ray did not know this dataset's schema before running it (a "
            "map_batches output), so the table's columns were taken from its first block: "
            "pass schema= (every column, with its type) to write_lake or LakeDatasink",
            column=exc.column,
            expected=exc.expected,
            actual=exc.actual,
        )

    @property
    def _file_prefix(self) -> str:
        return f"{_JOB_PREFIX}-{self._job_id}"

    # -- driver: finish --------------------------------------------------------------

    def on_write_complete(self, write_result: WriteResult[TaskCommit]) -> None:
        """Commit every task's messages as one snapshot, in task order (upsert order)."""
        self.snapshot = None
        if self._table_schema is None:  # no input bundle ever arrived: an empty dataset
            self._job_id = uuid.uuid4().hex[:16]
            # A new table takes the dataset's schema where Ray knew it (ds.limit(0)).
            self._pin(self._open_or_create(self._known_schema))
        assert self._table_schema is not None
        results = sorted(
            (r for r in write_result.write_returns if r is not None), key=lambda r: r.task_index
        )
        messages = [m for r in results for m in r.messages]
        if self.merge:  # the columns on_write_start planned, just before the data
            commit_planned_schema(self.file_io, self._table_schema)
        overwrites = self.mode == "overwrite" and not is_dynamic(
            self.mode, self.partition_overwrite_mode, self._table_schema.partition_keys
        )  # a dynamic overwrite of no rows replaces no partition
        if not any(not m.is_empty for m in messages) and not overwrites:
            logger.info("nothing to commit to %s", self.file_io.uri)
        else:
            tbl = Table(self.file_io, self._table_schema)
            self.snapshot = tbl.commit(
                messages,
                mode=self.mode or "append",
                partition_overwrite_mode=self.partition_overwrite_mode,
                base_snapshot_id=self._base_snapshot_id,
                commit_user=self._file_prefix,
                properties=self._properties,
            )
        self._end_job()  # a failed commit keeps it: on_write_failed cleans up after it

    def _job_committed(self) -> bool:
        """Whether a snapshot made after this job started was committed by this job, or
        may have been: one expired meanwhile (a concurrent expiration) cannot tell, and
        the snapshots after it may still hold this job's files, as they would after any
        commit (as in ``snapshots_after``, an expired snapshot is no error)."""
        snapshots = SnapshotManager(self.file_io)
        latest = snapshots.latest_id()
        for snapshot_id in range((self._base_snapshot_id or 0) + 1, (latest or 0) + 1):
            snap = snapshots.read_if_present(snapshot_id)
            if snap is None or snap.commit_user == self._file_prefix:
                return True
        return False

    def on_write_failed(self, error: Exception) -> None:
        """Delete every data file this job wrote; remove a table this job created, if no
        snapshot landed in it (left behind, it would refuse the corrected job)."""
        if not self._job_id:
            return  # Ray calls this again after on_write_start's own call
        try:
            self._clean_up(error)
        finally:
            self._end_job()

    def _clean_up(self, error: Exception) -> None:
        if outcome_unknown(error):  # the commit may be visible: its files must stay
            logger.warning(
                "commit to %s has an unknown outcome; keeping its files", self.file_io.uri
            )
            return
        if self._job_committed():
            # The snapshot references this job's files: deleting them would break the table.
            logger.warning(
                "write to %s failed after its commit (or after a snapshot since its start "
                "was expired); keeping its files",
                self.file_io.uri,
            )
            return
        prefix = f"{self._file_prefix}-"
        mine = [
            rel for rel, _ in self.file_io.list_files(DATA_DIR) if _basename(rel).startswith(prefix)
        ]
        self.file_io.delete_quietly(mine)
        logger.warning("write to %s failed; deleted %d file(s)", self.file_io.uri, len(mine))
        if self._new_table is not None:
            drop_new_table(self._new_table)


@dataclass(frozen=True)
class _Create:
    """Whether and how a missing table is created."""

    schema: pa.Schema | None
    create_if_missing: bool
    layout: TableSpec


def _basename(rel: str) -> str:
    return rel.rsplit("/", 1)[-1]
