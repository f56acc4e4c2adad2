"""Writers turn Arrow data into Parquet data files and small, picklable commit messages.

A writer never commits: :class:`~raylake.table.commit.Committer` turns the
messages of one or many writers (Ray tasks, Spark executors, threads) into one
snapshot. Memory stays bounded: each open file buffers at most one row group.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raylake.caching import ProcessThreads
from raylake.errors import UnsupportedOperationError
from raylake.format.manifest import DataFile
from raylake.format.options import TableOptions
from raylake.format.schema import TableSchema
from raylake.format.stats import StatsCollector
from raylake.io import FileIO
from raylake.io.read_errors import named_store_errors
from raylake.pyvalues import exact_pylist
from raylake.table.codecs import column_codecs

logger = logging.getLogger(__name__)

DATA_DIR = "data"
NULL_PARTITION = "__NULL__"
# Flush a row group early when its buffered Arrow data passes this size, whatever its rows.
_ROW_GROUP_MAX_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class CommitMessage:
    """What one writer produced: files to add, and (compaction) files they replace."""

    new_files: tuple[DataFile, ...] = ()
    deleted_files: tuple[DataFile, ...] = ()
    changelog_files: tuple[DataFile, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.new_files or self.deleted_files or self.changelog_files)


def partition_dir(ts: TableSchema, partition: tuple[Any, ...], bucket: int) -> str:
    parts = [DATA_DIR]
    for key, value in zip(ts.partition_keys, partition):
        text = NULL_PARTITION if value is None else quote(str(value), safe="")
        parts.append(_directory_name(f"{partition_key_prefix(key)}{text}"))
    parts.append(f"bucket-{bucket}")
    return "/".join(parts)


def partition_key_prefix(key: str) -> str:
    """How a partition column's directory names start: ``<key>=``, the key percent-encoded."""
    return f"{quote(key, safe='')}="


# File systems name a directory in at most 255 bytes (NAME_MAX); percent-encoding makes
# a value three times longer (50 accented letters were too many).
_NAME_MAX = 255
_DIGEST_HEX = 32


def is_shortened_name(name: str) -> bool:
    """Whether ``name`` is one :func:`_directory_name` shortened: its start (which may end
    inside a character of several bytes, or be cut before a %XX escape), ``~`` and the
    digest."""
    head, tilde, digest = name.rpartition("~")
    longest = _NAME_MAX - 1 - _DIGEST_HEX
    return (
        bool(tilde)
        and longest - 2 <= len(head) <= longest
        and len(digest) == _DIGEST_HEX
        and all(c in "0123456789abcdef" for c in digest)
    )


def _directory_name(name: str) -> str:
    """``name`` (ASCII, percent-encoded), or where it is too long for a file system its
    start and a digest of all of it: readers never parse these names (partition values
    come from the manifests), so the digest only has to keep values apart."""
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_DIGEST_HEX]
    head = name[: _NAME_MAX - 1 - _DIGEST_HEX]
    cut = head.rfind("%", len(head) - 2)
    if cut >= 0:  # do not end in the middle of a %XX escape
        head = head[:cut]
    return f"{head}~{digest}"


def group_positions(key_columns: pa.Table) -> list[tuple[tuple[Any, ...], np.ndarray]]:
    """Distinct key tuples of a table and the (ascending) row positions of each.

    One hash aggregation over all rows, not a loop over rows: the Python loop runs
    once per distinct key (partition, or partition and bucket).
    """
    keys = key_columns.column_names
    index_name = "_rl_row"  # the reserved prefix: no partition column has the name
    indexed = key_columns.append_column(
        index_name, pa.array(np.arange(key_columns.num_rows, dtype=np.int64))
    )
    groups = indexed.group_by(keys, use_threads=False).aggregate([(index_name, "list")])
    key_values = [exact_pylist(groups.column(k), k) for k in keys]
    row_lists = groups.column(f"{index_name}_list")
    return [
        (
            tuple(column[i] for column in key_values),
            np.sort(row_lists[i].values.to_numpy(zero_copy_only=False)),
        )
        for i in range(groups.num_rows)
    ]


def split_by_partition(pa_table: pa.Table, keys: tuple[str, ...]) -> list[tuple[tuple, pa.Table]]:
    """The rows of each partition (the whole table when it holds one partition)."""
    if not keys or pa_table.num_rows == 0:
        return [((), pa_table)] if pa_table.num_rows else []
    groups = group_positions(pa_table.select(list(keys)))
    if len(groups) == 1:
        return [(groups[0][0], pa_table)]
    return [(values, pa_table.take(positions)) for values, positions in groups]


