"""Local data files kept mapped into memory from one read to the next.

A local data file is read from a memory map: its bytes are decoded from the page cache
in place, never copied into fresh buffers. Mapping a file and unmapping it again at
every read costs, though: each page is entered into the process's page tables on its
first touch and taken out at the unmap, about as much CPU as decoding a table of
PLAIN float columns (a loader's epoch over a primary-key table spent a third of its
reads on it; docs/benchmarks.md, "Local data files stay mapped"). Data files never
change once written (unique names, never rewritten), so this process keeps the maps
of the files it read, up to :data:`MAPPED_BYTES` of them, least recently used first
out: a training loop's next epoch finds its files mapped.

The pages stay the kernel's page cache: a map takes no memory of its own beyond its
page-table entries, and the kernel may still reclaim clean pages under pressure (they
count in the process's resident set as file pages, ``RssFile``). A file deleted while
mapped keeps its disk space until its map goes, so files this process deletes are
unmapped first (:meth:`MappedFiles.forget`), and ``raylake.table.clear_caches()``
unmaps every file. Files that another process deletes (a maintenance job expiring
snapshots beside a training job) are unmapped by a sweep: at the first read after
:data:`SWEEP_SECONDS`, every kept map whose file is gone or changed goes. A file is
known by its path, size and modification time, so a path that names another file later
is mapped again.

A scan of local files reads them from fragments made over their maps
(:meth:`MappedFiles.fragment`), not through a Python filesystem: pyarrow's scan threads
then never call back into Python. A scan stopped early (the first batch of
``to_batches()``, ``raylake scan --limit``) leaves its read-ahead running on those
threads, and one that needed the interpreter while it exited hung the process or
aborted it. A map keeps the fragments made over it, and they go with it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from raylake.caching import LruCache, process_cache

# Mapped bytes kept per process: an eighth of the host's memory, at most 8 GiB.
_PHYSICAL = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if os.name == "posix" else 0
MAPPED_BYTES = min(8 << 30, _PHYSICAL // 8) if _PHYSICAL > 0 else 1 << 30
# Seconds between sweeps for files deleted by other processes: a sweep stats every kept
# file (about a microsecond each), and a deleted file's disk space waits for it.
SWEEP_SECONDS = 10.0

T = TypeVar("T")


class MappedFiles:
    """Whole-file memory maps of local files, by path, bounded by their bytes."""

    def __init__(self, budget: int, clock: Callable[[], float] = time.monotonic) -> None:
        # path -> (size, modification time in ns, the map, what was made over the map)
        self._maps: LruCache[str, tuple[int, int, pa.Buffer, dict[Any, Any]]] = LruCache(
            budget, weigh=lambda kept: kept[2].size
        )
        self._clock = clock
        self._swept = clock()

    def buffer(self, path: str) -> pa.Buffer | None:
        """File ``path`` as a buffer over its map (None for an empty file, which
        cannot be mapped)."""
        kept = self._kept(path)
        return None if kept is None else kept[2]

    def fragment(self, path: str, key: Any, make: Callable[[pa.Buffer], T]) -> T | None:
        """What ``make`` gives for file ``path``'s map, kept with the map under ``key``
        (None for an empty file)."""
        kept = self._kept(path)
        if kept is None:
            return None
        made: dict[Any, Any] = kept[3]
        if key not in made:
            made[key] = make(kept[2])
        result: T = made[key]
        return result

    def _kept(self, path: str) -> tuple[int, int, pa.Buffer, dict[Any, Any]] | None:
        now = self._clock()
        if now - self._swept >= SWEEP_SECONDS:
            self._swept = now
            self.sweep()
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._maps.discard(path)  # deleted by another process: its space goes now
            raise
        if not st.st_size:
            return None
        kept = self._maps.get(path)
        if kept is not None and kept[:2] == (st.st_size, st.st_mtime_ns):
            return kept
        with pa.memory_map(path) as mapped:
            buffer = mapped.read_buffer()  # holds the map; the file descriptor closes here
        kept = (st.st_size, st.st_mtime_ns, buffer, {})
        self._maps.put(path, kept)
        return kept

    def forget(self, path: str) -> None:
        """Unmap ``path`` (about to be deleted or written); a reader holding its buffer
        keeps the map until it lets go."""
        self._maps.discard(path)

    def sweep(self) -> list[str]:
        """Unmaps the files deleted or changed since they were mapped (by another
        process: this one unmaps what it deletes or writes itself); returns their
        paths. A reader holding a buffer keeps its map until it lets go."""
        gone = []
        for path in self._maps.cached_keys():
            kept = self._maps.peek(path)
            try:
                st = os.stat(path)
                same = kept is not None and kept[:2] == (st.st_size, st.st_mtime_ns)
            except OSError:
                same = False
            if not same:
                self._maps.discard(path)
                gone.append(path)
        return gone

    def __len__(self) -> int:
        return len(self._maps)

    @property
    def mapped_bytes(self) -> int:
        return self._maps.weight

    def paths(self) -> list[str]:
        """The files mapped, least recently used first."""
        return self._maps.cached_keys()

    def clear(self) -> None:
        self._maps.clear()


mapped_files = process_cache(MappedFiles(MAPPED_BYTES))


class MappedLocalFiles(pafs.FileSystemHandler):  # type: ignore[misc]
    """The local filesystem served to pyarrow, files to read opened over their kept
    maps (:data:`mapped_files`); everything else is pyarrow's local filesystem."""

    def __init__(self) -> None:
        self._local = pafs.LocalFileSystem(use_mmap=True)

    def __reduce__(self) -> tuple[Any, ...]:
        return (MappedLocalFiles, ())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MappedLocalFiles)

    def __hash__(self) -> int:
        return hash(MappedLocalFiles)

    def open_input_file(self, path: str) -> pa.NativeFile:
        buffer = mapped_files.buffer(path)
        return self._local.open_input_file(path) if buffer is None else pa.BufferReader(buffer)

    def get_type_name(self) -> str:
        return "raylake-mapped-local"

    def normalize_path(self, path: str) -> str:
        return str(self._local.normalize_path(path))

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return list(self._local.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return list(self._local.get_file_info(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        self._local.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self._local.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("raylake never deletes the contents of the filesystem's root")

    def delete_file(self, path: str) -> None:
        mapped_files.forget(path)
        self._local.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        mapped_files.forget(src)
        mapped_files.forget(dest)
        self._local.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        mapped_files.forget(dest)
        self._local.copy_file(src, dest)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self._local.open_input_stream(path)

    def open_output_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        mapped_files.forget(path)
        return self._local.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        mapped_files.forget(path)
        return self._local.open_append_stream(path, metadata=metadata)
