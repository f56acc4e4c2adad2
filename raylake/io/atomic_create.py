"""Which filesystems create a file atomically if it is absent: what a commit's snapshot
create needs against concurrent writers (docs/object-stores.md). By filesystem class and
protocol, and for some only with recent enough releases of their packages."""

from __future__ import annotations

import functools
import importlib.metadata
import re
from collections.abc import Callable
from typing import Any

# Filesystems whose create-if-absent is atomic, by class and protocol (a subclass under
# another protocol may change how it opens files): local files (a hard link), S3 (a
# conditional PUT with If-None-Match: *, s3fs mode "xb"), and memory:// (it lives in one
# process, where FileIO's _CREATE_LOCK serializes creates).
_ATOMIC_CREATE = {
    "LocalFileSystem": {"file", "local"},
    "MemoryFileSystem": {"memory"},
    "S3FileSystem": {"s3", "s3a"},
}


# Filesystems whose "xb" is atomic only with recent enough packages: a check each, and
# what to install where it fails.
def _s3_creates_exclusively() -> bool:
    """s3fs sends mode "xb" as a conditional PUT (If-None-Match: *) from 2025.7.0, and only
    where botocore's S3 model has the parameter (1.35.7 has it): s3fs silently drops the
    parameters the model lacks. Without both, "xb" overwrites an existing object
    (measured against the tests' S3 server), so concurrent commits could be lost."""
    if not release_at_least("s3fs", (2025, 7, 0)):
        return False
    try:
        import botocore.session

        model = botocore.session.get_session().get_service_model("s3")
    except Exception:  # no usable botocore: s3fs cannot work either
        return False
    operations = ("PutObject", "CompleteMultipartUpload")
    return all("IfNoneMatch" in model.operation_model(op).input_shape.members for op in operations)


ATOMIC_CREATE_NEEDS: dict[str, tuple[Callable[[], bool], str]] = {
    "S3FileSystem": (_s3_creates_exclusively, "s3fs>=2025.7 and botocore>=1.35.7"),
}


def creates_atomically(fs: Any) -> bool:
    """Whether ``fs``'s create-if-absent (mode "xb", or a link) is atomic against other
    processes."""
    if getattr(fs, "raylake_atomic_create", False):  # says so itself (a test filesystem)
        return True
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    name = type(fs).__name__
    if not protocols & _ATOMIC_CREATE.get(name, set()):
        return False
    needs = ATOMIC_CREATE_NEEDS.get(name)
    return needs is None or _holds(needs[0])


def atomic_create_upgrade(fs: Any) -> str | None:
    """What to install to make ``fs``'s create atomic, when only the installed releases
    of its packages stand in the way."""
    needs = ATOMIC_CREATE_NEEDS.get(type(fs).__name__)
    return None if needs is None or _holds(needs[0]) else needs[1]


@functools.cache
def _holds(check: Callable[[], bool]) -> bool:
    """``check()``, once per process: installed packages do not change under it."""
    return check()


@functools.cache
def release_at_least(package: str, release: tuple[int, ...]) -> bool:
    """Whether the installed ``package`` is ``release`` or later (leading numbers of its
    version; a package that is not installed, or not numbered so, is not)."""
    try:
        version = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return version_release(version) >= release


def version_release(version: str) -> tuple[int, ...]:
    """The leading numeric parts of a version: ``"2025.7.0.post1"`` -> ``(2025, 7, 0)``."""
    parts = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.end() != len(part):
            break
    return tuple(parts)
