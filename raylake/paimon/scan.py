"""Planning a Paimon scan into raylake splits, from the snapshot's manifests only.

Append tables: every live file is independent; files are packed into splits of one
(partition, bucket). Primary-key tables: a bucket's files are grouped into sections of
overlapping key ranges (each merged as a whole) and packed into bucket-aligned splits.
Files are pruned by partition values and key statistics; an append table's files also
by value statistics. A primary-key file is never pruned on a value predicate: an
overlapping file's newer version of a row could otherwise win the merge wrongly, or an
older one reappear.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from raylake.arguments import refuse_unknown_keywords
from raylake.errors import UnknownColumnError, UnsupportedPaimonError
from raylake.expr import (
    AlwaysTrue,
    Expr,
    bind,
    filter_on_columns,
    might_match,
    referenced_columns,
)
from raylake.format.snapshot import Snapshot
from raylake.format.types import has_min_max
from raylake.io import FileIO
from raylake.paimon.deletion import DeletionFile, deletion_files
from raylake.paimon.fallback import fallback_snapshot
from raylake.paimon.manifest import EntryDecoder, PaimonFile, live_files, snapshot_manifests
from raylake.paimon.meta import PaimonFileSlice, PaimonInfo, PaimonTableSchema
from raylake.paimon.partition_names import partition_text
from raylake.table.kind import kind_of
from raylake.table.pk.read import overlap_sections
from raylake.table.scan import ManifestStats, TableScan
from raylake.table.split import ReadUnit, Split, pack_sections, pack_slices, partition_sort_key

DEFAULT_TARGET = 128 << 20
OPEN_FILE_COST = 4 << 20
# Decoded Parquet is several times its size on disk; a rough, constant guess.
MEMORY_PER_DISK_BYTE = 3


@dataclass(frozen=True)
class PaimonScan(TableScan):
    """A raylake scan over a Paimon table; ``at()`` also switches to the snapshot's schema."""

    schemas_by_id: Mapping[int, PaimonTableSchema] | None = None

    def __post_init__(self) -> None:
        if self.table_source is None:
            from raylake.paimon.source import PaimonSource

            object.__setattr__(self, "table_source", PaimonSource(self.file_io))

    def at(self, snapshot_id: int | None = None, as_of: datetime | int | None = None) -> TableScan:
        moved = super().at(snapshot_id, as_of)
        if (snapshot_id is None and as_of is None) or not self.schemas_by_id:
            return moved
        snap = moved.snapshot()
        if snap is None or snap.schema_id == self.table_schema.schema_id:
            return moved
        ts = self.schemas_by_id[snap.schema_id]
        for c in moved.columns or ():
            if c not in ts.column_names:
                raise UnknownColumnError(c, ts.column_names)
        # The filter was bound under the latest schema: a column it names may be missing
        # from the snapshot's, or of another type (Arrow then failed in the read).
        bound = bind(moved.filter, ts.arrow_schema)
        return replace(moved, table_schema=ts, columns=moved.columns, filter=bound).pin()

    @refuse_unknown_keywords
    def plan(self) -> list[Split]:
        """The kind's splits of the snapshot's live files (Paimon's split size)."""
        snap = self.snapshot()
        ts = self.table_schema
        assert isinstance(ts, PaimonTableSchema)
        info = ts.info
        if snap is None:
            return (
                [] if info.fallback is None else self.stamped(self._fallback_splits(None, ts, []))
            )
        kind = kind_of(ts)
        files = self.source.live_files(ts, snap, kind.pruning_filter(self.filter))
        target = self.split_target_size or DEFAULT_TARGET
        splits = kind.plan_splits(snap.id, files, self._column_indices(), target)
        if info.fallback is not None:
            splits += self._fallback_splits(snap, ts, snapshot_files(self.file_io, info, snap))
        elif self._latest_fallback() is not None:
            # Paimon reads an older snapshot with the table's fallback branch too, under
            # that snapshot's schema; raylake checks the branch against the latest only.
            raise UnsupportedPaimonError(
                info.uri,
                f"snapshot {snap.id} of schema {ts.schema_id} with the table's "
                f"'scan.fallback-branch'={self._latest_fallback()!r} (raylake reads a "
                "fallback branch beside snapshots of the latest schema only)",
            )
        return self.stamped(splits)

    def _latest_fallback(self) -> str | None:
        if not self.schemas_by_id:
            return None
        latest = self.schemas_by_id[max(self.schemas_by_id)]
        return latest.info.options.fallback_branch if latest.info.fallback else None

    def _fallback_splits(
        self, snap: Snapshot | None, ts: PaimonTableSchema, files: list[PaimonFile]
    ) -> list[Split]:
        """The fallback branch's splits of the partitions the main snapshot lacks (after
        the filter's partition predicate, as Paimon lists them)."""
        info = ts.info
        other = info.fallback
        branch = info.options.fallback_branch
        assert other is not None and branch is not None
        on_partitions = filter_on_columns(self.filter, set(ts.partition_keys))
        complete = {f.partition for f in prune_files(files, ts, on_partitions)}
        their_snap = fallback_snapshot(self.file_io, branch, snap)
        if their_snap is None:
            return []
        found = snapshot_files(self.file_io, other.info, their_snap)
        missing = [f for f in found if f.partition not in complete]
        # Planned by the branch's kind, under its schema.
        kind = kind_of(other)
        pruning = kind.pruning_filter(self.filter)
        pieces = batch_slices(self.file_io, other, their_snap, missing, pruning)
        branched: list[Any] = [replace(s, branch=branch) for s in pieces]
        target = self.split_target_size or DEFAULT_TARGET
        return kind.plan_splits(their_snap.id, branched, self._column_indices(), target)


