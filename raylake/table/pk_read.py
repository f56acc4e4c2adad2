"""Planning and reading primary-key tables: bucket-aligned splits, merge-on-read.

A bucket's files fall into *sections*: groups of files whose key ranges overlap
(transitively). Sections share no key, so each is merged on its own, and a
section of one file is read without merging at all (its keys are unique and
only its ``-D`` rows are dropped), with the whole filter pushed into the scan.

A section of several files is merged. Only key and partition predicates go below
the merge (every version of a key has the same key, so they keep or drop all of
them together); the rest of the filter runs on the merged rows, so an old
version can never reappear. Projections read the projected columns, the filter's
columns, the key and the system columns.

Memory: a single-file section streams in batches. A merged section holds the
projected columns of all its files at once, plus ~24 bytes per row for the sort
and its run ids, plus the merged output (for deduplicate only the key columns of
the section are held; value columns are read one file at a time). See
docs/primary-keys.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from raylake.expr import AlwaysTrue, Expr, filter_on_columns, referenced_columns, to_arrow
from raylake.io import FileIO
from raylake.table.bucket import integer_values
from raylake.table.manifest import DataFile
from raylake.table.merge_engines import merge
from raylake.table.pk_schema import DELETE, KIND, SEQ, MergeSpec, file_schema
from raylake.table.schema import TableSchema
from raylake.table.split import FileSlice, Split, projected_size, slice_file

_PARQUET = ds.ParquetFileFormat()


class _Ranged(Protocol):
    @property
    def min_key(self) -> tuple[Any, ...] | None: ...

    @property
    def max_key(self) -> tuple[Any, ...] | None: ...


R = TypeVar("R", bound=_Ranged)


def overlap_sections(files: Sequence[R]) -> list[list[R]]:
    """Group files into sections of transitively overlapping key ranges, in key order."""
    if any(f.min_key is None or f.max_key is None for f in files):
        return [list(files)] if files else []
    ordered = sorted(files, key=lambda f: (f.min_key, f.max_key))
    sections: list[list[R]] = []
    end: Any = None
    for f in ordered:
        if sections and f.min_key <= end:  # type: ignore[operator]
            sections[-1].append(f)
            end = max(end, f.max_key)
        else:
            sections.append([f])
            end = f.max_key
    return sections


# -- planning ----------------------------------------------------------------------------


def plan_primary_key_splits(
    snapshot_id: int,
    files: list[DataFile],
    ts: TableSchema,
    column_indices: Sequence[int] | None,
    target_size: int,
) -> list[Split]:
    """Bucket-aligned splits: whole sections of one bucket, packed up to ``target_size``."""
    buckets: dict[tuple[tuple[Any, ...], int], list[DataFile]] = {}
    for f in files:
        buckets.setdefault((f.partition, f.bucket), []).append(f)
    splits: list[Split] = []
    for (partition, bucket), members in sorted(buckets.items(), key=_bucket_order):
        pieces: list[FileSlice] = []
        size = 0
        for section in overlap_sections(members):
            section_size = sum(projected_size(f, column_indices) for f in section)
            if pieces and size + section_size > target_size:
                splits.append(_split(snapshot_id, partition, bucket, pieces))
                pieces, size = [], 0
            # Whole files: a merge needs every row of every version.
            pieces += [next(slice_file(f, 1 << 62, column_indices)) for f in section]
            size += section_size
        if pieces:
            splits.append(_split(snapshot_id, partition, bucket, pieces))
    return splits


def _bucket_order(item: tuple[tuple[tuple[Any, ...], int], Any]) -> tuple[Any, ...]:
    (partition, bucket), _ = item
    return (tuple((v is None, str(v)) for v in partition), bucket)


def _split(
    snapshot_id: int, partition: tuple[Any, ...], bucket: int, pieces: list[FileSlice]
) -> Split:
    return Split(
        snapshot_id=snapshot_id,
        partition=partition,
        bucket=bucket,
        files=tuple(pieces),
        row_count=sum(p.row_count for p in pieces),
        size_bytes=sum(p.size_bytes for p in pieces),
        needs_merge=True,
    )


def exact_row_count(split: Split) -> int | None:
    """Live rows of a split from metadata alone, when no section needs a merge."""
    sections = overlap_sections(split.files)
    if any(len(s) > 1 for s in sections):
        return None
    return sum(f.row_count - f.delete_row_count for f in split.files)


# -- reading -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadPlan:
    """What a primary-key read fetches, pushes down, and applies after the merge."""

    spec: MergeSpec
    output: tuple[str, ...]
    merge_columns: tuple[str, ...]  # read from each file of a merged section
    key_filter: pc.Expression | None  # safe below the merge
    residual: pc.Expression | None  # applied to merged rows
    full_filter: pc.Expression | None  # for single-file sections

    @classmethod
    def of(cls, ts: TableSchema, columns: Sequence[str] | None, filter: Expr) -> ReadPlan:
        spec = MergeSpec.of(ts)
        output = tuple(ts.column_names if columns is None else columns)
        keyish = {*ts.primary_key, *ts.partition_keys}
        filter_columns = referenced_columns(filter)
        pushed = filter_on_columns(filter, keyish)
        needed = [*ts.primary_key, *output, *sorted(filter_columns)]
        if spec.sequence_field:
            needed.append(spec.sequence_field)
        ordered = [c for c in ts.column_names if c in set(needed)]
        whole = None if isinstance(filter, AlwaysTrue) else to_arrow(filter)
        return cls(
            spec=spec,
            output=output,
            merge_columns=(*ordered, SEQ, KIND),
            key_filter=None if isinstance(pushed, AlwaysTrue) else to_arrow(pushed),
            residual=None if filter_columns <= keyish else whole,
            full_filter=whole,
        )


def read_merged_split(ctx: Any, split: Split) -> Iterator[pa.RecordBatch]:
    """The current rows of one primary-key split (``ReadContext.read`` calls this)."""
    yield from read_primary_key_splits(ctx, [split])


def _sections(splits: Sequence[Split]) -> tuple[list[FileSlice], list[list[FileSlice]]]:
    """The single-file sections (as files) and the sections that need a merge."""
    singles: list[FileSlice] = []
    merged: list[list[FileSlice]] = []
    for split in splits:
        for section in overlap_sections(split.files):
            if len(section) == 1:
                singles.extend(section)
            else:
                merged.append(section)
    return singles, merged


def read_primary_key_splits(ctx: Any, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
    """Rows of many splits: all single-file sections in one parallel scan, then merges."""
    ts: TableSchema = ctx.table_schema
    plan = ReadPlan.of(ts, ctx.columns, ctx.filter)
    singles, merged = _sections(splits)
    if singles:
        yield from _single_files_dataset(ctx.file_io, ts, singles).to_batches(
            **_single_scan_args(plan, singles), batch_size=ctx.batch_size
        )
    for section in merged:
        for pa_table in merge_section(ctx.file_io, ts, plan, section):
            yield from pa_table.to_batches(max_chunksize=ctx.batch_size)


def read_primary_key_table(ctx: Any, splits: Sequence[Split]) -> pa.Table:
    """All rows of many splits as one table (a threaded scan of single-file sections)."""
    ts: TableSchema = ctx.table_schema
    plan = ReadPlan.of(ts, ctx.columns, ctx.filter)
    singles, merged = _sections(splits)
    parts = []
    if singles:
        dataset = _single_files_dataset(ctx.file_io, ts, singles)
        parts.append(dataset.to_table(**_single_scan_args(plan, singles)))
    for section in merged:
        parts += list(merge_section(ctx.file_io, ts, plan, section))
    if len(parts) == 1:
        return parts[0]
    # Not concat_tables: it loses the row count of tables without columns (count()).
    return pa.Table.from_batches(
        [b for part in parts for b in part.to_batches()], schema=ctx.output_schema
    )


def _single_files_dataset(file_io: FileIO, ts: TableSchema, files: list[FileSlice]) -> ds.Dataset:
    fs = file_io.arrow_filesystem()
    fragments = [_PARQUET.make_fragment(file_io.full_path(f.path), filesystem=fs) for f in files]
    return ds.FileSystemDataset(fragments, schema=file_schema(ts), format=_PARQUET, filesystem=fs)


def _single_scan_args(plan: ReadPlan, files: list[FileSlice]) -> dict[str, Any]:
    """A single file's rows are final: drop its -D rows, and push the whole filter down."""
    condition = plan.full_filter
    if any(f.delete_row_count for f in files):
        live = pc.field(KIND) != pa.scalar(DELETE, pa.int8())
        condition = live if condition is None else live & condition
    return {"columns": list(plan.output), "filter": condition}


