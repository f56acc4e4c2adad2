"""Compaction of append tables: runs of small files rewritten as fewer, larger ones.

Streaming writers and frequent small appends leave many small files, and every read
pays a request and a footer per file. ``Table.compact()`` rewrites, in each partition,
every run of two or more consecutive small files (smaller than ``write.target-file-size``
in memory) in the partition's read order into files of the target size;
``full=True`` rewrites every partition that has more than one file, packed whole. The
rows, their values and their order do not change: a run is consecutive in the order a
partition's files are read (their ``sequence_base``, raylake/table/append.py), and its
new files take the run's first numbers in that order, so they sit where the run was.
Files of older schema versions are rewritten under the latest one.

The commit is a COMPACT snapshot: streams deliver nothing for it, and ``changes()``
over a range that holds it reads its new files as the files they replaced
(raylake/table/append_changes.py). It conflicts with a concurrent commit that removed a
file it replaces (an overwrite), and loses; concurrent appends do not conflict.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from raylake.format.manifest import DataFile, data_files_from_table, live_files_of
from raylake.format.schema import TableSchema
from raylake.format.schema_files import load_schema, schema_at_least
from raylake.format.snapshot import Snapshot, SnapshotManager
from raylake.io import FileIO
from raylake.progress import track
from raylake.table.aborted import abort_messages
from raylake.table.append_writer import AppendTableWriter
from raylake.table.commit import CommitRequest, Committer
from raylake.table.replaced import conflict_if_replaced
from raylake.table.writer import CommitMessage, writing

logger = logging.getLogger(__name__)

# The names of the files compaction writes begin so: changes() looks up only their
# snapshots to find what they replaced.
COMPACTED_PREFIX = "compact"
# Runs rewritten at once. Each streams its rows (a batch and the writer's row group in
# memory, not the run), so more than the primary-key buckets' two: on an object store a
# partition's run is mostly waiting on requests.
RUN_THREADS = 4


def compact_append(file_io: FileIO, ts: TableSchema, *, full: bool) -> Snapshot | None:
    """Compact the latest snapshot of an append table; None if there was nothing to do."""
    latest = SnapshotManager(file_io).latest()
    if latest is None:
        return None
    # Its files may be of a schema newer than ``ts``: rewritten under ``ts`` they would
    # lose the newer columns.
    ts = schema_at_least(file_io, ts, latest.schema_id)
    with SnapshotManager(file_io).reading(latest.id):
        live = data_files_from_table(live_files_of(file_io, latest.base_manifests, ts), ts)
    runs = list(compaction_runs(live, ts.table_options.target_file_size, full=full))
    if not runs:
        return None
    # Runs are independent: read and write a few at once (pyarrow releases the GIL, and
    # on an object store each run's requests wait on the network).
    with ThreadPoolExecutor(RUN_THREADS, thread_name_prefix="raylake-compact") as pool:
        futures = [pool.submit(_rewrite, file_io, ts, latest.id, run) for run in runs]
        messages: list[CommitMessage] = []
        errors: list[BaseException] = []
        for future in track(futures, "compact: runs"):
            try:
                message = future.result()
            except BaseException as exc:
                errors.append(exc)
                continue
            if message is not None:
                messages.append(message)
    if errors:
        abort_messages(file_io, messages)
        # A file it read that a concurrent overwrite replaced and an expiration deleted:
        # it loses to that change, as a primary-key compaction does (damage stays itself).
        conflict = conflict_if_replaced(file_io, ts, errors[0], "compaction")
        if conflict is errors[0]:
            raise conflict
        raise conflict from errors[0]
    if not messages:
        return None
    request = CommitRequest(messages=tuple(messages), kind="COMPACT", base_snapshot_id=latest.id)
    try:
        # A failed look at the schema is the commit's failure too: the files it wrote go.
        ts = schema_at_least(file_io, ts, load_schema(file_io).schema_id)
        return Committer(file_io, ts).commit(request)
    except BaseException as exc:
        abort_messages(file_io, messages, exc)
        raise


def compaction_runs(
    files: list[DataFile], target_size: int, *, full: bool
) -> Iterator[list[DataFile]]:
    """The runs to rewrite: per partition, in read order, consecutive small files (two
    or more); with ``full``, a partition's files whole where it has more than one."""
    from raylake.table.append import in_read_order

    for _, partition in itertools.groupby(in_read_order(files), key=lambda f: f.partition):
        ordered = list(partition)
        if full:
            if len(ordered) > 1:
                yield ordered
            continue
        run: list[DataFile] = []
        for f in ordered:
            if f.in_memory_size < target_size:
                run.append(f)
                continue
            if len(run) > 1:
                yield run
            run = []
        if len(run) > 1:
            yield run


def _rewrite(
    file_io: FileIO, ts: TableSchema, snapshot_id: int, run: list[DataFile]
) -> CommitMessage | None:
    """One run's rows, in order, in new files numbered as the run's first files were
    (None where they came out as more files than the run: nothing gained)."""
    from raylake.table.kind import kind_of
    from raylake.table.scan import ReadContext

    ctx = ReadContext(file_io, ts)
    splits = kind_of(ts).plan_splits(snapshot_id, run, None, 1 << 62)
    new_writer = AppendTableWriter(file_io, ts, file_prefix=COMPACTED_PREFIX)
    with writing(new_writer) as writer:
        for batch in ctx.read_all(splits):
            writer.write_arrow(pa.Table.from_batches([batch]))
        written = [f for m in writer.prepare_commit() for f in m.new_files]
    if len(written) > len(run):
        file_io.delete_quietly([f.path for f in written])
        logger.info("compaction of %d files of %s skipped: no fewer files", len(run), file_io.uri)
        return None
    numbered = tuple(
        dataclasses.replace(f, sequence_base=old.sequence_base) for f, old in zip(written, run)
    )
    return CommitMessage(new_files=numbered, deleted_files=tuple(run))