def decoder(file_io: FileIO, info: PaimonInfo) -> EntryDecoder:
    """The decoder of the table's manifest entries (its schemas, partition directories)."""
    return EntryDecoder(
        file_io,
        info.schemas,
        info.current,
        partition_path(info),
        data_evolution=info.options.data_evolution,
    )


def snapshot_files(file_io: FileIO, info: PaimonInfo, snap: Snapshot) -> list[PaimonFile]:
    """The files live at ``snap`` (its base and delta manifests)."""
    return live_files(decoder(file_io, info), snapshot_manifests(file_io, snap))


def batch_slices(
    file_io: FileIO,
    ts: PaimonTableSchema,
    snap: Snapshot,
    files: list[PaimonFile],
    pruning: Expr,
    levels: Callable[[int], bool] | None = None,
) -> list[PaimonFileSlice]:
    """``files`` (live at ``snap``) as a batch read sees them: level 0 left out where
    Paimon's batch read leaves it out (or the ``levels`` given kept), pruned, with their
    deletion vectors."""
    info = ts.info
    if levels is not None:
        files = [f for f in files if levels(f.level)]
    elif skips_level0(info):
        files = [f for f in files if f.level > 0]
    if info.options.data_evolution:
        # A file's statistics cover only the columns it holds, and may be of values a
        # newer file replaced: pruning one file of a row range would leave its rows
        # without those columns. Only partitions prune.
        pruning = filter_on_columns(pruning, set(ts.partition_keys))
    dvs = deletion_files(file_io, snap, info.options.index_in_data_dir)
    return [file_slice(f, dvs, 1.0, info) for f in prune_files(files, ts, pruning)]


def stream_levels(info: PaimonInfo, producer: str) -> Callable[[int], bool]:
    """The levels whose rows a Paimon stream has delivered by a snapshot, as its whole
    start reads them (DataTableStreamScan.tryFirstPlan): with a ``lookup`` changelog
    producer levels above 0 (a compaction will look level 0 up and write its
    changelog), with ``full-compaction`` the top level only (the next full compaction
    writes the changelog of the rest); otherwise every level, level 0 too where a batch
    read leaves it out (deletion vectors, first-row: the COMPACT that makes those rows
    visible there gives a stream nothing)."""
    if producer == "lookup":
        return lambda level: level > 0
    if producer == "full-compaction":
        top = info.options.num_levels - 1
        return lambda level: level == top
    return lambda level: True


