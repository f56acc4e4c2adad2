"""The table kinds of Paimon tables: read-only strategies behind raylake's scans.

Reads of every entry point (Ray Data, Torch, TF, Spark, the CLI) go through
``ReadContext`` -> the kind's ``read_batches``; these kinds read Paimon files
(raylake/paimon/read.py). Writes, deletes, compaction and change planning raise an
error that names the format.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raylake.errors import UnsupportedOperationError
from raylake.expr import Expr, filter_on_columns
from raylake.format.manifest import DataFile
from raylake.io import FileIO
from raylake.paimon.append_read import plain_batches, plain_table, split_files, usable
from raylake.paimon.fallback import conformed, fallback_context, is_fallback, split_by_branch
from raylake.paimon.meta import PaimonFileSlice
from raylake.paimon.read import read_splits
from raylake.table.kind import TableKind, kind_of
from raylake.table.split import Split
from raylake.table.writer import TableWriter

if TYPE_CHECKING:
    from raylake.format.schema import TableSchema
    from raylake.format.snapshot import Snapshot
    from raylake.table.changes import ChangeRange, ChangeSplit
    from raylake.table.scan import ReadContext
    from raylake.table.table import Table


def read_only(uri: str, what: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"{what} is not supported: {uri} is an Apache Paimon table, which raylake reads "
        "but does not write (format 'paimon', read-only in this version)"
    )


class _PaimonKind(TableKind):
    write_modes = ()

    @property
    def default_write_mode(self) -> str:
        raise read_only(self._uri, "writing")

    @property
    def _uri(self) -> str:
        paimon = getattr(self.ts, "paimon", None)
        return paimon.uri if paimon is not None else "the table"

    def check_write_mode(self, mode: str, where: str = "") -> None:
        raise read_only(where or self._uri, f"writing (mode {mode!r})")

    def new_writer(self, file_io: FileIO, *, file_prefix: str = "data") -> TableWriter:
        raise read_only(file_io.uri, "writing")

    def plan_splits(
        self,
        snapshot_id: int,
        files: list[DataFile],
        column_indices: Sequence[int] | None,
        target_size: int,
    ) -> list[Split]:
        raise UnsupportedOperationError("Paimon tables are planned by raylake.paimon.scan")

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

    def exact_row_count(self, split: Split) -> int | None:
        fallback = self._fallback()
        if fallback is not None and is_fallback(split):
            return kind_of(fallback).exact_row_count(split)
        return self._exact_row_count(split)

    def _fallback(self) -> TableSchema | None:
        info = getattr(self.ts, "paimon", None)
        return None if info is None else info.fallback

    def _exact_row_count(self, split: Split) -> int | None:
        raise NotImplementedError

    def plan_changes(self, rng: ChangeRange) -> list[ChangeSplit]:
        raise read_only(self._uri, "reading changes between snapshots")

    def read_changelog(
        self, file_io: FileIO, snap: Snapshot, columns: Sequence[str] | None
    ) -> pa.Table:
        raise read_only(file_io.uri, "reading a snapshot's changelog")

    def compact(self, file_io: FileIO, *, full: bool) -> Snapshot | None:
        raise read_only(file_io.uri, "compact()")

    def delete(self, tbl: Table, keys_or_filter: Any) -> Snapshot | None:
        raise read_only(tbl.uri, "delete()")


class PaimonAppendKind(_PaimonKind):
    name = "append"
    described = "a Paimon append table"

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
        info = getattr(self.ts, "paimon", None)
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
