"""Local files with injected faults: ``faulty://<path>`` raises ``OSError`` (EIO,
ENOSPC) on reads, writes, creates, renames and listings by a seeded
:class:`~raylake.testing.faults.FaultPlan`.

Open a table at ``faulty:///abs/path`` with
``storage_options={"fault_plan": plan.to_json()}`` after :func:`register`. Every
request of raylake goes through this filesystem: metadata through FileIO, data files
through pyarrow (wrapped), so a fault can hit any step of a write or a read.
:func:`injector` gives the plan's counts of what was injected in this process.

Operations: ``read`` (whole-file reads and opening a file to read), ``write`` (a
file opened for writing: ``enospc`` writes half of it first), ``create`` (the
exclusive create of the commit point, atomic as on local files: a fully written
temporary file hard-linked into place), ``rename`` and ``list``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import time
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from raylake.io.temp_names import temp_path
from raylake.testing.faults import FaultInjector, FaultPlan, FaultRule

PROTOCOL = "faulty"
_injectors: dict[str, FaultInjector] = {}


def register() -> None:
    """Make ``faulty://`` URIs open a :class:`FaultyFileSystem`."""
    fsspec.register_implementation(PROTOCOL, FaultyFileSystem, clobber=True)


def injector(plan: FaultPlan | str) -> FaultInjector:
    """The injector of ``plan`` in this process (one per plan, shared by its filesystems)."""
    key = plan if isinstance(plan, str) else plan.to_json()
    found = _injectors.get(key)
    if found is None:
        found = _injectors[key] = FaultInjector(FaultPlan.from_json(key))
    return found


class FaultyFileSystem(LocalFileSystem):
    """Local files whose operations fail by a fault plan."""

    protocol = (PROTOCOL,)
    # Served through these methods, not the local fast paths (raylake/io/fileio.py).
    raylake_via_fsspec: ClassVar[bool] = True
    raylake_atomic_create: ClassVar[bool] = True

    def __init__(self, fault_plan: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.faults = injector(fault_plan or FaultPlan().to_json())

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3 :]
        return super()._strip_protocol(path)

    def _fault(self, operation: str, path: str, conditional: bool = False) -> FaultRule | None:
        rule = self.faults.decide(operation, path, conditional)
        if rule is not None and rule.kind == "slow":
            time.sleep(rule.delay_s)
            return None
        if rule is None or rule.kind in ("lost", "lost_reset"):
            return rule  # carried out first; the caller raises after
        raise _error(rule, path)

    def cat_file(self, path: Any, start: Any = None, end: Any = None, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        rule = self._fault("read", path)
        data = super().cat_file(path, start=start, end=end, **kwargs)
        _after(rule, path)
        return data

    def ls(self, path: Any, detail: bool = False, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        rule = self._fault("list", path)
        found = super().ls(path, detail=detail, **kwargs)
        _after(rule, path)
        return found

    def mv(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> None:
        path1 = self._strip_protocol(path1)
        rule = self._fault("rename", path1)
        super().mv(path1, path2, recursive=recursive, **kwargs)
        _after(rule, path1)

    rename = mv

    def pipe_file(self, path: Any, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Whole-file writes as raylake makes them on local files: a temporary file,
        renamed into place (a fault may leave the temporary file half written)."""
        path = self._strip_protocol(path)
        tmp = temp_path(path)
        try:
            with self.open(tmp, "wb") as f:
                f.write(value)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        os.replace(tmp, path)

    def _open(self, path: Any, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if "x" in mode:
            return _ExclusiveCreate(self, path)
        if "r" in mode:
            rule = self._fault("read", path)
            _after(rule, path)
            return super()._open(path, mode, **kwargs)
        rule = self.faults.decide("write", path)
        handle = super()._open(path, mode, **kwargs)
        return _FaultyWriter(handle, rule, path) if rule is not None else handle


class _FaultyWriter(io.RawIOBase):
    """A file being written that fails by its rule: ENOSPC/EIO after half of it is
    written, ``lost``: written, closed, then EIO."""

    def __init__(self, handle: Any, rule: FaultRule, path: str) -> None:
        self._handle = handle
        self._rule = rule
        self._path = path
        self._written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self._rule.kind in ("eio", "enospc", "slowdown", "internal", "reset"):
            view = memoryview(data)
            self._handle.write(view[: len(view) // 2])
            self._handle.flush()
            raise _error(self._rule, self._path)
        return int(self._handle.write(data))

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._handle.close()
        _after(self._rule, self._path)

    def tell(self) -> int:
        return int(self._handle.tell())


class _ExclusiveCreate(io.BytesIO):
    """Create-if-absent as raylake does on local files: the whole file, then a hard link."""

    def __init__(self, fs: FaultyFileSystem, path: str) -> None:
        super().__init__()
        self._fs = fs
        self._path = path

    def close(self) -> None:
        if self.closed:
            return
        data = self.getvalue()
        super().close()
        rule = self._fs._fault("create", self._path, conditional=True)
        tmp = temp_path(self._path)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.link(tmp, self._path)  # FileExistsError: another writer won
        finally:
            os.unlink(tmp)
        _after(rule, self._path)


def _after(rule: FaultRule | None, path: str) -> None:
    """Raise for a fault whose request was carried out (its answer is lost)."""
    if rule is not None and rule.kind in ("lost", "lost_reset"):
        raise OSError(errno.EIO, "injected fault: done, but the answer was lost", path)


def _error(rule: FaultRule, path: str) -> OSError:
    code = errno.ENOSPC if rule.kind == "enospc" else errno.EIO
    return OSError(code, f"injected fault ({rule.kind})", path)