def skips_level0(info: PaimonInfo) -> bool:
    """Whether a batch read leaves out level-0 files, as Paimon's does: with deletion
    vectors (a compaction marks the rows its level-0 files replace) and with first-row
    (level-0 rows become visible once compaction has looked them up)."""
    opts = info.options
    return bool(info.current.primary_keys) and (
        opts.deletion_vectors or opts.merge_engine == "first-row"
    )


def column_fraction(ts: PaimonTableSchema, column_indices: Sequence[int] | None) -> float:
    """The share of a row's bytes the read columns hold, by count: a rough guess."""
    if column_indices is None:
        return 1.0
    return max(len(column_indices), 1) / max(len(ts.column_names), 1)


def sized(piece: PaimonFileSlice, fraction: float) -> PaimonFileSlice:
    """A slice whose in-memory size is that of ``fraction`` of its columns."""
    if fraction == 1.0:
        return piece
    return replace(piece, size_bytes=int(piece.file_size * MEMORY_PER_DISK_BYTE * fraction))


def file_slice(
    f: PaimonFile,
    dvs: Mapping[tuple[bytes, int, str], DeletionFile],
    fraction: float,
    info: PaimonInfo,
) -> PaimonFileSlice:
    ext = f.file_name.rsplit(".", 1)[-1].lower()
    if ext not in ("parquet", "orc", "avro", "blob"):
        raise UnsupportedPaimonError(
            info.uri,
            f"data file {f.path} is a {ext!r} file (raylake reads parquet, orc, avro and blob)",
        )
    if ext == "blob" and not info.options.data_evolution:
        raise UnsupportedPaimonError(
            info.uri,
            f"data file {f.path} is a BLOB column's .blob file in a table without "
            "'data-evolution.enabled' (its other columns lie in no file raylake can join)",
        )
    return PaimonFileSlice(
        path=f.path,
        row_groups=None,
        row_count=f.row_count,
        size_bytes=int(f.file_size * MEMORY_PER_DISK_BYTE * fraction),
        file_size=f.file_size,
        level=f.level,
        min_key=f.min_key or None,
        max_key=f.max_key or None,
        min_sequence=f.min_sequence,
        max_sequence=f.max_sequence,
        delete_row_count=-1 if f.delete_row_count is None else int(f.delete_row_count),
        schema_id=f.schema_id,
        deletion=_beside(dvs.get((f.partition_bytes, f.bucket, f.file_name)), f.path),
        file_format=ext,
        first_row_id=f.first_row_id,
        write_cols=f.write_cols,
        partition=f.partition,
        bucket=f.bucket,
        total_buckets=f.total_buckets,
    )


def _beside(dv: DeletionFile | None, data_path: str) -> DeletionFile | None:
    """A deletion vector whose index file lies in its data file's directory, found there."""
    if dv is None or not dv.in_data_dir:
        return dv
    return replace(dv, path=f"{data_path.rsplit('/', 1)[0]}/{dv.path}", in_data_dir=False)


def append_splits(snapshot_id: int, pieces: Sequence[PaimonFileSlice], target: int) -> list[Split]:
    """Files packed into splits of one bucket, in partition and bucket order and each
    bucket's in the order they were written: by their first sequence number, then in
    the order the manifests list them (Paimon's own append split generator sorts them
    so, stably; writers that number no sequences leave only the manifests' order)."""
    ordered = sorted(
        pieces,
        key=lambda p: (
            partition_sort_key(p.partition),
            p.bucket,
            p.min_sequence,
        ),
    )
    slices = [(p.partition, p.bucket, p) for p in ordered]
    return pack_slices(snapshot_id, slices, target, OPEN_FILE_COST)


def _summed_rows(section: list[PaimonFileSlice]) -> int:
    return sum(f.row_count for f in section)