class RollingFileWriter:
    """Writes one partition-bucket's rows into Parquet files of about the target size."""

    def __init__(
        self,
        file_io: FileIO,
        ts: TableSchema,
        options: TableOptions,
        partition: tuple[Any, ...],
        bucket: int,
        *,
        level: int = 0,
        prefix: str = "data",
        schema: pa.Schema | None = None,
    ) -> None:
        self.file_io = file_io
        self.ts = ts
        self.options = options
        self.partition = partition
        self.bucket = bucket
        self.level = level
        self.prefix = prefix
        # Primary-key files add system columns after the table's own (pk_schema.file_schema).
        self.schema: pa.Schema = ts.arrow_schema if schema is None else schema
        self.completed: list[DataFile] = []
        self._buffer: list[pa.Table] = []
        self._buffered_rows = 0
        self._buffered_bytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._sink: pa.NativeFile | None = None
        self._uploads = Uploads() if file_io.is_remote else None
        self._path = ""
        self._stats: StatsCollector | None = None
        self._row_group_rows: list[int] = []
        self._row_group_sizes: list[int] = []
        self._file_schema: pa.Schema = self.schema
        # Columns that held a null in an earlier row group: stored nullable from then on,
        # so that nulls now in one column, now in another, close at most one file each.
        self._had_nulls: set[str] = set()

    @property
    def open_paths(self) -> list[str]:
        return [self._path] if self._writer is not None else []

    def write(self, pa_table: pa.Table) -> None:
        if pa_table.num_rows == 0:
            return
        self._buffer.append(pa_table)
        self._buffered_rows += pa_table.num_rows
        self._buffered_bytes += pa_table.nbytes
        if (
            self._buffered_rows >= self.options.row_group_rows
            or self._buffered_bytes >= _ROW_GROUP_MAX_BYTES
        ):
            # An upload that failed past pyarrow's retries is named as raylake names it.
            with named_store_errors(self.file_io.retry_policy.max_attempts):
                self._flush_row_groups()

    def _flush_row_groups(self) -> None:
        if not self._buffered_rows:
            return
        data = pa.concat_tables(self._buffer)
        self._buffer, self._buffered_rows, self._buffered_bytes = [], 0, 0
        step = self.options.row_group_rows
        for start in range(0, data.num_rows, step):
            self._write_row_group(data.slice(start, step))

    def _write_row_group(self, chunk: pa.Table) -> None:
        self._close_before_nulls(chunk)
        if self._writer is None:
            self._open(chunk)
        assert self._writer is not None and self._stats is not None
        if self._file_schema is not self.schema:  # the same columns, some marked non-null
            chunk = pa.Table.from_arrays(chunk.columns, schema=self._file_schema)
        self._writer.write_table(chunk, row_group_size=chunk.num_rows)
        self._stats.update(chunk)
        self._row_group_rows.append(chunk.num_rows)
        self._row_group_sizes.append(chunk.nbytes)
        if sum(self._row_group_sizes) >= self.options.target_file_size:
            self._close_file()

    def _open(self, first: pa.Table) -> None:
        directory = partition_dir(self.ts, self.partition, self.bucket)
        self.file_io.makedirs(directory)
        self._path = f"{directory}/{self.prefix}-{uuid.uuid4().hex}.parquet"
        compression = column_codecs(first, self.schema, self.options.compression)
        self._file_schema = self.file_schema_of(first)
        # Our own sink: its position after the footer is the file's size (no request to
        # ask the store for it), and on an object store it is closed, which is the
        # upload, beside the next file's encoding (Uploads).
        self._sink = self.file_io.arrow_filesystem().open_output_stream(
            self.file_io.full_path(self._path)
        )
        delta = self.delta_columns()
        self._writer = pq.ParquetWriter(
            self._sink,
            self._file_schema,
            compression=compression,
            # Random floats never repeat: trying to dictionary-encode them doubles the
            # write time and grows the file (measured in bench/merge.py's data).
            use_dictionary=[
                f.name
                for f in self.schema
                if not pa.types.is_floating(f.type) and f.name not in delta
            ],
            column_encoding=dict.fromkeys(delta, "DELTA_BINARY_PACKED") or None,
        )
        self._stats = StatsCollector(self.schema)
        self._row_group_rows, self._row_group_sizes = [], []

    def file_schema_of(self, first: pa.Table) -> pa.Schema:
        """The Parquet schema of a file whose first row group is ``first``: the writer's
        columns, those (of non-nested types) without a null in ``first`` marked non-null.

        A column stored non-null has no definition levels to decode: about half the
        decoding CPU of a nullable float column without nulls, which is most columns
        of most tables (docs/format.md, "Data files"). Readers give back the table's
        own fields: an append scan reads with the table's schema, a primary-key read
        through ``table_fields`` (pk/files.py).
        """
        self._had_nulls.update(f.name for f in self.schema if first.column(f.name).null_count)
        fields = [
            f.with_nullable(False)
            if f.nullable and not pa.types.is_nested(f.type) and f.name not in self._had_nulls
            else f
            for f in self.schema
        ]
        return pa.schema(fields, metadata=self.schema.metadata)

    def _close_before_nulls(self, chunk: pa.Table) -> None:
        """A null in a column the open file stores non-null: the chunk goes to the next
        file, which stores that column nullable (and every column that had a null in
        this writer before)."""
        if self._writer is None:
            return
        nulls = [
            f.name
            for f in self._file_schema
            if not f.nullable
            and self.schema.field(f.name).nullable
            and chunk.column(f.name).null_count
        ]
        if nulls:
            self._had_nulls.update(nulls)
            self._close_file()

    def delta_columns(self) -> tuple[str, ...]:
        """Integer columns written delta-encoded rather than dictionary-encoded."""
        return ()

    def _close_file(self) -> None:
        assert self._writer is not None and self._stats is not None and self._sink is not None
        self._writer.close()
        self._writer = None
        size = self._sink.tell()
        if self._uploads is None:
            self._sink.close()
        else:
            self._uploads.close(self._sink)
        self._sink = None
        rows = sum(self._row_group_rows)
        self.completed.append(
            DataFile(
                path=self._path,
                file_size=int(size),
                row_count=rows,
                partition=self.partition,
                bucket=self.bucket,
                level=self.level,
                schema_id=self.ts.schema_id,
                min_sequence=0,
                max_sequence=max(rows - 1, 0),
                row_group_rows=tuple(self._row_group_rows),
                row_group_sizes=tuple(self._row_group_sizes),
                column_sizes=tuple(self._stats.column_sizes),
                stats=self.ts.keyed_stats(self._stats.result()),
            )
        )

    def close(self) -> list[DataFile]:
        """Finish every file; its data files are all complete (uploaded) on return."""
        with named_store_errors(self.file_io.retry_policy.max_attempts):
            self._flush_row_groups()
            if self._writer is not None:
                self._close_file()
            if self._uploads is not None:
                self._uploads.wait()
        return self.completed

    def abort(self) -> None:
        if self._writer is not None or self._sink is not None:
            # The file is deleted next; a failure to finish it must not hide the first error.
            # The sink alone is open where the Parquet writer failed to start (a full disk).
            with contextlib.suppress(OSError, pa.ArrowException):
                if self._writer is not None:
                    self._writer.close()
            with contextlib.suppress(OSError, pa.ArrowException):
                if self._sink is not None:
                    self._sink.close()
            self._writer = self._sink = None
            self.file_io.delete_quietly([self._path])
        if self._uploads is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._uploads.wait()
        self.file_io.delete_quietly([f.path for f in self.completed])
        self.completed = []


