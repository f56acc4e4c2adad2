"""``merge_lake``: MERGE INTO a raylake table from a Ray Dataset (docs/merge.md).

Primary-key tables: the source is split by the bucket its keys hash to (the writer's
hash); one Ray task per bucket looks up that bucket's current rows, applies the
clauses and writes the changed rows. A target row's matches all live in its bucket,
so each task decides its rows alone.

Append tables: the target files that may match are dealt among tasks, each joining
its files with the whole source (one copy in the object store) and rewriting the
files holding changed rows; a source row is inserted when no task matched it.

Either way the driver commits every task's files as one snapshot, with the conflict
rule and retries of ``Table.merge``.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raylake.arguments import refuse_unknown_keywords
from raylake.errors import (
    CommitConflictError,
    InvalidArgumentError,
    UnsupportedOperationError,
)
from raylake.table.merge.builder import MergeResult, TableMerger
from raylake.table.merge.primary_key import source_bucket_ids
from raylake.table.source import check_writable
from raylake.table.visible import check_visible, refuse_process_local

if TYPE_CHECKING:
    from ray.data import Dataset

    from raylake.table.merge.plan import Clause, JoinOn

_BUCKET = "__raylake_merge_bucket__"
_PART = "part"
_PREFIX = "merge"
# Tasks of an append-table merge: target files are dealt round-robin among them.
_FILE_TASKS = 16


@refuse_unknown_keywords
def merge_lake(
    ds: Dataset,
    uri: str,
    on: Any,
    *,
    schema_mode: str = "strict",
    storage_options: Mapping[str, Any] | None = None,
) -> LakeMerger:
    """A merge builder whose source is ``ds``: add clauses as for :meth:`Table.merge`,
    then ``execute()`` runs Ray tasks and commits once from the driver.

    Primary-key tables (merged on their key, without by-source clauses): a task per
    bucket. Append tables: a task per group of target files, each with the whole
    source; the source rows no task matched are inserted by the driver.
    """
    import ray

    import raylake

    if not isinstance(ds, ray.data.Dataset):
        raise InvalidArgumentError("ds", ds, "a ray.data.Dataset")
    from raylake.datasource.block_schema import arrow_schema

    schema = arrow_schema(ds.schema())
    if schema is None:
        raise InvalidArgumentError("ds", ds, "a dataset with a known schema")
    refuse_process_local(uri, "merge_lake")
    tbl = raylake.open_table(uri, storage_options=storage_options)
    check_writable(tbl, "merge()")  # a Paimon table: refused, naming its format
    return LakeMerger(tbl, ds, schema, on, schema_mode=schema_mode)


class LakeMerger(TableMerger):
    def __init__(self, tbl: Any, ds: Dataset, schema: pa.Schema, on: Any, **kw: Any) -> None:
        super().__init__(tbl, schema.empty_table(), on, **kw)
        self._ds = ds

    def checked(self) -> tuple[Any, pa.Table, JoinOn, tuple[Clause, ...]]:
        """The builder's checks, and the source's column types against the target's.

        The builder checks types on the source's rows, and this source has none on the
        driver (only the dataset's schema): without this a string column into an int
        column would fail only in the tasks, after the source was read and shuffled."""
        from raylake.table.conform import check_types

        tbl, source, on, clauses = super().checked()
        check_types(self._source.schema, tbl.table_schema.arrow_schema)
        return tbl, source, on, clauses

    def execute(self) -> MergeResult:
        from raylake.format.snapshot import SnapshotManager
        from raylake.table.merge.commit import check_schema_current
        from raylake.table.merge.execute import split_by, with_attempts

        def attempt() -> MergeResult:
            # Checked each attempt, as Table.merge does: a retry after a concurrent schema
            # change merges under the new schema, and keeps the columns it added.
            tbl, _, on, clauses = self.checked()
            split = split_by(tbl.table_schema, on, clauses)
            if split is None:
                raise UnsupportedOperationError(
                    "merge_lake merges into a primary-key table on its primary key, without "
                    "when_not_matched_by_source clauses; for other merges pass the dataset's "
                    "rows to Table.merge (ds.to_arrow_refs())"
                )
            snap = SnapshotManager(tbl.file_io).latest()
            check_schema_current(tbl, snap)
            prefix = f"{_PREFIX}-{uuid.uuid4().hex[:16]}"
            try:
                if split == "bucket":
                    return self._merge_primary_key(tbl, snap, on, clauses, prefix)
                return self._merge_append(tbl, snap, on, clauses, prefix)
            except CommitConflictError:
                raise  # tried again
            except BaseException:
                _delete_prefixed(tbl, prefix)  # what tasks that finished wrote
                raise

        return self.adopt_schema(with_attempts(attempt))

    def _merge_primary_key(
        self, tbl: Any, snap: Any, on: JoinOn, clauses: tuple[Clause, ...], prefix: str
    ) -> MergeResult:
        from raylake.table.merge.primary_key import commit_primary_key_parts

        parts = self._run_tasks(tbl, snap.id if snap else None, on, clauses, prefix)
        return commit_primary_key_parts(tbl, snap, parts)

    def _merge_append(
        self, tbl: Any, snap: Any, on: JoinOn, clauses: tuple[Clause, ...], prefix: str
    ) -> MergeResult:
        """A task per group of target files, each joining its files with the whole
        source (shared through the object store); the driver's last task inserts the
        source rows no task matched."""
        import ray

        from raylake.table.merge.execute import (
            append_part,
            candidate_files,
            finish_append,
            pruning_for,
        )
        from raylake.table.merge.plan import NOT_MATCHED

        refs = self._ds.to_arrow_refs()
        source = _source_table(refs, tbl.schema, self._source, on)
        files = candidate_files(tbl, snap, pruning_for(on, source, tbl.table_schema, clauses))
        updates = tuple(c for c in clauses if c.group != NOT_MATCHED)
        source_ref = ray.put(source)
        groups = [files[i::_FILE_TASKS] for i in range(min(_FILE_TASKS, len(files)))]

        @ray.remote
        def merge_files(group: list[Any], src: pa.Table, index: int) -> Any:
            check_visible(tbl.file_io)  # or its files would be written where none looks
            return append_part(tbl, snap, group, src, on, updates, file_prefix=f"{prefix}-{index}")

        refs = [merge_files.remote(g, source_ref, i) for i, g in enumerate(groups)]
        # Every task ends before an error is raised: ray.get raises at the first failure
        # while the other tasks still write, and the attempt's cleanup missed their files.
        ray.wait(refs, num_returns=len(refs))
        parts = ray.get(refs)
        return finish_append(tbl, snap, files, parts, source, on, clauses, file_prefix=prefix)

    def _run_tasks(
        self,
        tbl: Any,
        snapshot_id: int | None,
        on: JoinOn,
        clauses: tuple[Clause, ...],
        prefix: str,
    ) -> list[Any]:
        source_keys = dict(on.pairs)
        key_names = [source_keys[k] for k in tbl.table_schema.primary_key]
        storage = tbl.file_io
        # The schema the merge planned (with the source's new columns under
        # schema_mode="merge"), not the stored one: it is committed with the data.
        table_schema = tbl.table_schema

        def add_bucket(batch: pa.Table) -> pa.Table:
            return batch.append_column(_BUCKET, source_bucket_ids(table_schema, batch, key_names))

        def merge_bucket(rows: pa.Table) -> pa.Table:
            from raylake.format.snapshot import SnapshotManager
            from raylake.table.merge.builder import conform_source
            from raylake.table.merge.primary_key import primary_key_part
            from raylake.table.table import Table

            check_visible(storage)  # or its files would be written where none looks
            own = Table(storage, table_schema)
            snap = None if snapshot_id is None else SnapshotManager(storage).get(snapshot_id)
            source = conform_source(rows.drop_columns([_BUCKET]), own.schema, on)
            part = primary_key_part(own, snap, source, on, clauses, file_prefix=prefix)
            return pa.table({_PART: pa.array([pickle.dumps(part)], pa.binary())})

        import ray

        bucketed = _blocks_with_rows(self._ds.map_batches(add_bucket, batch_format="pyarrow"))
        if not bucketed:
            return []  # nothing to merge: no task, and the driver commits nothing
        grouped = ray.data.from_arrow_refs(bucketed).groupby(_BUCKET)
        out = grouped.map_groups(merge_bucket, batch_format="pyarrow")
        return [pickle.loads(row[_PART]) for row in out.take_all()]


def _blocks_with_rows(ds: Dataset) -> list[Any]:
    """The refs of ``ds``'s blocks that hold rows.

    Ray does not call a map on a block without rows and passes it on as it is, without
    the bucket column (a filter that kept no row of a block leaves one without any
    column): its groupby then fails in a reduce task, sorting by a column that block
    lacks. Only the counts travel to the driver, not the rows."""
    import ray

    refs = ds.to_arrow_refs()
    num_rows = ray.remote(_count_rows)
    counts = ray.get([num_rows.remote(ref) for ref in refs])
    return [ref for ref, count in zip(refs, counts, strict=True) if count]


def _count_rows(block: pa.Table) -> int:
    return int(block.num_rows)


def _source_table(refs: list[Any], schema: pa.Schema, empty: pa.Table, on: JoinOn) -> pa.Table:
    """The dataset's rows as one table, conformed to the target's column types.

    Each block is conformed before they are joined: Ray's blocks may hold a column in
    different types (int32 in one, int64 in another; large_string and string), which
    Arrow's concatenation refuses, while each casts to the target's type."""
    import ray

    from raylake.table.merge.builder import conform_source

    tables = [
        conform_source(t, schema, on)
        for t in ray.get(refs)
        if isinstance(t, pa.Table) and t.num_rows
    ]
    if not tables:
        return conform_source(empty, schema, on)
    # Columns the target lacks are not conformed: those may still differ among blocks.
    return pa.concat_tables(tables, promote_options="permissive")


def _delete_prefixed(tbl: Any, prefix: str) -> None:
    """Delete the data files of a merge attempt that did not commit."""
    from raylake.datasource.datasink import _basename
    from raylake.table.writer import DATA_DIR

    mine = [rel for rel, _ in tbl.file_io.list_files(DATA_DIR) if _basename(rel).startswith(prefix)]
    tbl.file_io.delete_quietly(mine)
