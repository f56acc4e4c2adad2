"""A stream reader stays in the process that made it: pickling one is refused, naming
what to do instead.

A reader holds its prefetch thread, a lock and an asyncio poll, and, with a consumer,
the position its consumer file records: a copy in a Ray actor would read and commit
the same consumer as the original, each delivering the same snapshots. Pickle's own
error ("cannot pickle '_thread.lock' object") named none of that.
"""

from __future__ import annotations

from typing import NoReturn

from raylake.errors import StreamError


class NotPicklable:
    """Mixed into :class:`~raylake.streaming.reader.StreamReader`."""

    def __reduce__(self) -> NoReturn:
        raise StreamError(
            f"{type(self).__name__} cannot be pickled (sent to a Ray task or actor): make "
            "it where it reads, with raylake.open_table(uri).stream(...); a consumer_id "
            "resumes where the last reader of that consumer stopped"
        )
