"""Metadata files are JSON objects: one parse, one set of errors, for every format."""

from __future__ import annotations

import json
from typing import Any

from raylake.errors import CorruptMetadataError


def json_object(raw: bytes, path: str) -> dict[str, Any]:
    """``raw`` parsed as a JSON object; :class:`CorruptMetadataError` naming ``path`` if not."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptMetadataError(path, f"not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptMetadataError(path, "not a JSON object")
    return data