def read_file(
    file_io: FileIO,
    ts: TableSchema,
    f: FileSlice | DataFile,
    columns: Sequence[str],
    key_filter: pc.Expression | None = None,
) -> pa.Table:
    """One data file's columns, with ``_rl_seq`` made effective (its sequence base added)."""
    fragment = _PARQUET.make_fragment(
        file_io.full_path(f.path), filesystem=file_io.arrow_filesystem()
    )
    pa_table = fragment.to_table(schema=file_schema(ts), columns=list(columns), filter=key_filter)
    if f.sequence_base and SEQ in pa_table.column_names:
        i = pa_table.column_names.index(SEQ)
        shifted = pc.add(pa_table.column(i), pa.scalar(f.sequence_base, pa.int64()))
        pa_table = pa_table.set_column(i, pa_table.schema.field(i), shifted)
    return pa_table


def merge_section(
    file_io: FileIO, ts: TableSchema, plan: ReadPlan, section: Sequence[FileSlice | DataFile]
) -> Iterator[pa.Table]:
    """The merged, filtered, projected rows of one section of overlapping files."""
    if _newest_wins_by_file(plan.spec, section, ts):
        pieces = _dedupe_newest_first(file_io, ts, plan, section)
    else:
        rows = pa.concat_tables(
            [read_file(file_io, ts, f, plan.merge_columns, plan.key_filter) for f in section]
        )
        pieces = iter([merge(rows, plan.spec)])
    for piece in pieces:
        if plan.residual is not None:
            piece = piece.filter(plan.residual)
        yield piece.select(list(plan.output))