def section_splits(
    snapshot_id: int,
    pieces: Sequence[PaimonFileSlice],
    target: int,
    sections: Callable[[list[PaimonFileSlice]], Iterable[list[PaimonFileSlice]]] = (
        overlap_sections
    ),
    section_rows: Callable[[list[PaimonFileSlice]], int] = _summed_rows,
) -> list[Split]:
    """Each bucket's files cut into ``sections`` (files read together; by default of
    overlapping keys), packed whole into splits of one bucket of about ``target`` bytes.
    A section holds ``section_rows`` rows before merging: the sum of its files' (keys),
    or of one file's (row ranges, whose files hold columns of the same rows)."""

    def units(members: list[PaimonFileSlice]) -> Iterator[ReadUnit]:
        for section in sections(members):
            yield ReadUnit(section, sum(s.size_bytes for s in section), section_rows(section))

    return pack_sections(snapshot_id, pieces, units, target)


# -- pruning ---------------------------------------------------------------------------


def prune_files(files: list[PaimonFile], ts: PaimonTableSchema, pruning: Expr) -> list[PaimonFile]:
    """The files whose partition values and statistics may hold rows matching ``pruning``."""
    if isinstance(pruning, AlwaysTrue) or not files:
        return files
    columns = [c for c in ts.column_names if c in referenced_columns(pruning)]
    schema = ts.arrow_schema
    stats = pa.table(
        {
            "row_count": pa.array([f.row_count for f in files], pa.int64()),
            "stats": pa.StructArray.from_arrays(
                [_column_stats(files, ts, c, schema.field(c).type) for c in columns],
                names=[ts.stats_key(c) for c in columns],
            )
            if columns
            else pa.nulls(len(files), pa.struct([])),
        }
    )
    mask = _might_match_mask(stats, pruning, ts)
    return [f for f, m in zip(files, mask) if m]


def _might_match_mask(stats: pa.Table, pruning: Expr, ts: PaimonTableSchema) -> list[bool]:
    indexed = stats.append_column("_i", pa.array(np.arange(stats.num_rows)))
    kept = indexed.filter(might_match(pruning, ManifestStats(ts))).column("_i").to_numpy()
    mask = np.zeros(stats.num_rows, dtype=bool)
    mask[kept] = True
    return mask.tolist()


def _column_stats(
    files: list[PaimonFile], ts: PaimonTableSchema, column: str, dtype: pa.DataType
) -> pa.StructArray:
    lows: list[Any] = []
    highs: list[Any] = []
    nulls: list[int | None] = []
    usable = has_min_max(dtype) and not pa.types.is_floating(dtype)  # NaN has no order
    partition_index = ts.partition_keys.index(column) if column in ts.partition_keys else None
    key_names = ts.info.current.trimmed_primary_keys if ts.primary_key else ()
    for f in files:
        if partition_index is not None:
            value = f.partition[partition_index]
            lows.append(value)
            highs.append(value)
            nulls.append(f.row_count if value is None else 0)
            continue
        if ts.primary_key and column in key_names and len(key_names) == 1:
            lows.append(f.min_key[0] if f.min_key else None)
            highs.append(f.max_key[0] if f.max_key else None)
            nulls.append(0)
            continue
        stats = f.value_stats
        lows.append(stats.min.get(column) if usable else None)
        highs.append(stats.max.get(column) if usable else None)
        nulls.append(stats.null_count.get(column))
    return pa.StructArray.from_arrays(
        [_array(lows, dtype), _array(highs, dtype), pa.array(nulls, pa.int64())],
        names=["min", "max", "null_count"],
    )


def _array(values: list[Any], dtype: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, dtype)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.nulls(len(values), dtype)


# -- partition directories -------------------------------------------------------------


def partition_path(info: PaimonInfo) -> Any:
    """A function from partition values to the ``k=v/.../`` directory Paimon writes them to."""
    keys = info.current.partition_keys
    types = info.current.types_of(list(keys))
    options = info.options
    default, legacy = options.partition_default_name, options.legacy_partition_name
    zone = options.session_time_zone

    def path(values: tuple[Any, ...]) -> str:
        parts = [
            f"{k}={partition_text(v, t, default, legacy, zone)}/"
            for k, v, t in zip(keys, values, types)
        ]
        return "".join(parts)

    return path
