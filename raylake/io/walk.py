"""How ``FileIO.list_files`` asks fsspec to list a tree: fsspec's generic ``find`` (a
walk: local files, most stores without a flat listing) omits a directory whose listing
failed, which a listing must raise (and retry) instead: one failed listing under a
user's folder made it look empty, and a table was made among the user's files."""

from __future__ import annotations

from typing import Any

import fsspec


def find_options(fs: fsspec.AbstractFileSystem) -> dict[str, Any]:
    """Keywords for ``fs.find`` that make a walk raise a failed listing."""
    return {"on_error": _raise_unless_gone} if _walks(fs) else {}


def _walks(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs.find`` is fsspec's walk, which takes ``on_error`` (and by default
    omits the directories it could not list); s3fs, memory:// and others list flat."""
    from fsspec.asyn import AsyncFileSystem

    if isinstance(fs, AsyncFileSystem):
        return type(fs)._find is AsyncFileSystem._find
    return type(fs).find is fsspec.AbstractFileSystem.find


def _raise_unless_gone(exc: BaseException) -> None:
    """A walk's failed listing: raised, unless the directory went meanwhile (deleted
    while listed: nothing under it to find)."""
    if not isinstance(exc, FileNotFoundError):
        raise exc
