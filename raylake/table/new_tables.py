"""A table a job creates for its write, before and after: the location checked on the
driver before the job runs, and the table dropped when the write fails (unless another
writer is writing into it). What the Ray Data and Spark sinks, ``from_pandas`` and
``raylake write --create`` share."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from fsspec.implementations.local import LocalFileSystem

from raylake.errors import TableLocationError
from raylake.format.manifest import MANIFEST_DIR
from raylake.format.schema import SCHEMA_DIR
from raylake.io import FileIO
from raylake.io.credentials import OptionsLike
from raylake.io.temp_names import temp_names
from raylake.table.args import uri_arg
from raylake.table.location import check_empty_location, other_files
from raylake.table.maintenance import is_raylake_file
from raylake.table.table import Table
from raylake.table.writer import DATA_DIR

logger = logging.getLogger(__name__)

# What a table's creation writes in schema/: ``schema-<id>.json``, and FileIO's temporary
# files of those (raylake/format/schema_files.py).
_SCHEMA_FILE = re.compile(r"schema-\d+\.json")
_TMP_FILE = temp_names(_SCHEMA_FILE.pattern)


def check_new_location(uri: str, storage_options: OptionsLike | None = None) -> None:
    """Refuse, as :func:`open_or_create_table` would when it creates the table, a place
    that holds other files: a sink checks it on the driver before its job runs, where
    creating the table waits for the job's first block (the work before it done)."""
    with sink_location():
        check_empty_location(FileIO(uri_arg(uri), storage_options), allow_other_files=False)


@contextmanager
def sink_location() -> Iterator[None]:
    """A sink's refusal of a location that holds other files, naming what a sink user
    can do (a sink takes no allow_other_files)."""
    try:
        yield
    except TableLocationError as exc:
        if not exc.found:  # the path is a file
            raise
        # A sink takes no allow_other_files: the table is created first, with it.
        allow = "create the table first with create_table(..., allow_other_files=True)"
        raise TableLocationError(
            exc.path, other_files(exc.found, allow, "remove_orphan_files"), exc.found
        ) from None


def drop_new_table(tbl: Table, beside_other_files: bool = False) -> None:
    """Remove ``tbl``, which the caller created for a write that then failed (and whose
    own files it deleted), if no snapshot has landed in it and no other writer is
    writing into it: left behind, the empty table would make the corrected call fail
    ("already exists"). Its directory held nothing before (``create_table`` refuses
    other files), so everything under it is the table's; ``beside_other_files`` (a
    table made with ``allow_other_files=True``): only its schema goes. A failure to
    remove it is logged, not raised: it must not hide the write's error.

    Parallel jobs may append to a new table, each creating it or finding it created:
    where files another writer wrote are there, the table stays (it was dropped under
    that job, which then failed, naming a table that was there when it planned).
    """
    try:
        _drop_if_unused(tbl, beside_other_files)
    except Exception as exc:  # a store failing again while the write's error is raised
        logger.warning("could not remove the table created at %s: %s", tbl.uri, exc)


def _drop_if_unused(tbl: Table, beside_other_files: bool) -> None:
    if tbl.latest_snapshot() is not None:
        return
    others = _written_by_others(tbl.file_io)
    if others:
        logger.info(
            "keeping the table created at %s: another writer is writing into it (%s)",
            tbl.uri,
            others[0],
        )
        return
    if beside_other_files:
        _drop_schema_files(tbl.file_io)
    elif isinstance(tbl.file_io.fs, LocalFileSystem):
        _drop_tree(tbl)
    else:
        _drop_objects(tbl.file_io)


# New tables made in a local directory that existed before (the user's, made empty for
# it): their drop empties it and leaves it.
_KEPT_DIRECTORIES: weakref.WeakSet[Table] = weakref.WeakSet()


def directory_exists(file_io: FileIO) -> bool:
    """Whether a table about to be made has a local directory already (the user's)."""
    return isinstance(file_io.fs, LocalFileSystem) and os.path.isdir(file_io.root)


def keep_directory(tbl: Table) -> None:
    """Mark ``tbl``, just made, as made in a directory that existed before."""
    _KEPT_DIRECTORIES.add(tbl)


def _drop_tree(tbl: Table) -> None:
    """Remove the table's directory (fsspec's local ``rm`` removes a tree, no glob). One
    that existed before the table (the user made it for the table; the working directory
    of ``raylake write . --create``) or is a symbolic link (to another disk, say) is the
    user's: what the table put in it goes, the directory (or the link) stays."""
    root = tbl.file_io.root
    if tbl not in _KEPT_DIRECTORIES and not os.path.islink(root):
        tbl.file_io.fs.rm(root, recursive=True)
        return
    for name in os.listdir(root):
        tbl.file_io.fs.rm(os.path.join(root, name), recursive=True)


def _drop_objects(file_io: FileIO) -> None:
    """Delete the objects under the table's root, one by one. fsspec's ``rm`` expands
    ``?``, ``*`` and ``[`` in a path as a glob (``s3://b/run?`` matches ``s3://b/run1``,
    another table), and a recursive remove of a bucket's root deletes the bucket itself;
    the empty "folder" object the table was made in (the AWS console's) stays too: the
    bucket, its settings and that folder are the user's."""
    root = file_io.root.rstrip("/")
    file_io.fs.invalidate_cache(root)  # s3fs answers from listings it cached
    # Through FileIO: a store's transient errors are retried, and one that stays is
    # logged, not raised over the failure that made the table go.
    ours = [p[len(root) + 1 :] for p in file_io.fs.find(root) if p.rstrip("/") != root]
    file_io.delete_quietly(ours)


def _drop_schema_files(file_io: FileIO) -> None:
    """Remove the new table's schema files, and schema/ where that leaves it empty: a
    directory the table was made in with ``allow_other_files=True`` may have held a
    schema/ of the user's own before, whose files stay."""
    for rel, _ in file_io.list_files(SCHEMA_DIR):
        name = rel.rsplit("/", 1)[-1]
        if rel.count("/") == 1 and (_SCHEMA_FILE.fullmatch(name) or _TMP_FILE.fullmatch(name)):
            file_io.delete(rel)
    if file_io.is_local:
        with contextlib.suppress(OSError):  # not empty: the user's files stay in it
            file_io.fs.rmdir(file_io.full_path(SCHEMA_DIR))


def _written_by_others(file_io: FileIO) -> list[str]:
    """The files named as raylake's writers name theirs in a table's data and manifest
    directories: after a failed write deleted its own, another writer's."""
    found = file_io.list_files(DATA_DIR) + file_io.list_files(MANIFEST_DIR)
    return [rel for rel, _ in found if is_raylake_file(rel)]
