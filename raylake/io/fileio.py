"""FileIO: the narrow file interface the table layer uses, over any fsspec filesystem.

Paths given to FileIO are relative to the table root, so metadata never stores
absolute paths and a table can be copied or moved. FileIO pickles without its
filesystem objects (they are rebuilt lazily), so Ray tasks and Spark executors
can carry it cheaply.

FileIO decides which client serves which operation, so table code never asks
(docs/object-stores.md, "Which client does what"):

- data files (Parquet reads, ranged and concurrent, and uploads) go through
  :meth:`arrow_filesystem`: pyarrow's native client where pyarrow has one for the
  store (local files, S3), else the fsspec filesystem wrapped for pyarrow;
- metadata reads (one GET each), listings, deletes and the commit's
  create-if-absent (S3's conditional PUT) go through fsspec (:attr:`fs`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import fsspec
import pyarrow.fs as pafs
from fsspec.implementations.local import LocalFileSystem

from raylake.caching import ProcessLock
from raylake.errors import InvalidArgumentError
from raylake.io import retry
from raylake.io.atomic_create import atomic_create_upgrade, creates_atomically
from raylake.io.create import UNREADABLE, create_checked, link_create, replace_write
from raylake.io.credentials import StorageOptions
from raylake.io.mapped import MappedLocalFiles, mapped_files
from raylake.io.native import S3_PROTOCOLS, native_filesystem
from raylake.io.read_errors import RetriedReads, access_denied_named
from raylake.io.retry import RetryPolicy, call_with_retries, is_cut_short, is_transient
from raylake.io.s3options import s3_client_options
from raylake.io.walk import find_options

logger = logging.getLogger(__name__)

T = TypeVar("T")
LOCAL_FILES_IN_FLIGHT = 4  # pyarrow.dataset's default fragment readahead
REMOTE_FILES_IN_FLIGHT = 16
# Stores without directories: a makedirs there is a request (s3fs checks the bucket) for nothing.
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})
# Serializes create-if-absent on non-local filesystems within a process: fsspec's "xb" is
# often check-then-write in Python (memory:// is), so two threads could both "create" a file.
_CREATE_LOCK = ProcessLock()


class FileIO:
    """Read, write, create-if-absent, delete and list files under one root URI.

    Secrets in ``storage_options`` never travel in clear text inside a pickled FileIO
    and never appear in its repr; other processes get them by reference
    (raylake/io/credentials.py).
    """

    def __init__(
        self, uri: str, storage_options: Mapping[str, Any] | StorageOptions | None = None
    ) -> None:
        self.uri = absolute_uri(str(uri).rstrip("/") or "/")
        self._options = StorageOptions.of(storage_options)
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root: str | None = None
        self._arrow_fs: pafs.FileSystem | None = None
        self.retry_policy = RetryPolicy.of(self._options.public)

    def __getstate__(self) -> dict[str, Any]:
        # Filesystem objects hold caches, sessions and locks: rebuild them on the other side.
        # The options pickle without their secrets (raylake/io/credentials.py).
        return {"uri": self.uri, "options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.uri = state["uri"]
        self._options = state["options"]
        self._fs = None
        self._root = None
        self._arrow_fs = None
        self.retry_policy = RetryPolicy.of(self._options.public)

    def __repr__(self) -> str:
        return f"FileIO({self.uri!r})"

    def resolved_options(self) -> dict[str, Any]:
        """The full options to build a client of the store with, secrets included, in
        whichever process this runs (docs/object-stores.md, "Credentials").

        Raises :class:`~raylake.errors.MissingCredentialsError` where this process has
        no credentials at all (neither the driver's nor the store's own chain).
        """
        return self._options.resolve(self.uri)

    @property
    def storage_options(self) -> dict[str, Any]:
        """The same as :meth:`resolved_options`."""
        return self.resolved_options()

    @property
    def options(self) -> StorageOptions:
        """The options as they travel: public ones in clear, secrets by reference."""
        return self._options

    @property
    def public_storage_options(self) -> dict[str, Any]:
        """The options without secrets: safe to log, show or ship."""
        return dict(self._options.public)

    @property
    def atomic_create(self) -> bool:
        """Whether :meth:`create_if_absent` is atomic against other processes."""
        return creates_atomically(self.fs)

    @property
    def atomic_create_upgrade(self) -> str | None:
        """What to install to make :attr:`atomic_create` true, when only the installed
        releases of the filesystem's packages stand in the way."""
        return atomic_create_upgrade(self.fs)

    @property
    def client_retries(self) -> bool:
        """Whether the store's client retries transient errors itself (botocore, for S3):
        then FileIO tries each request once, so that the bound is the client's."""
        return self.protocol in S3_PROTOCOLS

    def client_options(self) -> dict[str, Any]:
        """The options for the store's client: :meth:`resolved_options` without raylake's
        own, with the retry bound handed to botocore where the caller set none; for S3,
        checked, in s3fs's spelling, with the endpoint AWS's configuration names
        (raylake/io/s3options.py)."""
        return self._client_options()[0]

    def _client_options(self) -> tuple[dict[str, Any], bool]:
        """:meth:`client_options`, and whether pyarrow's native client may be built from
        them (False where the endpoint the store's own client will use is unknown)."""
        options = self.resolved_options()
        if self.protocol in S3_PROTOCOLS:
            options, endpoint_known = s3_client_options(options, self.uri)
        else:
            endpoint_known = True
        options.pop(retry.OPTION, None)
        if self.client_retries:
            config = dict(options.get("config_kwargs") or {})
            config.setdefault(
                "retries",
                {"mode": "standard", "total_max_attempts": self.retry_policy.max_attempts},
            )
            options["config_kwargs"] = config
        return options, endpoint_known

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None:
            fs, root = _url_to_fs(self.uri, self.client_options())
            if self.client_retries and hasattr(fs, "retries"):
                # s3fs retries some errors again around botocore's retries: one bound only.
                fs.retries = 1
            # _root first: another thread that sees _fs set must also see _root set.
            self._root = root.rstrip("/") or "/"
            self._fs = fs
        return self._fs

    @property
    def root(self) -> str:
        """The table root as a path of :attr:`fs` (no protocol)."""
        self.fs  # noqa: B018 - initializes _root
        assert self._root is not None
        return self._root

    @property
    def is_local(self) -> bool:
        # A filesystem may ask to be served through its own methods although it is local
        # files underneath (raylake/testing/localfaults.py injects faults there).
        fs = self.fs
        return isinstance(fs, LocalFileSystem) and not getattr(fs, "raylake_via_fsspec", False)

    @property
    def protocol(self) -> str:
        """The URI's scheme (``s3``, ``memory``...); ``file`` for plain paths."""
        scheme = self.uri.split("://", 1)[0] if "://" in self.uri else "file"
        return scheme.lower()

    @property
    def is_remote(self) -> bool:
        """Whether every request is a network round trip (object stores, HDFS, HTTP...)."""
        return not self.is_local and self.protocol != "memory"

    @property
    def files_in_flight(self) -> int:
        """How many data files a scan reads at once: more where each request waits on
        the network, so that round trips overlap (issue 16, measured in
        bench/object_store.py); pyarrow's default where the disk answers at once."""
        return REMOTE_FILES_IN_FLIGHT if self.is_remote else LOCAL_FILES_IN_FLIGHT

    @property
    def data_through_python(self) -> bool:
        """Whether pyarrow reads data files by calling back into Python (an fsspec
        filesystem wrapped for pyarrow: ``memory://``, S3 through s3fs, GCS...). A scan
        must not leave pyarrow's threads reading such files behind it: one that enters
        the interpreter while it exits hangs the exit or aborts it (fragments.py)."""
        return not self.is_local and isinstance(self.arrow_filesystem(), pafs.PyFileSystem)

    def full_path(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def arrow_filesystem(self) -> pafs.FileSystem:
        """The pyarrow filesystem that serves data files over the same paths as :attr:`fs`:
        pyarrow's native client where it has one (local files, S3), else fsspec wrapped."""
        if self._arrow_fs is None:
            if self.is_local:
                # Data files are read from memory maps, kept from one read to the next
                # (raylake/io/mapped.py): a read is then no copy out of the page cache
                # into fresh memory, and no page-table work either once a file is mapped.
                arrow_fs: pafs.FileSystem = pafs.PyFileSystem(MappedLocalFiles())
            else:
                options, endpoint_known = self._client_options()
                native = (
                    native_filesystem(self.protocol, options, self.root) if endpoint_known else None
                )
                handler = RetriedReads(self.fs, *self._tries(), client_retries=self.client_retries)
                arrow_fs = native or pafs.PyFileSystem(handler)
            self._arrow_fs = arrow_fs
        return self._arrow_fs

    # -- reads ---------------------------------------------------------------------------

    def _tries(self) -> tuple[RetryPolicy, Callable[[BaseException], bool]]:
        """The retry policy, and which errors FileIO retries itself. Where the client
        retries by itself, only what it does not: an answer cut short (a read failed at
        once on one dropped connection)."""
        return self.retry_policy, is_cut_short if self.client_retries else is_transient

    def _call(self, operation: str, rel: str, fn: Callable[[], T]) -> T:
        policy, retry_here = self._tries()
        path = self.full_path(rel)
        with access_denied_named(operation, path):
            return call_with_retries(fn, policy, operation, path, policy.max_attempts, retry_here)

    def read_bytes(self, rel: str) -> bytes:
        # start=0 makes it one ranged GET on object stores: without it s3fs first asks
        # for the size (HEAD), and a missing key costs a HEAD and a LIST.
        return self._call("read", rel, lambda: self.fs.cat_file(self.full_path(rel), start=0))

    def exists(self, rel: str) -> bool:
        path = self.full_path(rel)
        self._forget_listing(path)
        return bool(self._call("exists", rel, lambda: self.fs.exists(path)))

    def _forget_listing(self, path: str) -> None:
        """Drop the filesystem's cached listings of ``path``: other processes change the
        table, and s3fs answers ``ls`` and ``exists`` from listings it cached before,
        forever by default. A stale listing of snapshot/ made orphan cleanup delete the
        files of the snapshots it did not see (found by bench/soak.py)."""
        self.fs.invalidate_cache(path)

    def list_names(self, rel_dir: str) -> list[str]:
        """File names (not paths) directly under a directory; empty if it does not exist."""
        path = self.full_path(rel_dir)
        self._forget_listing(path)
        try:
            entries = self._call("list", rel_dir, lambda: self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []
        return sorted(posixpath.basename(str(e).rstrip("/")) for e in entries)

    def numbered(self, rel_dir: str, pattern: re.Pattern[str]) -> list[int]:
        """The numbers of the files directly under a directory whose names match
        ``pattern`` (its first group: the digits), in order; other names are not counted."""
        matches = (pattern.match(n) for n in self.list_names(rel_dir))
        return sorted(int(m.group(1)) for m in matches if m)

    def list_files(self, rel_dir: str) -> list[tuple[str, float | None]]:
        """Every file below a directory, recursively: (relative path, mtime in seconds or None)."""
        base = self.full_path(rel_dir)
        self._forget_listing(base)
        # fsspec's generic find (a walk: local files, most stores without a flat listing)
        # omits a directory whose listing failed: an error to raise here, and retry.
        raising = find_options(self.fs)
        try:
            found = self._call("list", rel_dir, lambda: self.fs.find(base, detail=True, **raising))
        except FileNotFoundError:
            return []
        out = []
        for path, info in found.items():
            rel = posixpath.relpath(str(path), self.root)
            out.append((rel, _mtime(info)))
        return sorted(out)

    # -- writes --------------------------------------------------------------------------

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file, replacing any file at that path."""
        path = self.full_path(rel)
        self.makedirs(posixpath.dirname(rel))
        if self.is_local:
            self._call("write", rel, lambda: replace_write(path, data))
        else:
            self._call("write", rel, lambda: self.fs.pipe_file(path, data))

    def create_if_absent(
        self,
        rel: str,
        data: bytes,
        *,
        gone_since: Callable[[], bool] | None = None,
        replaced_since: Callable[[bytes], bool] | None = None,
    ) -> bool:
        """Atomically create a file with ``data`` unless it exists; True if this call did.

        This is the commit point of the table format. Local files use a hard link of
        a fully written temporary file (atomic, never a partial file). Other
        filesystems use an exclusive-create open (``"xb"``), which memory:// and
        object stores with conditional writes implement, under a process-wide lock
        (fsspec often implements ``"xb"`` as check-then-write); where a filesystem has
        no such primitive, the check-then-write fallback is only safe within a process,
        and concurrent writers from several machines need an external lock.

        A create may fail after the store carried it out (its answer lost, or a
        client's own retry of it told "exists"): so where the answer is an error, or
        "exists" from a client that retries by itself, the file is read back, and
        holding exactly ``data`` means this call created it (callers make ``data``
        unique: a snapshot holds its commit id). Absent, the create is tried again,
        up to the retry bound. Raises :class:`CommitStateUnknownError` where, after the
        bound, the store could not be read to tell, or where ``gone_since`` says that a
        file found absent after such a try may have been created and deleted since, or
        ``replaced_since`` that another writer's file found there may have replaced it.
        """
        path = self.full_path(rel)
        self.makedirs(posixpath.dirname(rel))
        with access_denied_named("create", path):
            return create_checked(
                lambda: self._create_once(path, data),
                lambda: self._read_back(rel),
                data,
                path,
                self.retry_policy,
                final_exists=not self.client_retries,
                gone_since=gone_since,
                replaced_since=replaced_since,
            )

    def _create_once(self, path: str, data: bytes) -> bool:
        if self.is_local:
            return link_create(path, data)
        try:
            with _CREATE_LOCK, self.fs.open(path, "xb") as f:
                f.write(data)
            return True
        except FileExistsError:
            return False
        except (NotImplementedError, ValueError):
            # Only reached for stores that are not atomic_create, which the committer
            # allows only with the single-writer option (docs/object-stores.md).
            logger.debug("%s has no exclusive create; using check-then-write", type(self.fs))
            with _CREATE_LOCK:
                if self.fs.exists(path):
                    return False
                self.fs.pipe_file(path, data)
                return True

    def _read_back(self, rel: str) -> bytes | object | None:
        """The file's bytes, None where it is absent, UNREADABLE where reads keep failing."""
        try:
            return self.read_bytes(rel)
        except FileNotFoundError:
            return None
        except Exception as exc:  # any failure to look leaves the outcome open, never "lost"
            logger.warning("could not read back %s: %r", rel, exc)
            return UNREADABLE

    def delete(self, rel: str) -> None:
        """Delete a file; a missing file is not an error (deletes are retried idempotently)."""
        path = self.full_path(rel)
        if self.is_local:  # its disk space is freed once no map holds it
            mapped_files.forget(path)
        with contextlib.suppress(FileNotFoundError):
            self._call("delete", rel, lambda: self.fs.rm_file(path))

    def delete_quietly(self, rels: list[str]) -> None:
        """Best-effort cleanup of files a failed operation wrote."""
        for rel in rels:
            try:
                self.delete(rel)
            except OSError as exc:  # cleanup must not hide the original error
                logger.warning("could not delete %s: %s", rel, exc)

    def makedirs(self, rel: str) -> None:
        if self.protocol in OBJECT_STORES:
            return  # no directories to make: a key's prefix exists once the key does
        self.fs.makedirs(self.full_path(rel), exist_ok=True)


def _mtime(info: Mapping[str, Any]) -> float | None:
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        with contextlib.suppress(TypeError, ValueError):
            return float(value)
    return None


def _url_to_fs(uri: str, options: Mapping[str, Any]) -> tuple[fsspec.AbstractFileSystem, str]:
    try:
        return fsspec.core.url_to_fs(uri, **options)
    except ValueError as exc:  # fsspec says only "Protocol not known: foo"
        if not str(exc).startswith("Protocol not known"):
            raise
        known = "a local path or a URL of a filesystem fsspec knows (file://, s3://, gs://, ...)"
        raise InvalidArgumentError("uri", uri, known) from exc


def absolute_uri(uri: str) -> str:
    """A relative local path as an absolute one, fixed where the table is opened: Ray
    tasks, actors and Spark executors run in working directories of their own. ``~``
    is the home directory, as pandas and fsspec read it (a directory named ``~`` in the
    working directory was made). fsspec reads ``file://t`` and ``local://t`` as the
    relative path ``t`` too: they are fixed alike, in their own scheme."""
    for scheme in _LOCAL_SCHEMES:
        if uri.startswith(scheme) and not uri.startswith("/", len(scheme)):
            return scheme + absolute_uri(uri[len(scheme) :] or ".")
    if "://" in uri:
        return uri
    return os.path.abspath(os.path.expanduser(uri))


_LOCAL_SCHEMES = ("file://", "local://")


def location_key(uri: str) -> str:
    """What ``uri`` points at, to tell whether two spellings name one table: a local
    path (``file://`` and ``local://`` URLs too) absolute, its links resolved; a URL
    without a trailing slash."""
    uri = absolute_uri(uri)
    for scheme in _LOCAL_SCHEMES:
        if uri.startswith(scheme):
            uri = uri[len(scheme) :]
    return uri.rstrip("/") if "://" in uri else os.path.realpath(uri)
