"""The table kinds of Paimon tables: read-only strategies behind raylake's scans.

Reads of every entry point (Ray Data, Torch, TF, Spark, the CLI) go through
``ReadContext`` -> the kind's ``read_batches``; these kinds read Paimon files
(raylake/paimon/read.py). They plan a snapshot's files into splits, and a stream's
changes into the change splits every table kind uses (raylake/table/changes.py):

- a snapshot with changelog files: one ``ChangelogSplit`` per bucket, its rows with
  the row kinds they recorded (also for COMPACT snapshots, where a ``lookup`` or
  ``full-compaction`` producer writes them);
- otherwise an APPEND snapshot's delta files: an append table's as ``InsertSplit`` s,
  a primary-key bucket's as a ``ChangelogSplit`` with ``net=True`` (merged into each
  key's last version, a ``-D`` kept as a delete);
- a catch-up over many snapshots: the live files at both ends compared (append:
  ``InsertSplit`` / ``RemovedSplit``; primary key: a ``DiffSplit`` per bucket).

The source (raylake/paimon/source.py) is not writable: every write is refused before
any kind is asked, so the kinds have no writer and no write mode.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raylake.errors import SnapshotExpiredError, UnsupportedOperationError, UnsupportedPaimonError
from raylake.expr import Expr, filter_on_columns
from raylake.io import FileIO
from raylake.paimon.append_read import plain_batches, plain_table, split_files, usable
from raylake.paimon.evolution import group_rows, row_range_groups
from raylake.paimon.fallback import conformed, fallback_context, is_fallback, split_by_branch
from raylake.paimon.meta import PaimonFileSlice, PaimonTableSchema
from raylake.paimon.options import BUCKET_UNAWARE
from raylake.paimon.read import read_splits
from raylake.paimon.scan import append_splits, column_fraction, section_splits, sized
from raylake.table.kind import TableKind, kind_of
from raylake.table.split import Split, bucket_order

if TYPE_CHECKING:
    from raylake.format.schema import TableSchema
    from raylake.format.snapshot import Snapshot
    from raylake.table.changes import ChangeRange, ChangeReadContext, ChangeSplit
    from raylake.table.scan import ReadContext


class _PaimonKind(TableKind):
    write_modes = ()

    @property
    def pts(self) -> PaimonTableSchema:
        """The kind's schema: a Paimon one (PaimonSource names these kinds)."""
        assert isinstance(self.ts, PaimonTableSchema)
        return self.ts

    def read_batches(self, ctx: ReadContext, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        if self._fallback() is None:  # a main branch without one, or the fallback itself
            yield from self._read_main(ctx, splits)
            return
        main, other = split_by_branch(splits)
        yield from self._read_main(ctx, main)
        if other:  # scan.fallback-branch: read by the branch's kind, under its schema
            fallback = fallback_context(ctx)
            schema = ctx.output_schema
            for batch in kind_of(fallback.table_schema).read_batches(fallback, other):
                yield conformed(batch, schema)

    def _read_main(self, ctx: ReadContext, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        return read_splits(ctx, splits)

    def plan_splits(
        self,
        snapshot_id: int,
        files: list[Any],
        column_indices: Sequence[int] | None,
        target_size: int,
    ) -> list[Split]:
        ts = self.pts
        fraction = column_fraction(ts, column_indices)
        pieces = [sized(f, fraction) for f in files]
        if ts.primary_key:
            return section_splits(snapshot_id, pieces, target_size)
        if ts.info.options.data_evolution:
            return section_splits(snapshot_id, pieces, target_size, row_range_groups, group_rows)
        return append_splits(snapshot_id, pieces, target_size)

    def check_changes(self, what: str) -> None:
        """Changes read a snapshot's new files on their own: a data-evolution file holds
        some columns of rows other files hold, so they would return partial rows."""
        ts = self.pts
        if ts.info.options.data_evolution:
            raise UnsupportedPaimonError(
                ts.info.uri, f"{what} of a data-evolution table (rows joined across files)"
            )

    @property
    def changelog_at_compaction(self) -> bool:
        from raylake.paimon.changes import changelog_producer

        ts = self.pts
        return changelog_producer(ts) in ("lookup", "full-compaction")

    def exact_row_count(self, split: Split) -> int | None:
        fallback = self._fallback()
        if fallback is not None and is_fallback(split):
            return kind_of(fallback).exact_row_count(split)
        return self._exact_row_count(split)

    @property
    def bucket_count(self) -> int | None:
        # A rescale (a schema with another 'bucket', then an overwrite) leaves the
        # partitions it did not overwrite in the old count's buckets: the largest count of
        # any schema bounds them. A primary-key table's dynamic buckets (-1) have no bound;
        # an unbucketed append table's files lie in bucket 0.
        counts = [int(s.options.get("bucket", "-1")) for s in self.pts.info.schemas.values()]
        if BUCKET_UNAWARE in counts and self.ts.primary_key:
            return None
        return max([1, *counts])

    def _fallback(self) -> TableSchema | None:
        info = self.pts.paimon
        return None if info is None else info.fallback

    def _exact_row_count(self, split: Split) -> int | None:
        raise NotImplementedError

    def plan_changes(self, rng: ChangeRange) -> list[ChangeSplit]:
        if rng.step:
            snapshots = [rng.after]
        elif not rng.use_changelog:
            return self._compare(rng)
        else:
            snapshots = self._range_snapshots(rng)
        return self._from_files(rng, snapshots)

    def read_changelog(
        self, file_io: FileIO, snap: Snapshot, columns: Sequence[str] | None
    ) -> pa.Table:
        """The rows ``snap`` changed: its changelog files, or its delta files (merged); an
        OVERWRITE's net change, as ``changes()`` gives it (it writes no changelog)."""
        from raylake.paimon.source import PaimonSource
        from raylake.table.changes import ChangeRange, ChangeReadContext

        source = PaimonSource(file_io)
        if snap.commit_kind == "OVERWRITE":
            parent = None if snap.parent_id is None else source.get(snap.parent_id)
            rng = ChangeRange(source, self.ts, parent, snap, load_snapshots=lambda: [snap])
        else:  # the parent, where kept, as a stream's step reads it (sequence.field)
            parent = None if snap.parent_id is None else source.read_if_present(snap.parent_id)
            rng = ChangeRange(source, self.ts, parent, snap, step=True)
        picked = None if columns is None else tuple(columns)
        ctx = ChangeReadContext(file_io, self.ts, picked, include_row_kind=True)
        return ctx.read_table(self.plan_changes(rng))

    def _range_snapshots(self, rng: ChangeRange) -> list[Snapshot]:
        found = rng.snapshots()
        if found is None:  # one of the range is gone: expired (the ends were checked)
            earliest = rng.source.earliest_id() or rng.after.id
            raise SnapshotExpiredError(earliest - 1, earliest, rng.file_io.uri)
        return found

    def _changed(self, rng: ChangeRange, snap: Snapshot) -> tuple[str, list[Any]]:
        """("changelog" | "delta" | "none", the files holding what ``snap`` changed), as
        Paimon's streaming read finds them."""
        from raylake.paimon.changes import changelog_producer
        from raylake.paimon.snapshot import CHANGELOG_LIST

        ts = self.pts
        if snap.properties.get(CHANGELOG_LIST):
            return "changelog", rng.changelog_files([snap])
        if snap.commit_kind == "APPEND" and not (
            ts.primary_key and changelog_producer(ts) != "none"
        ):
            return "delta", (rng.added() if rng.step else rng.added_files(snap))
        return "none", []

    def _from_files(self, rng: ChangeRange, snapshots: list[Snapshot]) -> list[ChangeSplit]:
        """The changes of the snapshots' changelog or delta files, one split per bucket;
        the buckets an OVERWRITE touched give their net change, both ends compared
        (raylake/paimon/changes_diff.py)."""
        from raylake.paimon.changes import check_deltas_merge, deltas_need_both_ends
        from raylake.paimon.changes_diff import (
            ALL_BUCKETS,
            bucket_counts,
            diff_splits,
            group_of,
            overwritten,
        )
        from raylake.table.changes import ChangelogSplit, InsertSplit
        from raylake.table.scan import ReadContext

        ts = self.pts
        end = rng.after
        first = snapshots[0].id - 1 if snapshots else end.id
        ctx = ReadContext(rng.file_io, ts, None, rng.pruning)
        overwrites = [s for s in snapshots if s.commit_kind == "OVERWRITE" and not rng.step]
        ends = [] if rng.before is None else [rng.before]
        rescaled = bool(overwrites) and len(bucket_counts(ts, [*ends, *snapshots])) > 1
        group = group_of(ts, rescaled)
        compared: set[Any] = set()
        for snap in overwrites:
            compared |= overwritten(ctx, snap, group)
        sources: set[str] = set()
        by_bucket: dict[tuple[Any, int], list[Any]] = {}
        for snap in snapshots:
            if snap.commit_kind == "OVERWRITE":
                continue
            source, files = self._changed(rng, snap)
            if source == "none":
                continue  # a COMPACT snapshot without changelog changes no row
            sources.add(source)
            for f in files:
                if group(f.partition, f.bucket) not in compared:
                    by_bucket.setdefault((f.partition, f.bucket), []).append(f)
        if len(sources) > 1:
            raise UnsupportedPaimonError(
                rng.file_io.uri,
                "changes() over a range whose snapshots mix changelog and delta files",
            )
        source = next(iter(sources), "delta")
        if source == "delta" and ts.primary_key and by_bucket:
            check_deltas_merge(ts, rng.file_io.uri)
            # A step whose parent Paimon expired (it keeps a consumer's next snapshot, not
            # the one before) reads its delta files, as Paimon's own stream does.
            expired = rng.step and rng.before is None and end.parent_id is not None
            if deltas_need_both_ends(ts) and not expired:
                compared |= {group(partition, bucket) for partition, bucket in by_bucket}
                by_bucket = {}
            elif not set(ts.partition_keys) <= set(ts.primary_key):
                # A key moves partitions by a -D in its old bucket and a +I in its new
                # one: one split, whose deletes come first (raylake/paimon/changes.py).
                by_bucket = {((), ALL_BUCKETS): [f for fs in by_bucket.values() for f in fs]}
        rng.from_changelog = source == "changelog"
        splits: list[ChangeSplit] = []
        for (partition, bucket), fs in by_bucket.items():
            if source == "delta" and not ts.primary_key:
                splits += [InsertSplit(s) for s in rng.splits(end.id, fs)]
            else:
                net = source == "delta"
                splits.append(ChangelogSplit(end.id, partition, bucket, tuple(fs), net))
        splits += diff_splits(ctx, rng.source, first, end.id, compared, group)
        return sorted(splits, key=lambda s: bucket_order((s.partition, s.bucket)))

    def _compare(self, rng: ChangeRange) -> list[ChangeSplit]:
        """The change between the live files of two snapshots (a stream's catch-up): where
        the bucket count changed in between, whole partitions (keys moved between
        buckets: compared bucket by bucket, a key's insert could come before its delete)."""
        from raylake.paimon.changes_diff import group_of, rescaled_between

        ts = self.pts
        if not ts.primary_key:
            return rng.file_changes(_identity)
        rescaled = rescaled_between(ts, [*rng.live_before(), *rng.live_after()])
        return rng.diffs(group_of(ts, rescaled), _identity)

    def read_changes(self, ctx: ChangeReadContext, split: ChangeSplit) -> Iterator[pa.RecordBatch]:
        from raylake.paimon.changes import read_change_files
        from raylake.paimon.changes_diff import read_diff
        from raylake.table.changes import ChangelogSplit, DiffSplit
        from raylake.table.pk.changes import change_batches

        read = ctx.read_context()
        if isinstance(split, ChangelogSplit):
            files = [f for f in split.files if isinstance(f, PaimonFileSlice)]
            rows = read_change_files(read, files, split.net)
        elif isinstance(split, DiffSplit):
            rows = [read_diff(read, split)]
        else:
            raise UnsupportedOperationError(f"{self.described} has no {type(split).__name__}")
        yield from change_batches(ctx, rows)


class PaimonAppendKind(_PaimonKind):
    name = "append"
    described = "a Paimon append table"

    @property
    def shards_by_file(self) -> bool:
        """An unbucketed (``bucket`` = -1) table's rows have no key to keep together:
        stream shards split it by data file, as a raylake table of one bucket."""
        ts = self.pts
        return ts.info.options.bucket == -1

    def _read_main(self, ctx: ReadContext, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        if not usable(ctx) or self._joins_rows():
            yield from read_splits(ctx, splits)
            return
        plain, other = split_files(ctx, splits)
        yield from plain_batches(ctx, plain)
        if other:
            yield from read_splits(ctx, [_one_split(other)])

    def read_table(self, ctx: ReadContext, splits: Sequence[Split]) -> pa.Table:
        """Files that need no mapping are assembled by pyarrow on all cores."""
        if self._joins_rows() or (self._fallback() and any(is_fallback(s) for s in splits)):
            return super().read_table(ctx, splits)
        plain, other = split_files(ctx, splits)
        if not usable(ctx) or not plain or ctx.columns == ():
            return super().read_table(ctx, splits)
        parts = [plain_table(ctx, plain).cast(ctx.output_schema)]
        if other:
            parts.append(super().read_table(ctx, [_one_split(other)]))
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def pruning_filter(self, filter: Expr) -> Expr:
        return filter

    def _joins_rows(self) -> bool:
        """Data evolution: a row's columns may lie in several files (sections)."""
        info = self.pts.paimon
        return info is not None and info.options.data_evolution

    def _exact_row_count(self, split: Split) -> int | None:
        if split.sections:  # data evolution: a section's files hold the same rows
            if any(getattr(f, "deletion", None) is not None for f in split.files):
                return None
            return split.row_count
        total = 0
        for f in split.files:
            deletion = f.deletion if isinstance(f, PaimonFileSlice) else None
            if deletion is not None:
                if deletion.cardinality is None:
                    return None
                total -= deletion.cardinality
            total += f.row_count
        return total


class PaimonPrimaryKeyKind(_PaimonKind):
    name = "primary-key"
    described = "a Paimon primary-key table"

    def pruning_filter(self, filter: Expr) -> Expr:
        # Value predicates may not prune a file whose rows an older or newer file's
        # versions override: only the key and the partition decide before the merge.
        return filter_on_columns(filter, {*self.ts.primary_key, *self.ts.partition_keys})

    @property
    def changes_are_state_differences(self) -> bool:
        return True

    def step_needs_parent(self) -> bool:
        from raylake.paimon.changes import deltas_need_both_ends

        return deltas_need_both_ends(self.pts)

    def _exact_row_count(self, split: Split) -> int | None:
        """Rows of a split of compacted files only (each key once), from metadata."""
        total = 0
        for section in split.merge_sections():
            if len(section) != 1:
                return None
            (f,) = section
            if not isinstance(f, PaimonFileSlice) or f.level == 0 or f.deletion is not None:
                return None
            total += f.row_count - f.delete_row_count
        return total


def _identity(f: Any) -> tuple[str, Any]:
    """A live file as a snapshot sees it: its path and its deletion vector."""
    return (f.path, getattr(f, "deletion", None))


def _one_split(files: Sequence[PaimonFileSlice]) -> Split:
    """The files a dataset scan cannot read, as one split for the file-by-file reader."""
    return Split(
        snapshot_id=0,
        partition=(),
        bucket=0,
        files=tuple(files),
        row_count=sum(f.row_count for f in files),
        size_bytes=sum(f.size_bytes for f in files),
    )
