"""Checks of the loaders' public keywords, made before a table is opened or a thread
started: a wrong type or value raises :class:`~raylake.errors.InvalidArgumentError`
naming the keyword (both a TypeError and a ValueError), never a later error from deep
inside the read (a float ``batch_size`` used to fail as "slice indices must be
integers", and ``shuffle="false"`` used to shuffle)."""

from __future__ import annotations

from raylake.checks import check_count, check_flag

__all__ = ["check_count", "check_flag", "check_loader_threads"]


def check_loader_threads(value: object) -> int:
    """``loader_threads``: None or 0 for no cap (pyarrow decodes on its process-wide pool),
    else the cap."""
    return 0 if value is None else check_count("loader_threads", value)
