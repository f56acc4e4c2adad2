"""The writer of append tables: conform, split by partition, roll files."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from raylake.format.manifest import DataFile
from raylake.format.schema import TableSchema
from raylake.io import FileIO
from raylake.table.conform import conform, iter_input
from raylake.table.writer import (
    CommitMessage,
    RollingFileWriter,
    committed,
    refuse_after_prepare,
    split_by_partition,
)


class AppendTableWriter:
    """Writer for append tables: conform, split by partition, roll files."""

    def __init__(self, file_io: FileIO, ts: TableSchema, *, file_prefix: str = "data") -> None:
        self.file_io = file_io
        self.ts = ts
        self.options = ts.table_options
        # A job-specific prefix lets a distributed job find and delete its own files if it
        # fails after some tasks succeeded (see raylake/datasource/datasink.py).
        self.file_prefix = file_prefix
        self._writers: dict[tuple[Any, ...], RollingFileWriter] = {}
        self._prepared = False
        self._messages: list[CommitMessage] = []  # what prepare_commit handed out

    def __repr__(self) -> str:
        return f"AppendTableWriter({self.file_io.uri!r}, file_prefix={self.file_prefix!r})"

    def write(self, data: Any) -> None:
        """Write any accepted input (see conform.iter_input); may be called many times."""
        refuse_after_prepare(self, self._prepared)
        for chunk in iter_input(data, self.ts.arrow_schema):
            self.write_arrow(conform(chunk, self.ts.arrow_schema))

    def write_arrow(self, pa_table: pa.Table) -> None:
        """Write data already conformed to the table schema."""
        refuse_after_prepare(self, self._prepared)
        for partition, part in split_by_partition(pa_table, self.ts.partition_keys):
            writer = self._writers.get(partition)
            if writer is None:
                writer = RollingFileWriter(
                    self.file_io, self.ts, self.options, partition, 0, prefix=self.file_prefix
                )
                self._writers[partition] = writer
            writer.write(part)

    def partitions(self) -> list[tuple[Any, ...]]:
        """Partition values written so far."""
        return list(self._writers)

    def prepare_commit(self) -> list[CommitMessage]:
        refuse_after_prepare(self, self._prepared)
        files: list[DataFile] = []
        for writer in self._writers.values():
            files.extend(writer.close())
        self._prepared = True
        self._messages = [CommitMessage(new_files=tuple(files))] if files else []
        return self._messages

    def abort(self) -> None:
        """Delete every file this writer wrote (the commit did not happen); after a commit
        of its messages, nothing (an ``except`` around the commit and later work)."""
        if committed(self._messages):
            return
        for writer in self._writers.values():
            writer.abort()
