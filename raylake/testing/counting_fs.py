"""A local filesystem that counts the files read, for tests that show repeated reads
are gone: open a table at ``countfile://<path>`` (after :func:`register`) and read
:data:`CountingFileSystem.reads`.

The counts are of whole-file reads through ``cat_file`` (what raylake's FileIO reads
metadata with), by path relative to nothing: the full local path. Commits need
``options={"commit.single-writer": "true"}``: raylake trusts create-if-absent only on
the filesystems it knows.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "countfile"


class CountingFileSystem(LocalFileSystem):
    """Local files; every ``cat_file`` is counted in :attr:`reads` by path."""

    protocol = (PROTOCOL,)
    reads: ClassVar[Counter[str]] = Counter()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3 :]
        return super()._strip_protocol(path)

    def cat_file(self, path: Any, start: Any = None, end: Any = None, **kwargs: Any) -> Any:
        type(self).reads[str(self._strip_protocol(path))] += 1
        return super().cat_file(path, start=start, end=end, **kwargs)

    @classmethod
    def count(cls, suffix: str) -> int:
        """Reads of the files whose path ends with ``suffix``."""
        return sum(n for path, n in cls.reads.items() if path.endswith(suffix))


def register() -> type[CountingFileSystem]:
    """Make ``countfile://`` URIs open a :class:`CountingFileSystem`; counts start at 0."""
    fsspec.register_implementation(PROTOCOL, CountingFileSystem, clobber=True)
    CountingFileSystem.reads.clear()
    return CountingFileSystem
