"""Changes between two snapshots: the splits and the reader behind ``Table.changes``, a
stream's step and a stream's catch-up (docs/changes.md; issue 17).

The table kind decides how changes are found (``TableKind.plan_changes``) and read
(``TableKind.read_changes``); this module holds what every kind shares:

- :class:`ChangeRange`: what the kind plans from (two snapshots, the files live at
  each, the files one snapshot added, the snapshots in between), each read once and
  only when the kind asks for it;
- the splits: :class:`InsertSplit` (rows that are new as a whole), :class:`RemovedSplit`
  (rows of files that are gone as a whole), :class:`ChangelogSplit` (one bucket's
  changelog files) and :class:`DiffSplit` (one bucket's files at both snapshots, merged
  and compared);
- :class:`ChangeReadContext`: reads any of them into the output schema, with
  ``_rl_kind`` (``+I``/``-U``/``+U``/``-D``) when asked. Without the row kind, changes
  are **upserts**: inserts and after-images only (the stream's convention).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from raylake.expr import AlwaysTrue, Expr, referenced_columns
from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.format.snapshot import Snapshot
from raylake.io import FileIO
from raylake.io.read_errors import batches_retried, named_batches
from raylake.table.kind import kind_of
from raylake.table.scan import ReadContext
from raylake.table.source import TableSource
from raylake.table.split import BucketKey, Split, bucket_order, by_bucket
from raylake.table.stale_schema import stale_schema_batches

ROW_KIND = "_rl_kind"  # the column Table.changelog uses, which a primary-key writer accepts
ROW_KIND_FIELD = pa.field(ROW_KIND, pa.string(), nullable=False)
INSERT = "+I"
DELETE = "-D"


def _path(f: Any) -> str:
    return str(f.path)


@dataclass(frozen=True)
class _WholeSplitChange:
    """The rows of a table split, all of one row kind (the subclass says which)."""

    split: Split

    @property
    def partition(self) -> tuple[Any, ...]:
        return self.split.partition

    @property
    def bucket(self) -> int:
        return self.split.bucket

    @property
    def row_count(self) -> int:
        return self.split.row_count


@dataclass(frozen=True)
class InsertSplit(_WholeSplitChange):
    """The rows of a table split, each one an insert."""


@dataclass(frozen=True)
class RemovedSplit(_WholeSplitChange):
    """The rows of files that are gone (an append table's overwrite), each one a delete."""


@dataclass(frozen=True)
class ChangelogSplit:
    """One bucket's changelog files, in commit order; ``net``: they span several commits
    and fold into one change per key."""

    snapshot_id: int
    partition: tuple[Any, ...]
    bucket: int
    files: tuple[DataFile, ...]
    net: bool = False

    @property
    def row_count(self) -> int:
        return sum(f.row_count for f in self.files)


@dataclass(frozen=True)
class DiffSplit:
    """One bucket's files at two snapshots (planned once, carried here), merged and
    compared when read."""

    partition: tuple[Any, ...]
    bucket: int
    before: tuple[Split, ...]
    after: tuple[Split, ...]

    @property
    def row_count(self) -> int:
        """Rows in the bucket's files at the later snapshot, before merging: an estimate."""
        return sum(s.row_count for s in self.after)


ChangeSplit = InsertSplit | RemovedSplit | ChangelogSplit | DiffSplit


@dataclass(frozen=True)
class ChangeReadContext:
    """Everything a worker needs to read change splits: picklable, no table object."""

    file_io: FileIO
    table_schema: TableSchema
    columns: tuple[str, ...] | None = None
    filter: Expr = field(default_factory=AlwaysTrue)
    include_row_kind: bool = False
    batch_size: int = 131_072

    @property
    def output_schema(self) -> pa.Schema:
        return with_row_kind(self.read_context().output_schema, self.include_row_kind)

    def read_context(self) -> ReadContext:
        return ReadContext(
            self.file_io, self.table_schema, self.columns, self.filter, self.batch_size
        )

    def read(self, split: ChangeSplit) -> Iterator[pa.RecordBatch]:
        return self.read_all([split])

    def read_all(self, splits: Sequence[ChangeSplit]) -> Iterator[pa.RecordBatch]:
        """Runs of whole-file splits share one scan; the kind reads the rest split by split."""
        kind = kind_of(self.table_schema)
        run: list[Split] = []
        run_kind = INSERT
        for split in splits:
            whole = _whole_kind(split)
            if whole is not None and (not run or whole == run_kind):
                assert isinstance(split, InsertSplit | RemovedSplit)
                run.append(split.split)
                run_kind = whole
                continue
            yield from self._whole(run, run_kind)
            run = []
            if whole is not None:
                assert isinstance(split, InsertSplit | RemovedSplit)
                run, run_kind = [split.split], whole
            else:
                # A Table older than a widening reads under its older type: a value
                # that does not fit is named as the whole-file reads name it.
                policy = self.file_io.retry_policy
                read = functools.partial(kind.read_changes, self, split)
                named = named_batches(batches_retried(read, policy), policy.max_attempts)
                yield from stale_schema_batches(self.file_io, self.table_schema, named)
        yield from self._whole(run, run_kind)

    def read_table(self, splits: Sequence[ChangeSplit]) -> pa.Table:
        return pa.Table.from_batches(list(self.read_all(splits)), schema=self.output_schema)

    def _whole(self, splits: list[Split], row_kind: str) -> Iterator[pa.RecordBatch]:
        if not splits or (row_kind == DELETE and not self.include_row_kind):
            return  # upserts only: a delete is not one
        for batch in self.read_context().read_all(splits):
            if self.include_row_kind:
                kinds = pa.repeat(pa.scalar(row_kind), batch.num_rows)
                batch = batch.append_column(ROW_KIND_FIELD, kinds)
            yield batch

    def needed_columns(self) -> list[str]:
        """The projected columns and those the filter reads."""
        names = self.table_schema.column_names
        wanted = set(self.columns or names) | referenced_columns(self.filter)
        return [c for c in names if c in wanted]


def with_row_kind(schema: pa.Schema, include_row_kind: bool) -> pa.Schema:
    """``schema``, and after it the ``_rl_kind`` column when a change read includes it."""
    return schema.append(ROW_KIND_FIELD) if include_row_kind else schema


def _whole_kind(split: ChangeSplit) -> str | None:
    if isinstance(split, InsertSplit):
        return INSERT
    if isinstance(split, RemovedSplit):
        return DELETE
    return None


@dataclass
class ChangeRange:
    """What changed after ``before`` (None: the empty table) up to ``after``, as the kind
    asks for it. Each piece is read once, on first use.

    ``step``: ``after`` is one APPEND snapshot right after ``before`` (a stream's step),
    so its delta manifests hold what it added. ``use_changelog``: the kind may read
    changelog files instead of comparing states (a stream's catch-up does not: it reads
    two live-file sets, not every snapshot in between).
    """

    source: TableSource
    ts: TableSchema
    before: Snapshot | None
    after: Snapshot
    pruning: Expr = field(default_factory=AlwaysTrue)
    take: Callable[[DataFile], bool] | None = None
    column_indices: Sequence[int] | None = None
    step: bool = False
    use_changelog: bool = True
    # The snapshots before.id+1..after.id, oldest first; None when one is gone.
    load_snapshots: Callable[[], list[Snapshot] | None] | None = None
    # Set by the kind when it planned from changelog files rather than data files.
    from_changelog: bool = False
    # Set by file_changes: a file live at the start is gone at the end, in any shard.
    removed_any: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # Not the changes of a table created again since ts was read (same_table.py).
        self.source.check_opened_schema(self.ts, self.after)

    @property
    def file_io(self) -> FileIO:
        return self.source.file_io

    @property
    def target_size(self) -> int:
        return self.ts.table_options.split_target_size

    def live_before(self) -> list[DataFile]:
        if self.before is None:
            return []
        before = self.before
        return self._once("before", lambda: self._mine(self._all_live("before", before)))

    def live_after(self) -> list[DataFile]:
        return self._once("after", lambda: self._mine(self._all_live("after", self.after)))

    def added(self) -> list[DataFile]:
        """The files ``after`` added (its delta manifests): only for a step."""
        assert self.step, "added() describes one snapshot"
        return self._once("added", lambda: self.added_files(self.after))

    def added_files(self, snap: Snapshot) -> list[DataFile]:
        """The files ``snap`` added (its delta manifests), pruned and taken."""
        return self._mine(self.source.added_files(self.ts, snap, self.pruning))

    def snapshots(self) -> list[Snapshot] | None:
        if self.load_snapshots is None:
            return None
        return self._once("snapshots", self.load_snapshots)  # type: ignore[no-any-return]

    def changelog_files(self, snapshots: Sequence[Snapshot]) -> list[DataFile]:
        """The changelog files of the snapshots, in commit order."""
        return [
            f
            for s in snapshots
            for f in self._mine(self.source.changelog_files(self.ts, s, self.pruning))
        ]

    @property
    def before_id(self) -> int:
        return 0 if self.before is None else self.before.id

    def file_changes(
        self,
        identity: Callable[[Any], Any] = _path,
        expand: Callable[[list[Any]], list[Any]] | None = None,
    ) -> list[ChangeSplit]:
        """The files live only at the end as inserts, only at the start as removals: the
        whole change where files are independent (append tables). ``identity``: what
        makes a live file the same at both ends (its path; a Paimon file's deletion vector
        too). ``expand``: the end's files with those a compaction in the range wrote in
        place of the files they replaced (which hold the same rows), before they are taken."""
        before = [] if self.before is None else self._all_live("before", self.before)
        after = self._all_live("after", self.after)
        # From the empty table (start 0) the end's files are the change as they are:
        # nothing before to compare with, and put back as the files a compaction replaced
        # they would need that compaction's snapshot and those files, which expiration
        # may have deleted (SnapshotExpiredError, FileNotFoundError where the rows are live).
        if expand is not None and self.before is not None:
            after = expand(after)
        # Compared before the shard takes its files: a compaction (or a rewrite) may write
        # into one shard what it removed from another, and then this shard's files alone
        # would show its rows added (a stream's catch-up reads snapshot by snapshot
        # wherever removed_any says a file went, in any shard).
        old, new = {identity(f) for f in before}, {identity(f) for f in after}
        added = self._mine([f for f in after if identity(f) not in old])
        removed_all = [f for f in before if identity(f) not in new]
        self.removed_any = bool(removed_all)
        return [
            *(InsertSplit(s) for s in self.splits(self.after.id, added)),
            *(RemovedSplit(s) for s in self.splits(self.before_id, self._mine(removed_all))),
        ]

    def diffs(
        self,
        group: Callable[[Any, int], BucketKey] | None = None,
        identity: Callable[[Any], Any] = _path,
    ) -> list[ChangeSplit]:
        """A :class:`DiffSplit` per bucket (or ``group``) whose live files differ at the
        two ends: both ends merged and compared (primary-key tables)."""
        before = by_bucket(self.live_before(), group)
        after = by_bucket(self.live_after(), group)
        splits: list[ChangeSplit] = []
        for key in sorted(before.keys() | after.keys(), key=bucket_order):
            old, new = before.get(key, []), after.get(key, [])
            if {identity(f) for f in old} == {identity(f) for f in new}:
                continue
            old_splits = tuple(self.splits(self.before_id, old, whole=True))
            new_splits = tuple(self.splits(self.after.id, new, whole=True))
            splits.append(DiffSplit(key[0], key[1], old_splits, new_splits))
        return splits

    def splits(self, snapshot_id: int, files: list[DataFile], whole: bool = False) -> list[Split]:
        """The kind's splits of files (``whole``: every column, one split per bucket)."""
        if not files:
            return []
        indices = None if whole else self.column_indices
        target = 1 << 62 if whole else self.target_size
        return kind_of(self.ts).plan_splits(snapshot_id, files, indices, target)

    def _once(self, name: str, compute: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = compute()
        return self._cache[name]

    def _all_live(self, end: str, snap: Snapshot) -> list[DataFile]:
        """The live files at one end of the range, every shard's."""
        return self._once(  # type: ignore[no-any-return]
            f"all {end}", lambda: self.source.stream_files(self.ts, snap, self.pruning)
        )

    def _mine(self, files: list[DataFile]) -> list[DataFile]:
        return files if self.take is None else [f for f in files if self.take(f)]
