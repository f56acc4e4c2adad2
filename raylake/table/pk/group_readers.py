"""Row groups of a merged read's files, decoded one after another or on a few threads.

A merged read decodes every version of its rows and then takes the winners out of
each row group (late.py). On a host with cores to spare that filter, one thread per
group, is what keeps a loader's next piece from being ready in time (docs/benchmarks.md,
"where a primary-key epoch goes"): pyarrow decodes a group's columns on its own pool,
but the filter of a 256K-row group runs on the calling thread. There, the groups of a
read are decoded and filtered on a few threads at once (``GROUP_THREADS``), in order;
each thread opens the file for itself (a reader is not shared across threads). Files on
an object store are read one group after another through one reader per file, as
before: there an open costs a round trip.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from raylake.io import FileIO
from raylake.io.read_errors import reading

T = TypeVar("T")

# Row groups of one merged read decoded at once on a local host of 8 cores or more (0:
# one after another on the reading thread). Tests set it to take the threaded path here.
GROUP_THREADS = min(4, (os.cpu_count() or 1) // 4) if (os.cpu_count() or 1) >= 8 else 0


class GroupReaders:
    """The ParquetFile each job reads its row group from: one per file, kept while that
    file's groups are read, or (``per_job``) one per job, on the job's own thread."""

    def __init__(self, file_io: FileIO, per_job: bool) -> None:
        self.file_io = file_io
        self.per_job = per_job
        self._path: str | None = None
        self._reader: pq.ParquetFile | None = None
        self._open = ExitStack()

    @contextmanager
    def reader(
        self, path: str, metadata: pq.FileMetaData, dictionary: Sequence[str]
    ) -> Iterator[pq.ParquetFile]:
        with reading(self.file_io.full_path(path)):
            if self.per_job:
                with self._source(path) as source:
                    yield self._parquet(source, metadata, dictionary)
                return
            if path != self._path:  # the jobs come file by file: the last file is done
                self.close()
                source = self._open.enter_context(self._source(path))
                self._path, self._reader = path, self._parquet(source, metadata, dictionary)
            assert self._reader is not None
            yield self._reader

    def _source(self, path: str) -> pa.NativeFile:
        # A merged read decodes every version of its rows (bench/merge.py: 7M row
        # versions for 4M rows), so copying a local file's bytes into read buffers costs
        # it more than a plain read: a local file is decoded from the page cache over its
        # memory map, kept for the next open (raylake/io/mapped.py). Elsewhere pyarrow's
        # filesystem reads it, with pre-buffering.
        return self.file_io.arrow_filesystem().open_input_file(self.file_io.full_path(path))

    def _parquet(
        self, source: pa.NativeFile, metadata: pq.FileMetaData, dictionary: Sequence[str]
    ) -> pq.ParquetFile:
        return pq.ParquetFile(
            source,
            metadata=metadata,
            read_dictionary=dictionary,
            pre_buffer=not self.file_io.is_local,
        )

    def close(self) -> None:
        self._open.close()
        self._path = self._reader = None


def run_in_order(jobs: Sequence[Callable[[], T]], threads: int) -> Iterator[T]:
    """Each job's result, in the jobs' order: on ``threads`` threads at once (joined
    before this returns, also when it is closed early), or one after another."""
    if threads < 2 or len(jobs) < 2:
        for job in jobs:
            yield job()
        return
    pool = ThreadPoolExecutor(min(threads, len(jobs)), thread_name_prefix="raylake-merge-groups")
    try:
        futures = [pool.submit(job) for job in jobs]
        for future in futures:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def group_threads(file_io: FileIO) -> int:
    """Threads for one read's row groups on ``file_io`` (module docstring)."""
    return GROUP_THREADS if file_io.is_local else 0