def _newest_wins_by_file(spec: MergeSpec, section: Sequence[Any], ts: TableSchema) -> bool:
    """Whether a deduplicate merge may go file by file, newest first.

    True when the single key column is integer-like (sorted files can be searched)
    and no two files' sequence ranges interleave, so the file with the higher
    sequences holds the newer version of every key the two share.
    """
    if spec.engine != "deduplicate" or spec.sequence_field or len(spec.key) != 1:
        return False
    if integer_values(pa.array([], ts.arrow_schema.field(spec.key[0]).type)) is None:
        return False
    ranges = sorted((f.min_sequence, f.max_sequence) for f in section)
    return all(prev[1] < nxt[0] for prev, nxt in itertools.pairwise(ranges))


def _dedupe_newest_first(
    file_io: FileIO, ts: TableSchema, plan: ReadPlan, section: Sequence[Any]
) -> Iterator[pa.Table]:
    """Deduplicate without a sort: a row survives unless a newer file has its key.

    Files are sorted by key, so each newer file's keys are binary-searched in the
    current file (newer files are usually the small ones). Only the keys of the
    files already read are held in memory.
    """
    key = plan.spec.key[0]
    columns = [c for c in plan.merge_columns if c != SEQ]
    newer: list[np.ndarray] = []
    for f in sorted(section, key=lambda f: f.max_sequence, reverse=True):
        pa_table = read_file(file_io, ts, f, columns, plan.key_filter)
        keys = integer_values(pa_table.column(key))
        assert keys is not None
        keep = np.asarray(pa_table.column(KIND).to_numpy()) != DELETE
        for shadow in newer:
            keep[_positions_of(keys, shadow)] = False
        newer.append(keys)
        yield pa_table.filter(pa.array(keep))


def _positions_of(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Positions in the sorted ``haystack`` of the ``needles`` it holds."""
    pos = np.searchsorted(haystack, needles)
    inside = pos < len(haystack)
    pos, needles = pos[inside], needles[inside]
    return pos[haystack[pos] == needles]
