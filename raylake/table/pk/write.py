"""Writing primary-key tables: bucket, buffer, pre-merge, and write sorted files.

Input is buffered as it comes (up to ``write.buffer-size``). A flush numbers the
buffered rows 0..n-1 in input order (the file-local ``_rl_seq``; the committer
adds each file's sequence base), groups them by (partition, bucket) with the
stable key hash (bucket.py), merges each bucket's rows with the table's engine
(keeping deletes, so the file can be merged again with older files) and writes
one sorted run per bucket. So within one write the last occurrence of a key
wins, and across the flushes of one writer a later flush wins, because the
committer numbers files in message order.

Input may carry a ``_rl_kind`` column (``+I``/``-U``/``+U``/``-D`` or 0..3) to
apply a changelog as is; ``-U`` rows change no state and are kept only in the
input changelog.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import SchemaMismatchError
from raylake.format import options as opt
from raylake.format.manifest import DataFile
from raylake.format.options import TableOptions
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.pyvalues import exact_py, exact_pylist
from raylake.table.conform import ArrowData, conform, iter_input
from raylake.table.pk.bucket import bucket_ids
from raylake.table.pk.engines import merge, merge_positions
from raylake.table.pk.schema import (
    DELETE,
    INSERT,
    KIND,
    KIND_NAMES,
    LEVEL_WRITE,
    SEQ,
    SYSTEM_COLUMNS,
    UPDATE_BEFORE,
    MergeSpec,
    file_schema,
)
from raylake.table.split import BucketKey
from raylake.table.writer import (
    CommitMessage,
    RollingFileWriter,
    committed,
    group_positions,
    refuse_after_prepare,
    writing,
)

# Files written at once by one writer, each while the next bucket is merged.
WRITE_THREADS = 2
BUCKET_COLUMN = "_rl_bucket"  # the reserved prefix: no table column has the name


# Row groups of primary-key files when the table does not set write.row-group-rows: a
# key-range part of a merge reads whole row groups of every file it spans, so smaller
# groups bound what a part decodes beyond its range (docs/primary-keys.md, issue 20).
KEYED_ROW_GROUP_ROWS = 256 * 1024


def keyed_file_options(ts: TableSchema) -> TableOptions:
    options = ts.table_options
    if opt.ROW_GROUP_ROWS in options.raw:
        return options
    return ts.derived(
        "pk.file_options", lambda: replace(options, row_group_rows=KEYED_ROW_GROUP_ROWS)
    )


class KeyedFileWriter(RollingFileWriter):
    """A rolling writer of sorted primary-key rows that records each file's key range.

    ``sequence_span`` (writer files) declares every file to span local sequences
    0..span-1, which the committer turns into a range of its own; without it
    (compaction) the files hold absolute sequences and report their real range.
    """

    def __init__(
        self,
        file_io: FileIO,
        ts: TableSchema,
        partition: tuple[Any, ...],
        bucket: int,
        *,
        level: int,
        prefix: str = "data",
        sequence_span: int | None = None,
    ) -> None:
        super().__init__(
            file_io,
            ts,
            keyed_file_options(ts),
            partition,
            bucket,
            level=level,
            prefix=prefix,
            schema=file_schema(ts),
        )
        self.key = ts.primary_key
        self.sequence_span = sequence_span
        self._first_key: tuple[Any, ...] | None = None
        self._last_key: tuple[Any, ...] | None = None
        self._deletes = 0
        self._seq_range = (0, 0)

    def delta_columns(self) -> tuple[str, ...]:
        """The key's 32/64-bit integer columns and ``_rl_seq``, delta-encoded.

        A file is sorted by key, so unique keys become small deltas: decoding them
        costs about a tenth of a dictionary-then-plain, Snappy-compressed column, and
        every merged read decodes the key at least once per row version (issue 20).
        """
        keys = tuple(name for name in self.key if _delta_encodable(self.schema.field(name).type))
        return (*keys, SEQ)

    def _write_row_group(self, chunk: pa.Table) -> None:
        self._close_before_nulls(chunk)  # before this file's key and sequence ranges
        seq_bounds = pc.min_max(chunk.column(SEQ)).as_py()
        if self._writer is None:  # this chunk opens a new file
            self._first_key = _key_at(chunk, self.key, 0)
            self._deletes = 0
            self._seq_range = (seq_bounds["min"], seq_bounds["max"])
        self._last_key = _key_at(chunk, self.key, chunk.num_rows - 1)
        kinds = chunk.column(KIND)
        self._deletes += int(pc.sum(pc.equal(kinds, pa.scalar(DELETE, pa.int8()))).as_py() or 0)
        lo, hi = self._seq_range
        self._seq_range = (min(lo, seq_bounds["min"]), max(hi, seq_bounds["max"]))
        super()._write_row_group(chunk)

    def _close_file(self) -> None:
        super()._close_file()
        f = self.completed[-1]
        lo, hi = (0, self.sequence_span - 1) if self.sequence_span else self._seq_range
        self.completed[-1] = replace(
            f,
            min_key=self._first_key,
            max_key=self._last_key,
            delete_row_count=self._deletes,
            min_sequence=lo,
            max_sequence=hi,
            stats={k: v for k, v in f.stats.items() if k not in SYSTEM_COLUMNS},
        )


def _delta_encodable(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype) and dtype.bit_width in (32, 64)


def _key_at(pa_table: pa.Table, key: tuple[str, ...], row: int) -> tuple[Any, ...]:
    return tuple(exact_py(pa_table.column(k)[row], k) for k in key)


def split_row_kinds(data: ArrowData) -> tuple[ArrowData, pa.Array | None]:
    """Take the optional ``_rl_kind`` column out of input data, as int8 row kinds."""
    if KIND not in data.schema.names:
        return data, None
    i = data.schema.get_field_index(KIND)
    column = data.column(i)
    rest = data.remove_column(i)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if column.null_count:
        raise SchemaMismatchError(
            f"column {KIND!r} has {column.null_count} null row kind(s)", column=KIND
        )
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        codes = pc.index_in(column, value_set=pa.array(KIND_NAMES))
        if codes.null_count:
            bad = pc.filter(column, codes.is_null())[0].as_py()
            raise SchemaMismatchError(
                f"column {KIND!r} has row kind {bad!r}; expected one of {list(KIND_NAMES)}",
                column=KIND,
            )
        return rest, codes.cast(pa.int8())
    if pa.types.is_integer(column.type):
        values = np.asarray(column.to_numpy(zero_copy_only=False))
        if len(values) and (values.min() < 0 or values.max() >= len(KIND_NAMES)):
            raise SchemaMismatchError(
                f"column {KIND!r} has row kind codes outside 0..3 ({KIND_NAMES})", column=KIND
            )
        return rest, pa.array(values.astype(np.int8))
    raise SchemaMismatchError(
        f"column {KIND!r} must hold row kinds as strings {list(KIND_NAMES)} or int codes 0..3, "
        f"not {column.type}",
        column=KIND,
    )


class PrimaryKeyTableWriter:
    """Writer for primary-key tables; the same interface as ``AppendTableWriter``."""

    def __init__(self, file_io: FileIO, ts: TableSchema, *, file_prefix: str = "data") -> None:
        self.file_io = file_io
        self.ts = ts
        self.options: TableOptions = ts.table_options
        self.spec = MergeSpec.of(ts)
        self.file_prefix = file_prefix
        self._schema = file_schema(ts)
        self._buffer: list[pa.Table] = []  # conformed input with its row kinds, input order
        self._buffered_bytes = 0
        self._partitions: dict[tuple[Any, ...], None] = {}
        self._files: list[DataFile] = []
        self._changelog_files: list[DataFile] = []
        self._prepared = False
        self._messages: list[CommitMessage] = []  # what prepare_commit handed out

    def __repr__(self) -> str:
        return f"PrimaryKeyTableWriter({self.file_io.uri!r}, file_prefix={self.file_prefix!r})"

    def write(self, data: Any) -> None:
        """Write any accepted input, optionally with a ``_rl_kind`` column."""
        for chunk in iter_input(data, self.ts.arrow_schema):
            rest, kinds = split_row_kinds(chunk)
            self.write_arrow(conform(rest, self.ts.arrow_schema, self.ts.primary_key), kinds)

    def write_arrow(self, pa_table: pa.Table, kinds: pa.Array | None = None) -> None:
        """Write data already conformed to the table schema, with optional int8 row kinds."""
        refuse_after_prepare(self, self._prepared)
        if pa_table.num_rows == 0:
            return
        if kinds is None:
            kinds = pa.array(np.full(pa_table.num_rows, INSERT, dtype=np.int8))
        rows = pa_table.append_column(pa.field(KIND, pa.int8(), nullable=False), kinds)
        self._buffer.append(rows)
        self._buffered_bytes += rows.nbytes
        if self._buffered_bytes >= self.options.write_buffer_size:
            self.flush()

    def flush(self) -> None:
        """Write the buffer as one sorted level-0 run per bucket (and its input changelog).

        Every file of a flush declares the sequence span 0..n-1 of the whole buffer
        and numbers its rows by their buffer position, so input order is version order.
        """
        if not self._buffer:
            return
        rows = pa.concat_tables(self._buffer)
        self._buffer, self._buffered_bytes = [], 0
        # Parquet encoding releases the GIL: one bucket's file is written while the next
        # bucket is merged. At most WRITE_THREADS merged buckets wait in memory.
        with ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="raylake-write") as pool:
            jobs: deque[Future[tuple[list[DataFile], list[DataFile]]]] = deque()
            try:
                for (partition, bucket), positions in self._groups(rows):
                    self._partitions.setdefault(partition)
                    changes = self._input_changelog(rows, positions)
                    merged = self._merge_bucket(rows, positions)
                    args = (partition, bucket, merged, changes, rows.num_rows)
                    jobs.append(pool.submit(self._write_files, *args))
                    while len(jobs) > WRITE_THREADS:
                        self._collect(jobs.popleft())
            finally:
                self._drain(jobs)

    def _collect(self, job: Future[tuple[list[DataFile], list[DataFile]]]) -> None:
        data, changelog = job.result()
        self._files += data
        self._changelog_files += changelog

    def _drain(self, jobs: deque[Future[tuple[list[DataFile], list[DataFile]]]]) -> None:
        """Collect every job, so that abort() knows all files; then raise the first error."""
        error: BaseException | None = None
        while jobs:
            try:
                self._collect(jobs.popleft())
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error

    def _input_changelog(self, rows: pa.Table, positions: np.ndarray) -> pa.Table | None:
        """The rows as written (changelog-producer=input), in input order."""
        if self.options.changelog_producer != "input":
            return None
        local = np.arange(len(positions), dtype=np.int64)
        return _layout(rows.take(pa.array(positions)), local, self._schema)

    def _write_files(
        self,
        partition: tuple[Any, ...],
        bucket: int,
        merged: pa.Table | None,
        changes: pa.Table | None,
        span: int,
    ) -> tuple[list[DataFile], list[DataFile]]:
        data: list[DataFile] = []
        changelog: list[DataFile] = []
        if merged is not None:
            writer = KeyedFileWriter(
                self.file_io,
                self.ts,
                partition,
                bucket,
                level=LEVEL_WRITE,
                prefix=self.file_prefix,
                sequence_span=span,
            )
            data = _write_all(writer, merged)
        if changes is not None:
            changelog_writer = RollingFileWriter(
                self.file_io,
                self.ts,
                self.options,
                partition,
                bucket,
                prefix=f"{self.file_prefix}-changelog",
                schema=self._schema,
            )
            try:
                changelog = _write_all(changelog_writer, changes)
            except BaseException:
                self.file_io.delete_quietly([f.path for f in data])
                raise
        return data, changelog

    def _groups(self, rows: pa.Table) -> Iterator[tuple[BucketKey, np.ndarray]]:
        """Row positions (ascending) of each (partition, bucket), with no copy of the rows."""
        buckets = bucket_ids([rows.column(k) for k in self.ts.primary_key], self.ts.buckets)
        if not self.ts.partition_keys:
            order = np.argsort(
                buckets.astype(np.int16 if self.ts.buckets < 2**15 else np.int32), kind="stable"
            )
            bounds = np.concatenate(
                [[0], np.cumsum(np.bincount(buckets, minlength=self.ts.buckets))]
            )
            for bucket in range(self.ts.buckets):
                if bounds[bucket + 1] > bounds[bucket]:
                    yield ((), bucket), order[bounds[bucket] : bounds[bucket + 1]]
            return
        key_columns = rows.select(list(self.ts.partition_keys)).append_column(
            BUCKET_COLUMN, pa.array(buckets)
        )
        for values, positions in group_positions(key_columns):
            yield (values[:-1], int(values[-1])), positions

    def _merge_bucket(self, rows: pa.Table, positions: np.ndarray) -> pa.Table | None:
        """One bucket's rows pre-merged (keeping deletes), sorted by key, in file layout."""
        kinds = np.asarray(rows.column(KIND).take(pa.array(positions)).to_numpy())
        positions = positions[kinds != UPDATE_BEFORE]  # before-images change no state
        if len(positions) == 0:
            return None
        narrow = [
            *self.spec.key,
            *([self.spec.sequence_field] if self.spec.sequence_field else []),
            KIND,
        ]
        probe = rows.select(narrow).take(pa.array(positions))
        probe = probe.append_column(SEQ, pa.array(positions.astype(np.int64)))
        picked = merge_positions(probe, self.spec, keep_deletes=True)
        if picked is not None:
            chosen = positions[picked]
            return _layout(rows.take(pa.array(chosen)), chosen, self._schema)
        wide = _layout(rows.take(pa.array(positions)), positions, self._schema)
        return merge(wide, self.spec, keep_deletes=True)

    def partitions(self) -> list[tuple[Any, ...]]:
        if self._buffer:  # partitions are known once buffered rows are grouped
            for partition in self._partition_values(pa.concat_tables(self._buffer)):
                self._partitions.setdefault(partition)
        return list(self._partitions)

    def _partition_values(self, rows: pa.Table) -> list[tuple[Any, ...]]:
        if not self.ts.partition_keys:
            return [()]
        distinct = (
            rows.select(list(self.ts.partition_keys))
            .group_by(list(self.ts.partition_keys), use_threads=False)
            .aggregate([])
        )
        columns = [exact_pylist(distinct.column(k), k) for k in self.ts.partition_keys]
        return [tuple(c[i] for c in columns) for i in range(distinct.num_rows)]

    def prepare_commit(self) -> list[CommitMessage]:
        refuse_after_prepare(self, self._prepared)
        self.flush()
        self._prepared = True
        if self._files or self._changelog_files:
            files, changelog = tuple(self._files), tuple(self._changelog_files)
            self._messages = [CommitMessage(new_files=files, changelog_files=changelog)]
        return self._messages

    def abort(self) -> None:
        """Delete every file this writer wrote (the commit did not happen); after a commit
        of its messages, nothing (an ``except`` around the commit and later work)."""
        if committed(self._messages):
            return
        self.file_io.delete_quietly([f.path for f in (*self._files, *self._changelog_files)])
        self._files, self._changelog_files = [], []
        self._buffer, self._buffered_bytes = [], 0


def _layout(rows: pa.Table, seq: np.ndarray, schema: pa.Schema) -> pa.Table:
    """Rows (table columns + ``_rl_kind``) in file layout, with the given ``_rl_seq``."""
    seq_array = pa.array(seq.astype(np.int64, copy=False))
    columns = [seq_array if name == SEQ else rows.column(name) for name in schema.names]
    return pa.Table.from_arrays(columns, schema=schema)


def _write_all(writer: RollingFileWriter, rows: pa.Table) -> list[DataFile]:
    with writing(writer):
        writer.write(rows)
        return writer.close()