class Uploads:
    """Closes (uploads) finished files on threads, a bounded number at once.

    On an object store closing a file is its upload (or the last part and the completion
    of a multipart upload): a round trip that need not hold up the encoding of the next
    file. At most ``limit`` uploads wait, which bounds the memory they hold. A file is
    visible in the store only once its upload completes; a process killed before then
    leaves no object behind (and never a commit that names one).
    """

    limit = 8

    def __init__(self) -> None:
        self._pending: list[Future[None]] = []

    def close(self, sink: pa.NativeFile) -> None:
        while len(self._pending) >= self.limit:
            self._pending.pop(0).result()
        self._pending.append(_upload_pool().submit(sink.close))

    def wait(self) -> None:
        """Wait for every upload; the first failure is raised once all have ended."""
        pending, self._pending = self._pending, []
        wait(pending)
        for future in pending:
            future.result()


# Threads shared by all writers of the process (they wait on the network, not CPUs).
_uploads = ProcessThreads(16, "raylake-upload")


def _upload_pool() -> ThreadPoolExecutor:
    return _uploads.get()


class TableWriter(Protocol):
    """What every writer offers: many ``write`` calls, then one ``prepare_commit``."""

    def write(self, data: Any) -> None: ...

    def write_arrow(self, pa_table: pa.Table) -> None: ...

    def partitions(self) -> list[tuple[Any, ...]]: ...

    def prepare_commit(self) -> list[CommitMessage]: ...

    def abort(self) -> None: ...


# The attribute a committed message carries: the snapshot that committed it (commit.py).
COMMITTED_AS = "_raylake_committed_as"


def committed(messages: list[CommitMessage]) -> bool:
    """Whether this process committed any of ``messages``: their files are the table's
    now, which a writer's ``abort`` must not delete."""
    return any(getattr(m, COMMITTED_AS, None) is not None for m in messages)


def refuse_after_prepare(writer: object, prepared: bool) -> None:
    """A writer hands its files out once, in ``prepare_commit``: a write or a second
    ``prepare_commit`` after it handed out the first messages' files again, which a
    second commit added twice."""
    if prepared:
        raise UnsupportedOperationError(
            f"{writer!r} gave its commit messages already (prepare_commit): write the next "
            "data with a new writer (tbl.new_writer())"
        )


class Abortable(Protocol):
    def abort(self) -> None: ...


W = TypeVar("W", bound=Abortable)


@contextlib.contextmanager
def writing(writer: W) -> Iterator[W]:
    """Use ``writer`` in the block; on any exception (a KeyboardInterrupt included) abort
    it, deleting every file it wrote, and re-raise. What the block returns (commit
    messages, closed files) is the caller's to commit or to delete::

        with writing(table.new_writer()) as writer:
            writer.write(data)
            messages = writer.prepare_commit()
    """
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise
