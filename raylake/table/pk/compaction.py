"""Compaction of primary-key tables: merge overlapping files into sorted runs.

Policy (docs/primary-keys.md): within a bucket, files whose key ranges overlap
form a *section*. A minor compaction rewrites every section of two or more files
into new top-level files that do not overlap; a full compaction rewrites every
bucket that has more than one file or any ``-D`` row into one sorted run. Each
rewrite merges *every* version of the keys it covers, so deletes can be dropped
(except with a sequence field, where a late, older row must stay hidden), and
the merged rows keep their effective sequences, so rows committed later still
win. The commit is a COMPACT snapshot; it conflicts with (and loses to) a
concurrent compaction of the same files.

Automatic compaction runs after a commit when a bucket it touched has a section
of more than ``compaction.max-overlapping-files`` files.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from raylake.errors import CommitConflictError, SnapshotNotFoundError
from raylake.format.manifest import DataFile, live_files_by_bucket
from raylake.format.schema import TableSchema
from raylake.format.schema_files import load_schema, schema_at_least
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.io import FileIO
from raylake.io.read_errors import named_store_errors
from raylake.progress import track
from raylake.table.aborted import abort_messages
from raylake.table.commit import CommitRequest, Committer
from raylake.table.pk.engines import merge
from raylake.table.pk.read import overlap_sections, read_file
from raylake.table.pk.schema import KIND, LEVEL_TOP, SEQ, MergeSpec
from raylake.table.pk.write import KeyedFileWriter
from raylake.table.replaced import conflict_if_replaced
from raylake.table.split import BucketKey
from raylake.table.writer import CommitMessage, writing

logger = logging.getLogger(__name__)

# Buckets compacted at once (each holds one section of merged rows in memory).
COMPACT_THREADS = 2


@dataclass(frozen=True)
class CompactionJob:
    """Rewritten files, not yet committed: the messages and the snapshot they were read from."""

    base_snapshot_id: int
    messages: tuple[CommitMessage, ...]


def compact(
    file_io: FileIO,
    ts: TableSchema,
    *,
    full: bool = False,
    buckets: Collection[BucketKey] | None = None,
) -> Snapshot | None:
    """Compact the latest snapshot (only ``buckets`` if given); None if nothing to do."""
    job = prepare_compaction(file_io, ts, full=full, buckets=buckets)
    return None if job is None else commit_compaction(file_io, ts, job)


def prepare_compaction(
    file_io: FileIO,
    ts: TableSchema,
    *,
    full: bool = False,
    buckets: Collection[BucketKey] | None = None,
) -> CompactionJob | None:
    """Merge and write the new files of a compaction of the latest snapshot."""
    latest = SnapshotManager(file_io).latest()
    if latest is None:
        return None
    # The snapshot's files may be of a schema newer than ``ts`` (one changed since the
    # caller loaded it): rewritten under ``ts`` they would lose the newer columns.
    ts = schema_at_least(file_io, ts, latest.schema_id)
    try:
        with SnapshotManager(file_io).reading(latest.id):
            groups = live_files_by_bucket(file_io, latest.base_manifests, ts)
    except SnapshotNotFoundError as exc:  # expired meanwhile: a concurrent change won
        raise conflict_if_replaced(file_io, ts, exc, "compaction") from exc
    spec = MergeSpec.of(ts)
    work = []
    for key, files in sorted(groups.items(), key=lambda item: repr(item[0])):
        sections = _rewrite_sets(files, full, spec, ts.table_options.target_file_size)
        if sections and (buckets is None or key in buckets):
            work.append((key, sections))
    # Buckets are independent: merge and write a few at once (pyarrow releases the GIL).
    with ThreadPoolExecutor(COMPACT_THREADS, thread_name_prefix="raylake-compact") as pool:
        futures = [
            pool.submit(_rewrite, file_io, ts, spec, key, sections, pack=full)
            for key, sections in work
        ]
        messages, errors = [], []
        for future in track(futures, "compact: buckets"):
            try:
                messages.append(future.result())
            except BaseException as exc:
                errors.append(exc)
    if errors:
        abort_messages(file_io, messages)
        raise conflict_if_replaced(file_io, ts, errors[0], "compaction") from errors[0]
    return CompactionJob(latest.id, tuple(messages)) if messages else None


def commit_compaction(file_io: FileIO, ts: TableSchema, job: CompactionJob) -> Snapshot:
    """Commit a compaction as a COMPACT snapshot, or delete its files and raise.

    It conflicts (CommitConflictError) when a concurrent commit already replaced
    a file it replaces; concurrent appends do not conflict.
    """
    request = CommitRequest(
        messages=job.messages, kind="COMPACT", base_snapshot_id=job.base_snapshot_id
    )
    try:
        # Its files may be of a newer schema than ``ts`` (prepare_compaction's); a failed
        # look at the schema is the commit's failure too: the files it wrote go.
        ts = schema_at_least(file_io, ts, load_schema(file_io).schema_id)
        return Committer(file_io, ts).commit(request)
    except BaseException as exc:
        abort_messages(file_io, job.messages, exc)
        raise


def auto_compact(
    file_io: FileIO, ts: TableSchema, touched: Collection[BucketKey]
) -> Snapshot | None:
    """Minor-compact the touched buckets that hold too many overlapping files.

    Called after a data commit, which has already succeeded: losing a race with
    another compaction is logged, not raised, and so is any other failure, the reads
    that plan it included.
    """
    if not ts.table_options.compaction_auto or not touched:
        return None
    try:
        # Under the latest schema, as Table.compact: a writer opened before a schema
        # change would rewrite files under its older one and drop the newer columns.
        latest_ts = load_schema(file_io)
        crowded = _crowded_buckets(file_io, latest_ts, touched)
        return compact(file_io, latest_ts, buckets=crowded) if crowded else None
    except CommitConflictError as exc:
        logger.info("automatic compaction of %s skipped: %s", file_io.uri, exc)
        return None
    except Exception:
        # The data commit already happened: a failed compaction must not make the caller
        # believe the write failed (and retry it, or delete its committed files).
        logger.warning("automatic compaction of %s failed", file_io.uri, exc_info=True)
        return None


def _crowded_buckets(
    file_io: FileIO, ts: TableSchema, touched: Collection[BucketKey]
) -> list[BucketKey]:
    """The touched buckets of the latest snapshot that hold too many overlapping files."""
    latest = SnapshotManager(file_io).latest()
    if latest is None:
        return []
    groups = live_files_by_bucket(file_io, latest.base_manifests, ts)
    limit = ts.table_options.compaction_max_overlap
    return [
        key for key in touched if any(len(s) > limit for s in overlap_sections(groups.get(key, [])))
    ]


def _rewrite_sets(
    files: list[DataFile], full: bool, spec: MergeSpec, target_size: int
) -> list[list[DataFile]]:
    """The sections of one bucket to rewrite, in key order.

    A full compaction rewrites a bucket whose files overlap, hold deletes it may
    drop, or include two files below the target size that could share one.
    """
    sections = overlap_sections(files)
    if full:
        droppable = spec.drops_tombstones and any(f.delete_row_count for f in files)
        small = [f for f in files if f.in_memory_size < target_size]
        if droppable or len(small) > 1 or any(len(s) > 1 for s in sections):
            return sections
        return []
    return [s for s in sections if len(s) > 1]


def _rewrite(
    file_io: FileIO,
    ts: TableSchema,
    spec: MergeSpec,
    key: BucketKey,
    sections: Sequence[list[DataFile]],
    *,
    pack: bool,
) -> CommitMessage:
    """Merge sections into top-level files.

    Sections are in key order. With ``pack`` (every section of the bucket is
    rewritten) one writer packs them all into files of the target size;
    otherwise each section gets its own writer, so that no new file can span a
    section that stays.
    """
    partition, bucket = key
    new_files: list[DataFile] = []
    groups = ([list(sections)] if sections else []) if pack else [[s] for s in sections]
    try:
        for group in groups:
            new_writer = KeyedFileWriter(file_io, ts, partition, bucket, level=LEVEL_TOP)
            with writing(new_writer) as writer:
                for section in group:
                    for piece in _merged(file_io, ts, spec, section):
                        writer.write(piece)
                new_files += writer.close()
    except BaseException:
        file_io.delete_quietly([f.path for f in new_files])  # the writers closed before
        raise
    deleted = tuple(f for section in sections for f in section)
    return CommitMessage(new_files=tuple(new_files), deleted_files=deleted)


def _merged(
    file_io: FileIO, ts: TableSchema, spec: MergeSpec, section: list[DataFile]
) -> Iterator[pa.Table]:
    columns = [*ts.column_names, SEQ, KIND]
    rows = pa.concat_tables([_read(file_io, ts, f, columns) for f in section])
    yield merge(rows, spec, keep_deletes=not spec.drops_tombstones)


def _read(file_io: FileIO, ts: TableSchema, f: DataFile, columns: list[str]) -> pa.Table:
    """A data file to compact; a store that keeps failing is named (scans name theirs)."""
    with named_store_errors(file_io.retry_policy.max_attempts, file_io.full_path(f.path)):
        return read_file(file_io, ts, f, columns)
