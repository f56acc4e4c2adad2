"""Where a table may live: a directory, and one that holds nothing but the table.

``create_table`` in a directory that already holds other files (``data/part-1.parquet``
from another tool) used to succeed, and ``remove_orphan_files`` later deleted those files
as unreferenced. Creating a table where anything but a table exists is now refused unless
the caller passes ``allow_other_files=True``; and orphan cleanup deletes only files named
as raylake names its own (raylake/table/maintenance.py: ``is_raylake_file``), so files of
others beside a table are never deleted (docs/maintenance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from raylake.errors import TableLocationError, TableNotFoundError
from raylake.format.consumer import CONSUMER_DIR
from raylake.format.manifest import MANIFEST_DIR
from raylake.format.schema import SCHEMA_DIR
from raylake.format.snapshot import SNAPSHOT_DIR
from raylake.io import FileIO
from raylake.io.fileio import OBJECT_STORES
from raylake.table.writer import DATA_DIR

T = TypeVar("T")

_LAYOUT = frozenset({DATA_DIR, MANIFEST_DIR, SNAPSHOT_DIR, CONSUMER_DIR})


def at_table_location(file_io: FileIO, look: Callable[[], T]) -> T:
    """``look()`` (a listing of the table's metadata), with a path that is a file reported
    as a raylake error naming it, not as ``NotADirectoryError`` of ``<path>/schema``."""
    try:
        return look()
    except NotADirectoryError as exc:
        raise TableLocationError(
            file_io.uri, "it is a file; a table is a directory (give the directory to create)"
        ) from exc


def created_at_location(file_io: FileIO, create: Callable[[], bool]) -> bool:
    """``create()`` (of the table's first file), with a store that has no place for it
    (an object store's bucket that does not exist) reported as a raylake error naming the
    table, not as the store's bare ``FileNotFoundError`` ("The specified bucket does not
    exist")."""
    try:
        return create()
    except FileNotFoundError as exc:
        raise TableLocationError(
            file_io.uri,
            f"the store has no place for it ({exc}); on an object store, create the bucket first",
        ) from exc


def missing_bucket(file_io: FileIO) -> str | None:
    """The bucket of an object-store URI when the store says it does not exist; None for
    a bucket that exists, one the store will not say about (no permission to look), and
    every URI that names no bucket. One request: ask only once a table was not found."""
    if file_io.protocol not in OBJECT_STORES:
        return None
    bucket = file_io.root.lstrip("/").split("/", 1)[0]
    try:
        exists = file_io.fs.exists(bucket)
    except Exception:  # a bucket it may not look at, or any failure: say nothing of it
        return None
    return None if exists else bucket


def raise_missing_bucket(file_io: FileIO, not_found: TableNotFoundError) -> None:
    """``not_found`` again, saying that the bucket does not exist, where it does not (the
    store's own listing of a missing bucket reads as an empty directory)."""
    bucket = missing_bucket(file_io)
    if bucket is not None:
        reason = f"the bucket {bucket!r} does not exist (create it first, or check the name)"
        raise TableNotFoundError(not_found.uri, reason) from not_found


def check_empty_location(file_io: FileIO, allow_other_files: bool) -> None:
    """Refuse to create a table where other files are, unless ``allow_other_files``."""
    if allow_other_files:
        return
    found = at_table_location(file_io, lambda: file_io.list_names(""))
    name = file_io.uri.rstrip("/").rsplit("/", 1)[-1]
    if name in found and _own_folder_marker(file_io):
        found.remove(name)
    if found == [name] and _is_file(file_io):
        raise TableLocationError(
            file_io.uri, "it is a file; a table is a directory (give the directory to create)"
        )
    found = [n for n in found if n != SCHEMA_DIR]  # a table another writer is creating
    # The directories a table's writers make, left empty where a table was dropped under
    # a job still writing into it (a local disk keeps directories an object store has not)
    found = [n for n in found if not (n in _LAYOUT and _empty_directory(file_io, n))]
    if found:
        why = other_files(found, "pass allow_other_files=True", "remove_orphan_files")
        raise TableLocationError(file_io.uri, why, tuple(found[:6]))


def other_files(found: Sequence[str], allow: str, cleanup: str) -> str:
    """Why a directory holding ``found`` takes no table, with the caller's way to allow
    them (``allow``: a keyword in Python, a flag in a shell) and to clean up."""
    shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
    return (
        f"it already holds {shown}, and a table owns its directory: create it in a new "
        f"or empty directory, or {allow} to create it beside them ({cleanup} never "
        "deletes files it did not name)"
    )


def _empty_directory(file_io: FileIO, rel: str) -> bool:
    """Whether ``rel`` is a directory with no file at any depth (not a dangling link)."""
    try:
        if not file_io.fs.isdir(file_io.full_path(rel)):
            return False
        return all(path == rel for path, _ in file_io.list_files(rel))  # its own marker
    except OSError:
        return False


def _own_folder_marker(file_io: FileIO) -> bool:
    """Whether an object store holds the location's own "folder": the empty ``<path>/``
    object that the AWS console's "Create folder" (and other tools) make, which a listing
    shows as an entry named like the location. It is no file in the folder."""
    if file_io.protocol not in OBJECT_STORES:
        return False
    marker = file_io.root.rstrip("/") + "/"
    try:
        return marker in file_io.fs.ls(file_io.root, detail=False)
    except OSError:
        return False


def _is_file(file_io: FileIO) -> bool:
    try:
        return bool(file_io.fs.isfile(file_io.full_path("")))
    except OSError:
        return False
