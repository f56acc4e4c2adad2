"""How raylake names a temporary file: ``<name>.<uuid4 hex>.tmp``, beside the file it
becomes (local write-then-rename and create-by-link, a job's marker in a new table).
One rule for the writers that make them and for the cleanups that must tell them from
a user's files (``remove_orphan_files``, the drop of a failed new table)."""

from __future__ import annotations

import re
import uuid

TEMP_SUFFIX = ".tmp"
_TEMP_TAIL = r"\.[0-9a-f]{32}\.tmp"


def temp_path(path: str) -> str:
    """A fresh temporary name for ``path`` (unique: many writers may write one name)."""
    return f"{path}.{uuid.uuid4().hex}{TEMP_SUFFIX}"


def temp_names(name: str = ".+") -> re.Pattern[str]:
    """The temporary names of the names ``name`` (a regular expression) matches."""
    return re.compile(f"(?:{name}){_TEMP_TAIL}")
