"""Checks of the table's own argument types (snapshot ids, times, column lists, URIs,
snapshot properties), so that a wrong type or value fails at the call with an
InvalidArgumentError naming the argument (never later, as a confusing error about the
table's files); the plain checks they build on are in raylake/arguments.py."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from raylake.arguments import Refusal, check_names, integer, is_int
from raylake.errors import InvalidArgumentError
from raylake.io.fileio import OBJECT_STORES


def snapshot_id_arg(value: Any, name: str = "snapshot_id") -> int | None:
    if value is None:
        return None
    number = integer(value)
    if number is None or number < 1:
        raise InvalidArgumentError(name, value, "a snapshot id (an int >= 1) or None")
    return number


def snapshot_ref_arg(value: Any) -> Any:
    """A snapshot id given as a numpy integer (one read from a DataFrame or an array of
    ids) as the Python int it is; any other value as given, for the caller's check."""
    number = integer(value)
    return value if number is None else number


def datetime_millis(value: datetime, name: str, error: Refusal = InvalidArgumentError) -> int:
    """A time as epoch milliseconds; a naive time is local, as ``datetime.timestamp()``
    takes it. A ``pandas.Timestamp`` (a datetime) is taken as the datetime it is: its
    own ``astimezone()`` needs a zone and its ``timestamp()`` reads naive times as UTC.
    A naive time that is not one in the local zone is ``error`` naming ``name``."""
    to_pydatetime = getattr(value, "to_pydatetime", None)
    if to_pydatetime is not None:
        value = to_pydatetime(warn=False)  # nanoseconds: below a millisecond anyway
    if value.tzinfo is None:
        try:
            value = value.astimezone()
        except (ValueError, OverflowError):  # 0001-01-01: "year 0 is out of range"
            raise error(name, value, LOCAL_TIME_RANGE) from None
    return int(value.timestamp() * 1000)


# Python reads a naive time as local only a day or more inside datetime's range (year 1
# to 9999), whatever the zone: astimezone() of 0001-01-01 is "year 0 is out of range".
LOCAL_TIME_RANGE = (
    "a time Python can read in the local time zone, where a time without one is read "
    "(not within a day of year 1 or 9999); give its zone, e.g. tzinfo=timezone.utc"
)


def as_of_arg(value: Any) -> datetime | int | None:
    value = snapshot_ref_arg(value)  # epoch milliseconds as a numpy integer
    if value is None or isinstance(value, datetime) or (is_int(value) and value >= 0):
        return value  # type: ignore[no-any-return]
    raise InvalidArgumentError("as_of", value, "a datetime, epoch milliseconds (an int) or None")


def columns_arg(value: Any, name: str = "columns") -> tuple[str, ...] | None:
    """A list of column names, or None; a single string is refused (is 'a,b' one name or
    two?)."""
    return None if value is None else check_names(name, value)


def uri_arg(value: Any, name: str = "uri") -> str:
    if hasattr(value, "__fspath__"):
        value = str(value.__fspath__())
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(name, value, "a non-empty path or URL string")
    scheme, sep, rest = value.partition("://")
    if sep and scheme.lower() in OBJECT_STORES and rest[:1] in ("", "/"):
        # Refused before any request: FileIO strips "s3://" to the local path "s3:", and
        # "s3:///x" asks the store for a bucket named "".
        raise InvalidArgumentError(name, value, f"a URL naming its bucket: {scheme}://BUCKET/PATH")
    return value


def properties_arg(value: Any, name: str = "properties") -> dict[str, str]:
    """Snapshot properties: strings to strings, as the snapshot file stores them."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidArgumentError(name, value, "a mapping of str to str, or None")
    return dict(value)


_FILE_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def file_prefix_arg(value: Any) -> str:
    """The start of data file names: a name, never a path ('../x' would write outside the
    bucket's directory, 'a/b' into one that does not exist)."""
    if not isinstance(value, str) or not _FILE_PREFIX.fullmatch(value):
        raise InvalidArgumentError(
            "file_prefix",
            value,
            "letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return value
