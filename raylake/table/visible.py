"""Tables that other processes work on: a Ray task or actor, or a Spark executor, runs in
a process of its own, often on another machine, and sees only the storage its machine
sees (docs/ray-data.md, "Tables a cluster reaches").

- A ``memory://`` table lives in one process: the entry points that hand work to other
  processes refuse it on the driver (:func:`refuse_process_local`), before any task.
- A local path is a disk of the driver's machine: a worker on a machine that does not
  mount it at the same path finds no table. A read that finds a data file missing where
  the table itself is not there (:func:`visible_errors`), or a write task that finds no
  table to write into (:func:`check_visible`), raises
  :class:`~raylake.errors.TableNotVisibleError` naming the process and the machine: not
  the ``FileNotFoundError`` of the first file opened, nor files written on the worker's
  own disk that the driver's commit then cannot find.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from raylake.errors import InvalidArgumentError, TableNotVisibleError
from raylake.io import FileIO

T = TypeVar("T")


def refuse_process_local(uri: str, where: str, name: str = "uri") -> None:
    """Refuse a ``memory://`` table (the argument ``name``) for ``where``
    (``"read_lake"``), whose work runs in processes other than this one: they would find
    nothing there."""
    if FileIO(uri).protocol == "memory":
        raise InvalidArgumentError(
            name,
            uri,
            f"a table that other processes reach (a local path or an object store): "
            f"{where} does its work in other processes (Ray workers, Spark executors), "
            "and a memory:// table lives only in the process that made it",
        )


@contextmanager
def visible_errors(file_io: FileIO) -> Iterator[None]:
    """Raise a missing file inside as TableNotVisibleError where the table, at a local or
    in-memory path, is not there at all (in this process); a file missing from a table
    that is there (expired, deleted by hand) stays the FileNotFoundError it was."""
    try:
        yield
    except FileNotFoundError as exc:
        if isinstance(exc, TableNotVisibleError) or file_io.is_remote or _table_here(file_io):
            raise
        raise TableNotVisibleError(file_io.uri, this_process()) from exc


def visible_batches(file_io: FileIO, batches: Iterator[T]) -> Iterator[T]:
    """``batches``, with a missing table named as :func:`visible_errors` names it."""
    with visible_errors(file_io):
        yield from batches


def check_visible(file_io: FileIO) -> None:
    """In a write task: raise TableNotVisibleError where this process does not see the
    table it is to write into. Only local and in-memory paths are looked at (one local
    check); every process reaches an object store's table alike."""
    if not file_io.is_remote and not _table_here(file_io):
        raise TableNotVisibleError(file_io.uri, this_process())


def this_process() -> str:
    """This process, as the message names it: its id, and its host's name."""
    return f"process {os.getpid()} on host {socket.gethostname()!r}"


def _table_here(file_io: FileIO) -> bool:
    from raylake.table.source import source_for

    try:
        return source_for(file_io).exists()
    except Exception:  # a store that cannot be asked: the original error says more
        return True
