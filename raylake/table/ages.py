"""When something counts as old: the ``older_than`` arguments of maintenance."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from raylake.arguments import integer
from raylake.errors import InvalidOptionError
from raylake.table.args import datetime_millis

# An int older_than is a time in epoch milliseconds. One before 2000 cannot be a
# snapshot's or a file's: it is most likely an age meant in days or hours (7), which
# would silently match nothing, so it is refused.
_EARLIEST_MILLIS = 946_684_800_000  # 2000-01-01T00:00:00Z

# When to expire or collect: an absolute time (datetime, or epoch milliseconds) or an age.
OlderThan = datetime | timedelta | int


def cutoff_millis(older_than: OlderThan, now_millis: int, name: str = "older_than") -> int:
    """Epoch milliseconds before which something counts as old (``name``: the argument's,
    for its errors)."""
    if isinstance(older_than, bool):
        raise InvalidOptionError(name, older_than, "expected a datetime, timedelta or int")
    millis = integer(older_than)  # numpy's too, as scan(as_of=) takes them
    if millis is not None:
        if millis < _EARLIEST_MILLIS:
            when = datetime.fromtimestamp(millis / 1000, timezone.utc) if millis >= 0 else None
            raise InvalidOptionError(
                name,
                older_than,
                "an int is a time in epoch milliseconds"
                + (f" ({when.isoformat()}, before anything a table holds)" if when else "")
                + "; for an age pass a timedelta, e.g. timedelta(days=7)",
            )
        return millis
    if isinstance(older_than, timedelta):
        if older_than < timedelta(0):
            raise InvalidOptionError(name, older_than, "an age cannot be negative")
        return now_millis - int(older_than.total_seconds() * 1000)
    if isinstance(older_than, datetime):
        # Naive times are local, as in scan(as_of=).
        return datetime_millis(older_than, name, InvalidOptionError)
    raise InvalidOptionError(
        name, older_than, "expected a datetime, a timedelta or epoch milliseconds (int)"
    )
