"""The primary-key table kind: upserts, bucket-aligned splits, merge-on-read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raylake.expr import Expr, filter_on_columns
from raylake.format.manifest import DataFile
from raylake.io import FileIO
from raylake.table.conform import conform
from raylake.table.kind import TableKind
from raylake.table.pk import bucket, changelog, changes, compaction, delete, read
from raylake.table.pk.schema import KIND, validate_primary_key_schema
from raylake.table.pk.write import PrimaryKeyTableWriter
from raylake.table.split import Split
from raylake.table.writer import CommitMessage, TableWriter

if TYPE_CHECKING:
    from raylake.format.snapshot import Snapshot
    from raylake.table.changes import ChangeRange, ChangeReadContext, ChangeSplit
    from raylake.table.scan import ReadContext
    from raylake.table.table import Table


class PrimaryKeyKind(TableKind):
    name = "primary-key"
    described = "a primary-key table"
    write_modes = ("upsert", "overwrite")

    def validate_schema(self) -> None:
        validate_primary_key_schema(self.ts)

    def new_writer(self, file_io: FileIO, *, file_prefix: str = "data") -> TableWriter:
        return PrimaryKeyTableWriter(file_io, self.ts, file_prefix=file_prefix)

    def input_schema(self, schema: pa.Schema) -> pa.Schema:
        """A primary-key table also accepts a changelog: rows with a ``_rl_kind`` column."""
        index = schema.get_field_index(KIND)
        return schema if index < 0 else schema.remove(index)

    @property
    def write_buckets(self) -> int:
        # Each bucket's files are written by one writer: its sequence numbers and its
        # sorted runs must not interleave with another writer's (docs/primary-keys.md).
        return self.ts.buckets

    def bucket_ids(self, rows: pa.Table) -> pa.Array:
        """Each row's bucket, by the hash the writer uses, from its (conformed) keys."""
        key_schema = pa.schema([self.ts.arrow_schema.field(k) for k in self.ts.primary_key])
        keys = conform(rows.select(list(self.ts.primary_key)), key_schema, self.ts.primary_key)
        ids = np.asarray(bucket.bucket_ids(keys.columns, self.ts.buckets), dtype=np.int32)
        return pa.array(ids, pa.int32())

    def commit_changelog(
        self, file_io: FileIO, latest: Snapshot | None, added: Sequence[DataFile]
    ) -> list[DataFile]:
        # A lookup changelog needs the commit order, which only the committer knows; it
        # is recomputed on every attempt (docs/primary-keys.md).
        return changelog.lookup_changelog(file_io, self.ts, latest, added)

    def after_commit(self, file_io: FileIO, messages: Sequence[CommitMessage]) -> None:
        touched = {(f.partition, f.bucket) for m in messages for f in m.new_files}
        compaction.auto_compact(file_io, self.ts, touched)

    def pruning_filter(self, filter: Expr) -> Expr:
        # Only key and partition predicates may prune: a value predicate could prune the
        # file holding a row's newest version and resurface an older one.
        return filter_on_columns(filter, {*self.ts.primary_key, *self.ts.partition_keys})

    def plan_splits(
        self,
        snapshot_id: int,
        files: list[DataFile],
        column_indices: Sequence[int] | None,
        target_size: int,
    ) -> list[Split]:
        return read.plan_primary_key_splits(
            snapshot_id, files, self.ts, column_indices, target_size
        )

    def read_batches(self, ctx: ReadContext, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
        return read.read_primary_key_splits(ctx, splits)

    def read_table(self, ctx: ReadContext, splits: Sequence[Split]) -> pa.Table:
        return read.read_primary_key_table(ctx, splits)

    def exact_row_count(self, split: Split) -> int | None:
        return read.exact_row_count(split)

    def read_changelog(
        self, file_io: FileIO, snap: Snapshot, columns: Sequence[str] | None
    ) -> pa.Table:
        return changelog.read_changelog(file_io, self.ts, snap, columns)

    def plan_changes(self, rng: ChangeRange) -> list[ChangeSplit]:
        return changes.plan_changes(rng)

    def read_changes(self, ctx: ChangeReadContext, split: ChangeSplit) -> Iterator[pa.RecordBatch]:
        return changes.read_changes(ctx, split)

    @property
    def changes_are_state_differences(self) -> bool:
        return True

    def step_needs_parent(self) -> bool:
        # Without a changelog, one snapshot's changes are a diff against its parent.
        return self.ts.table_options.changelog_producer == "none"

    def compact(self, file_io: FileIO, *, full: bool) -> Snapshot | None:
        return compaction.compact(file_io, self.ts, full=full)

    def delete(self, tbl: Table, keys_or_filter: Any) -> Snapshot | None:
        return delete.delete_rows(tbl, keys_or_filter)
