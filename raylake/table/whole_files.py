"""Whole data files read for a copy-on-write rewrite (an append table's merge or delete):
each file's rows apart, so that the rewrite knows which file holds a row."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.scan import ReadContext
from raylake.table.split import Split, slice_file

READ_THREADS = 4


def read_whole_files(
    file_io: FileIO, ts: TableSchema, snapshot_id: int, files: Sequence[DataFile]
) -> list[pa.Table]:
    """Each file's rows under ``ts``, in file order, a few files at once."""
    if not files:
        return []
    ctx = ReadContext(file_io, ts)

    def read(f: DataFile) -> pa.Table:
        piece = next(iter(slice_file(f, 1 << 62, None)))
        split = Split(
            snapshot_id, f.partition, f.bucket, (piece,), f.row_count, piece.size_bytes,
            schema_id=ts.schema_id,
        )  # fmt: skip
        # The context's read names a store that kept failing (StorageRetriesExhaustedError).
        return ctx.read_table([split])

    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(files))) as pool:
        return list(pool.map(read, files))


def batches_of(files: Sequence[DataFile], limit: int) -> list[list[DataFile]]:
    """Consecutive groups of files of about ``limit`` in-memory bytes each."""
    batches: list[list[DataFile]] = []
    size = 0
    for f in files:
        if not batches or size + f.in_memory_size > limit:
            batches.append([])
            size = 0
        batches[-1].append(f)
        size += f.in_memory_size
    return batches
