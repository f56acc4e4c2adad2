"""Metadata files are JSON objects: one parse, one set of errors, for every format."""

from __future__ import annotations

import json
from typing import Any

from raylake.errors import CorruptMetadataError
from raylake.io import FileIO


def json_object(raw: bytes, path: str) -> dict[str, Any]:
    """``raw`` parsed as a JSON object; :class:`CorruptMetadataError` naming ``path`` if not."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptMetadataError(path, f"not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptMetadataError(path, "not a JSON object")
    return data


def read_json_object(file_io: FileIO, rel: str, what: str) -> tuple[dict[str, Any], str]:
    """The JSON object in the metadata file ``rel``, which must exist (a schema file a
    table or data file names), and the file's full path for the caller's errors; a
    missing file is a :class:`CorruptMetadataError` saying ``<what> is missing``."""
    path = file_io.full_path(rel)
    try:
        raw = file_io.read_bytes(rel)
    except FileNotFoundError as exc:
        raise CorruptMetadataError(path, f"{what} is missing") from exc
    return json_object(raw, path), path
